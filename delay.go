package redisdelay

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
)

// AttemptKey is the metadata key that tells a handler which delivery attempt
// of the message it is handling: "1" the first time, "2" after one Nack or
// reclaim, and so on. Messages handed back unacknowledged when a subscriber
// closes keep their attempt number. Publish drops the key, so a received
// message published again (forwarded, or sent to a poison queue) starts
// over at attempt 1.
const AttemptKey = "_redisdelay_attempt"

// ErrorKey is the metadata key whose value, when a handler nacks a message
// on its last attempt, becomes the dead letter's reason. The RecordError
// middleware sets it from the handler's error. Like all metadata it travels
// with retries, so it holds the latest failure.
const ErrorKey = "_redisdelay_error"

// RecordError is a Router middleware that stores a failing handler's error
// text in the message's ErrorKey metadata, so retries and dead letters say
// why the message failed. Add it first, so it wraps the other middleware and
// sees the error the Router nacks for.
func RecordError(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		msgs, err := h(msg)
		if err != nil {
			msg.Metadata.Set(ErrorKey, err.Error())
		}
		return msgs, err
	}
}

// untilLayout always has milliseconds, which Watermill's delay.Message (whole
// seconds) never writes: a delivered message carries its until key in this
// layout, so a Nack can tell whether the handler set a new delay.
const untilLayout = "2006-01-02T15:04:05.000Z07:00"

// messageDelay returns how long after now the message is due, from
// Watermill's delay metadata, rounded up to whole milliseconds so a message
// is never early:
//
//   - _watermill_delayed_for (a Go duration, written by delay.For, delay.Until,
//     delay.NewPublisher and middleware.DelayOnError) wins. It is measured from
//     the moment Redis stores the message, by Redis's clock, so a host whose
//     clock is off does not move the due time.
//   - Otherwise _watermill_delayed_until (RFC 3339, fractions allowed) is
//     turned into a duration from now by this host's clock.
//   - Neither: due now. A zero or negative delay (delay.Until a past time) is
//     due now as well.
//
// A value that does not parse is an error naming the key and the value
// (Publish wraps it in ErrInvalidDelay).
func messageDelay(md message.Metadata, now time.Time) (time.Duration, error) {
	if v := md.Get(delay.DelayedForKey); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("metadata %s=%q is not a Go duration such as \"1.5s\" (set it with delay.Message(msg, delay.For(d)))",
				delay.DelayedForKey, v)
		}
		return roundUpMs(d), nil
	}
	if v := md.Get(delay.DelayedUntilKey); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return 0, fmt.Errorf("metadata %s=%q is not an RFC 3339 time such as \"2006-01-02T15:04:05Z\" (set it with delay.Message(msg, delay.Until(t)))",
				delay.DelayedUntilKey, v)
		}
		return roundUpMs(t.Sub(now)), nil
	}
	return 0, nil
}

func roundUpMs(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// markDelivered prepares the metadata of a message about to be handed to a
// handler: the attempt number, and the until key rewritten to the same
// instant in millisecond layout. It returns that until value so nackDelay can
// see whether a handler or middleware wrote a new delay.
func markDelivered(md message.Metadata, attempt string) string {
	md.Set(AttemptKey, attempt)
	until := md.Get(delay.DelayedUntilKey)
	if until == "" {
		return ""
	}
	if t, err := time.Parse(time.RFC3339Nano, until); err == nil {
		until = t.UTC().Format(untilLayout)
		md.Set(delay.DelayedUntilKey, until)
	}
	return until
}

// nackDelay picks the redelivery delay of a nacked message: the delay its
// metadata asks for when the handler (e.g. middleware.DelayOnError) set one
// after delivery, otherwise the configured backoff for the failed attempt.
// When the new delay metadata does not parse, the backoff is used and the
// parse error returned for logging: the message is requeued either way.
func nackDelay(md message.Metadata, deliveredUntil string, attempt int, now time.Time, backoff func(int) time.Duration) (time.Duration, error) {
	var err error
	if until := md.Get(delay.DelayedUntilKey); until != "" && until != deliveredUntil {
		var d time.Duration
		if d, err = messageDelay(md, now); err == nil {
			return d, nil
		}
	}
	if backoff == nil {
		return 0, err
	}
	return roundUpMs(backoff(attempt)), err
}
