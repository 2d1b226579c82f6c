package redisdelay

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
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
