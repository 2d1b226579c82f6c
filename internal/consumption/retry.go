package consumption

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// The retry policy: when a delivery fails, whether the message comes back,
// and after how long. It is applied on two paths, and decided here for
// both:
//
//   - Nack (and a handler timeout, which counts as a failed attempt): the
//     subscription decides (nack): the delay is the one the handler set in
//     the message's delay metadata after delivery (middleware.DelayOnError),
//     else SubscriberConfig.RetryDelay for the attempt (DefaultRetryDelay by
//     default); past MaxAttempts, or a delay beyond the 100-year limit, the
//     message goes to the dead letters. nack.lua carries it out: the
//     group's retry set (lib.lua's retry_later) or its redelivery stream,
//     or the dead letters. An ordered subscription retries in place instead
//     (retriesInPlace), before any later message of its partition.
//   - Reclaim: a message held past the visibility timeout by a consumer
//     that stopped renewing it is retried by a scheduler, which may run in
//     a process that never saw this config: so the policy is stored in
//     Redis with the group (groupPolicy, written by init.lua into the
//     group's meta hash) and reclaim.lua applies it, with the delays of
//     RetryDelay evaluated here for the first attempts.
//
// A snoozed message (Snooze) comes back after its snooze without spending
// an attempt. The pause after the library's own failures (a Redis error) is
// not this policy: see internal/pause.

func (sub *subscription) nack(ctx context.Context, e entry, msg *message.Message, attempt int, deliveredUntil string) error {
	s := sub.s
	if d, snoozed := takeSnooze(msg.Metadata); snoozed {
		return sub.settleNack(ctx, e, attempt, d, store.EncodeAt(msg, sub.lvl.Level()), "", nackSnoozed)
	}
	d, err := nackDelay(msg.Metadata, deliveredUntil, attempt, s.now(), s.config.RetryDelay)
	reason := ""
	switch {
	case errors.Is(err, errDelayTooFar):
		reason = err.Error()
	case err != nil:
		s.logger.Error("redisdelay: nacked message has invalid delay metadata; using RetryDelay", err,
			sub.fields().Add(watermill.LogFields{"message_uuid": msg.UUID}))
	}
	if max := s.config.MaxAttempts; reason == "" && max > 0 && attempt >= max {
		reason = msg.Metadata.Get(meta.ErrorKey)
		if reason == "" {
			reason = fmt.Sprintf("nacked on attempt %d of %d (set metadata %s, e.g. with the RecordError middleware, to record why)",
				attempt, max, meta.ErrorKey)
		}
	}
	return sub.settleNack(ctx, e, attempt, d, store.EncodeAt(msg, sub.lvl.Level()), reason, nackFailed)
}

// retriesInPlace reports whether a nacked message is retried by the
// subscription itself: in ordered subscriptions, unless it was the last
// attempt.
func (sub *subscription) retriesInPlace(attempt int) bool {
	max := sub.s.config.MaxAttempts
	return sub.order != nil && (max <= 0 || attempt < max)
}

// errDelayTooFar marks a Nack whose delay metadata asks for more than
// meta.MaxDelay: such a message goes to the dead letters, with the error as
// the reason, rather than waiting for centuries (or, once the delay
// overflowed, coming back at once).
var errDelayTooFar = errors.New("redisdelay: nack delay too far")

// nackDelay picks the redelivery delay of a nacked message: the delay its
// metadata asks for when the handler (e.g. middleware.DelayOnError) set one
// after delivery, otherwise the configured backoff for the failed attempt.
// When the new delay metadata does not parse, the backoff is used and the
// parse error returned for logging: the message is requeued either way.
// When it asks for more than meta.MaxDelay, the error wraps errDelayTooFar
// and the message is to be dead-lettered.
func nackDelay(md message.Metadata, deliveredUntil string, attempt int, now time.Time, backoff func(int) time.Duration) (time.Duration, error) {
	var err error
	if until := md.Get(delay.DelayedUntilKey); until != "" && until != deliveredUntil {
		var d time.Duration
		if d, err = meta.Delay(md, now); err == nil {
			if d > meta.MaxDelay {
				return 0, fmt.Errorf("%w: the handler asked for a redelivery delay of %s (metadata %s=%q, %s=%q), beyond the limit of 100 years: set a shorter delay (e.g. DelayOnError's MaxInterval), then requeue the dead letter",
					errDelayTooFar, meta.DescribeDelay(d), delay.DelayedUntilKey, until, delay.DelayedForKey, md.Get(delay.DelayedForKey))
			}
			return d, nil
		}
	}
	if backoff == nil {
		return 0, err
	}
	return meta.RoundUpMs(backoff(attempt)), err
}

// takeSnooze removes a Snooze request from a nacked message's metadata
// and returns its delay.
func takeSnooze(md message.Metadata) (time.Duration, bool) {
	v, ok := md[meta.SnoozeKey]
	if !ok {
		return 0, false
	}
	delete(md, meta.SnoozeKey)
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		// Set by hand, not by Snooze: a plain Nack.
		return 0, false
	}
	return meta.RoundUpMs(d), true
}
