package meta

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// UntilLayout always has milliseconds, which Watermill's delay.Message (whole
// seconds) never writes: a delivered message carries its until key in this
// layout, so a Nack can tell whether the handler set a new delay, and a
// Publish of the message again reads it as an exact instant already reached.
const UntilLayout = "2006-01-02T15:04:05.000Z07:00"

// MaxDuration is what time.Time.Sub returns for instants too far apart.
const MaxDuration = time.Duration(math.MaxInt64)

// durationSyntax is the form time.ParseDuration reads: a value of that
// form it refuses is out of range, not malformed.
var durationSyntax = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// Delay returns how long after now the message is due, from
// Watermill's delay metadata, rounded up to whole milliseconds so a message
// is never early. Watermill's delay.Message writes both keys: the duration
// (_watermill_delayed_for, exact) and the instant it ends
// (_watermill_delayed_until, truncated to whole seconds). The message is due
// at whichever comes first of:
//
//   - the duration, measured from the moment Redis stores the message, by
//     Redis's clock;
//   - the until instant, by this host's clock: exactly, when it has a
//     fraction of a second (MarkDelivered writes one) or comes without a
//     duration; otherwise at the end of its second, as the intended instant
//     lies somewhere within it.
//
// So a fresh message is due after its duration, to the millisecond, while a
// message published again later (forwarded from an outbox, fanned in,
// requeued, poisoned) is due by its until instant and does not wait its
// duration a second time. No metadata, or a due time in the past, is due
// now. A delay too large for a time.Duration comes back as MaxDuration. A
// value that does not parse is an error naming the key and the value
// (Publish wraps it in ErrInvalidDelay).
func Delay(md message.Metadata, now time.Time) (time.Duration, error) {
	d, hasFor := time.Duration(0), false
	if v := md.Get(delay.DelayedForKey); v != "" {
		var err error
		if d, _, err = store.ParseFor(v); err != nil {
			if durationSyntax.MatchString(v) {
				return 0, fmt.Errorf("metadata %s=%q is out of range: a delay is at most %s (about 292 years); for a due time, use delay.Until",
					delay.DelayedForKey, v, time.Duration(math.MaxInt64).Truncate(time.Hour))
			}
			return 0, fmt.Errorf("metadata %s=%q is not a Go duration such as \"1.5s\" (set it with delay.Message(msg, delay.For(d)))",
				delay.DelayedForKey, v)
		}
		hasFor = true
	}
	if v := md.Get(delay.DelayedUntilKey); v != "" {
		t, _, err := store.ParseUntil(v)
		if err != nil {
			return 0, fmt.Errorf("metadata %s=%q is not an RFC 3339 time such as \"2006-01-02T15:04:05Z\" (set it with delay.Message(msg, delay.Until(t)))",
				delay.DelayedUntilKey, v)
		}
		if hasFor && !hasFraction(v) {
			t = t.Add(time.Second)
		}
		if u := t.Sub(now); !hasFor || u < d {
			d = u
		}
	}
	return RoundUpMs(d), nil
}

// hasFraction reports whether an RFC 3339 time has a fraction of a second
// (after the seconds, at byte 19 of a four-digit year).
func hasFraction(v string) bool {
	return len(v) > 19 && (v[19] == '.' || v[19] == ',')
}

// RoundUpMs rounds d up to whole milliseconds, saturating instead of
// overflowing: a delay of about 292 years or more stays MaxDuration (beyond
// any limit), never wraps round to negative (due now).
func RoundUpMs(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if d > MaxDuration-time.Millisecond {
		return MaxDuration
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// DescribeDelay is a delay for error messages.
func DescribeDelay(d time.Duration) string {
	if d == MaxDuration {
		return "more than 292 years"
	}
	return d.String()
}

// MarkDelivered prepares the metadata of a message about to be handed to a
// handler: the attempt number, and the until key set, in millisecond
// layout, to an instant already reached and not before the message was due:
// its until instant as Delay reads it (the end of a whole second
// that came with a duration, as the due instant lies within that second),
// but never after now, the delivery; or now when it had a duration only. A
// received message published again is then due at once unless a handler
// sets a new delay. It returns that until value so a Nack can tell
// whether a handler or middleware wrote a new delay.
func MarkDelivered(md message.Metadata, attempt string, now time.Time) string {
	md.Set(AttemptKey, attempt)
	until := md.Get(delay.DelayedUntilKey)
	switch {
	case until != "":
		t, _, err := store.ParseUntil(until)
		if err != nil {
			return until // left as it is: Publish refuses it with ErrInvalidDelay
		}
		if md.Get(delay.DelayedForKey) != "" && !hasFraction(until) {
			t = t.Add(time.Second)
		}
		if t.After(now) {
			t = now
		}
		until = FormatUntilMs(t)
	case md.Get(delay.DelayedForKey) != "":
		until = FormatUntilMs(now)
	default:
		return ""
	}
	md.Set(delay.DelayedUntilKey, until)
	return until
}

// FormatUntilMs formats t in UTC in UntilLayout, as time.Format would:
// it runs once per delivered message with delay metadata, so it takes the
// time package's fast path for time.RFC3339 (whole seconds, "Z" in UTC)
// and adds the milliseconds, instead of interpreting UntilLayout.
func FormatUntilMs(t time.Time) string {
	t = t.UTC()
	var buf [32]byte
	b := t.AppendFormat(buf[:0], time.RFC3339)
	if len(b) != 20 || b[19] != 'Z' {
		return t.Format(UntilLayout) // a year outside 0-9999
	}
	ms := t.Nanosecond() / int(time.Millisecond)
	b = append(b[:19], '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
	return string(b)
}

// ApplyContextDelays gives each message the delay that delay.WithContext
// put in its context, as delay.NewPublisher does before publishing: a
// message whose metadata already has a duration (delay.DelayedForKey)
// keeps its own, any other gets both delay keys written from the context's
// delay.Delay (delay.Message), on the caller's message. So code written for
// watermill-sql's delayed publisher (a CommandBus or EventBus sending with
// delay.WithContext, a handler returning messages with such a context) needs
// no delay.NewPublisher around this Publisher. A message without a delay in
// its context costs one map lookup and one context lookup, and is left
// untouched.
func ApplyContextDelays(messages []*message.Message) {
	if ContextDelayKey == nil {
		return
	}
	for _, msg := range messages {
		if msg == nil || msg.Metadata.Get(delay.DelayedForKey) != "" {
			continue // nil: prepare refuses it with a clear error
		}
		if d, ok := msg.Context().Value(ContextDelayKey).(delay.Delay); ok {
			delay.Message(msg, d)
		}
	}
}

// ContextDelayKey is the context key under which delay.WithContext stores
// a delay. Watermill does not export it (its type is unexported), so it is
// learnt once from Watermill's own delay publisher: asked to publish a
// message whose context records the keys it is looked up by, it looks up
// this one. Nil if that ever stops working (a Watermill upgrade), which
// TestContextDelay catches.
var ContextDelayKey = learnContextDelayKey()

func learnContextDelayKey() any {
	rec := &keyRecorder{Context: context.Background()}
	msg := message.NewMessage("learn-context-delay-key", nil)
	msg.SetContext(rec)
	pub, err := delay.NewPublisher(discardPublisher{}, delay.PublisherConfig{AllowNoDelay: true})
	if err != nil {
		return nil
	}
	if err := pub.Publish("learn-context-delay-key", msg); err != nil {
		return nil
	}
	// The key found must be the one delay.WithContext uses.
	probe := delay.WithContext(context.Background(), delay.For(time.Second))
	for _, k := range rec.keys {
		if _, ok := probe.Value(k).(delay.Delay); ok {
			return k
		}
	}
	return nil
}

// keyRecorder is a context that records every key it is asked for.
type keyRecorder struct {
	context.Context
	keys []any
}

func (r *keyRecorder) Value(key any) any {
	r.keys = append(r.keys, key)
	return r.Context.Value(key)
}

// discardPublisher publishes nowhere.
type discardPublisher struct{}

func (discardPublisher) Publish(string, ...*message.Message) error { return nil }
func (discardPublisher) Close() error                              { return nil }
