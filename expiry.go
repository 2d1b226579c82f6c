package redisdelay

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// ExpiredPolicy is what a subscription does with a message whose deadline
// (ExpiresAtKey) has passed; see SubscriberConfig.ExpiredMessages.
type ExpiredPolicy string

const (
	// DeadLetterExpired (the default) moves an expired message to the
	// group's dead letters, with a reason starting "expired", without
	// handling it: it is not retried. The dead letter's Attempts counts
	// the deliveries it had before it expired.
	DeadLetterExpired ExpiredPolicy = "dead-letter"
	// DropExpired acknowledges an expired message without handling it,
	// logging it at Info level: nothing is kept.
	DropExpired ExpiredPolicy = "drop"
)

// expiredReason is the dead-letter reason of a message whose deadline
// passed before now, or "" when it may be delivered. A deadline that does
// not parse (Publish refuses it: another tool wrote the message) does not
// expire it, since nobody can tell when it would; the error is returned
// for logging.
func expiredReason(md message.Metadata, now time.Time) (string, error) {
	t, err := messageExpiry(md)
	if err != nil || t.IsZero() || !now.After(t) {
		return "", err
	}
	return fmt.Sprintf("expired: its deadline %s (metadata %s) passed %s before it could be delivered",
		md.Get(ExpiresAtKey), ExpiresAtKey, now.Sub(t).Round(time.Millisecond)), nil
}

// expire settles, instead of delivering it, a message whose deadline has
// passed, as SubscriberConfig.ExpiredMessages says: checked before each
// attempt, so an expired message is never handled nor retried. It reports
// whether it did, and whether the entry is to be acknowledged (dropped).
func (sub *subscription) expire(ctx context.Context, e entry, msg *message.Message, attempt int) (expired, acked bool) {
	s := sub.s
	reason, err := expiredReason(msg.Metadata, s.now())
	if err != nil {
		s.limiter.errorf(s.logger, "redisdelay: message has an unreadable deadline; delivering it", err,
			sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "message_uuid": msg.UUID}))
	}
	if reason == "" {
		return false, false
	}
	if s.config.ExpiredMessages == DropExpired {
		s.logger.Info("redisdelay: message expired; dropping it (ExpiredMessages is DropExpired)",
			sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "message_uuid": msg.UUID, "reason": reason}))
		sub.m.expired(false)
		return true, true
	}
	sub.settle(ctx, func(ctx context.Context) error {
		return sub.settleNack(ctx, e, attempt, 0, store.Encode(msg), reason, nackExpired)
	})
	return true, false
}
