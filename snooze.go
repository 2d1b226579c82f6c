package redisdelay

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
)

// Snooze puts a delivered message back to its consumer group, to be
// delivered again after d, without spending an attempt: the redelivery
// carries the same AttemptKey, and a message snoozed on its last attempt
// does not go to the dead letters. It nacks the message; an Ordered
// subscription holds the message's partition meanwhile, as for a retry.
// The due time is measured from the Nack by Redis's clock, so the message
// is never back early.
//
// In a Router handler, return its result:
//
//	if !ready(msg) {
//		return redisdelay.Snooze(msg, 30*time.Second)
//	}
//
// On success it returns nil, so the Router's middleware (Retry,
// PoisonQueue, RecordError...) sees no failure and the Router's Ack that
// follows is a no-op, the message being nacked already. An error means
// nothing was done: a negative d, or one beyond 100 years, wraps
// ErrInvalidDelay; a message already acked cannot be put back. Returned
// from a handler, that error makes the Router nack the message as a
// failed attempt.
func Snooze(msg *message.Message, d time.Duration) error {
	if d < 0 || d > meta.MaxDelay {
		return fmt.Errorf("%w: Snooze of message %q for %s: use a delay from 0 to 100 years", ErrInvalidDelay, msg.UUID, meta.DescribeDelay(d))
	}
	msg.Metadata.Set(meta.SnoozeKey, d.String())
	if !msg.Nack() {
		delete(msg.Metadata, meta.SnoozeKey)
		return fmt.Errorf("redisdelay: Snooze of message %q, which was acked already: call Snooze instead of Ack", msg.UUID)
	}
	return nil
}
