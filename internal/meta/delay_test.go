package meta

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The delay rule on its own, at a fixed instant: which of the two keys
// decides, to the millisecond.
func TestDelay_MessageDelayRule(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 300_000_000, time.UTC) // 03:04:05.300
	whole := func(d time.Duration) string { return now.Add(d).Truncate(time.Second).Format(time.RFC3339) }
	for _, c := range []struct {
		name       string
		forV, unto string
		want       time.Duration
	}{
		{"fresh delay.For: the duration, to the millisecond", "1.5s", whole(1500 * time.Millisecond), 1500 * time.Millisecond},
		{"fresh delay.For ending late in a second", "650ms", whole(650 * time.Millisecond), 650 * time.Millisecond},
		{"duration only", "2s", "", 2 * time.Second},
		{"whole-second until only: exactly then", "", whole(3 * time.Second), 2700 * time.Millisecond},
		{"fractional until only", "", now.Add(1234 * time.Millisecond).Format(time.RFC3339Nano), 1234 * time.Millisecond},
		// Published 2s after it was created (a forwarder behind): its until
		// second ends before its duration would, from now.
		{"late: the end of the until second", "3s", whole(time.Second), 1700 * time.Millisecond},
		{"late past the until second: now", "1s", whole(-time.Second), 0},
		// Delivered, then published again: MarkDelivered's exact instant,
		// already reached, wins over a duration of 30 minutes.
		{"delivered: due now", "30m0s", now.Add(-time.Minute).Format(UntilLayout), 0},
		{"delivered this very millisecond", "30m0s", now.Format(UntilLayout), 0},
		{"past delay.Until", "-3s", whole(-3 * time.Second), 0},
		{"year 9999 saturates", "2562047h47m16.854775807s", "9999-12-31T00:00:00Z", MaxDuration},
		{"year 9999 until only saturates", "", "9999-12-31T00:00:00Z", MaxDuration},
		{"largest duration only saturates", "2562047h47m16.854775807s", "", MaxDuration},
	} {
		t.Run(c.name, func(t *testing.T) {
			md := message.Metadata{}
			if c.forV != "" {
				md.Set(delay.DelayedForKey, c.forV)
			}
			if c.unto != "" {
				md.Set(delay.DelayedUntilKey, c.unto)
			}
			d, err := Delay(md, now)
			require.NoError(t, err)
			assert.Equal(t, c.want, d)
		})
	}
}

func TestDelay_RoundUpMsSaturates(t *testing.T) {
	assert.Equal(t, time.Millisecond, RoundUpMs(time.Nanosecond))
	assert.Equal(t, time.Duration(0), RoundUpMs(-time.Hour))
	assert.Equal(t, MaxDuration, RoundUpMs(MaxDuration))
	assert.Equal(t, MaxDuration, RoundUpMs(MaxDuration-time.Microsecond))
	assert.Equal(t, (MaxDuration - time.Millisecond).Truncate(time.Millisecond), RoundUpMs((MaxDuration - time.Millisecond).Truncate(time.Millisecond)))
}

// A delivered message's until key is the instant it became due, never after
// the delivery: a handler publishing it again sends it due at once.
func TestDelay_MarkDelivered(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 300_000_000, time.UTC)
	for _, c := range []struct {
		name       string
		forV, unto string
		want       string
	}{
		{"delay.Message's until: the end of its second, in millisecond layout", "1s", "2030-01-02T03:04:03Z", "2030-01-02T03:04:04.000Z"},
		{"other zones become UTC", "1s", "2030-01-02T04:04:03+01:00", "2030-01-02T03:04:04.000Z"},
		{"the end of its second not reached yet: the delivery", "1s", "2030-01-02T03:04:05Z", "2030-01-02T03:04:05.300Z"},
		{"an until without a duration is exact", "", "2030-01-02T03:04:05Z", "2030-01-02T03:04:05.000Z"},
		{"an until with a fraction is exact", "1s", "2030-01-02T03:04:05.100Z", "2030-01-02T03:04:05.100Z"},
		{"an until ahead of the delivery (a clock behind Redis's) is the delivery", "1s", "2030-01-02T03:04:06Z", "2030-01-02T03:04:05.300Z"},
		{"a duration only: the delivery", "1s", "", "2030-01-02T03:04:05.300Z"},
		{"no delay: nothing", "", "", ""},
		{"unparsable: left as it is", "", "soon", "soon"},
	} {
		t.Run(c.name, func(t *testing.T) {
			md := message.Metadata{}
			if c.forV != "" {
				md.Set(delay.DelayedForKey, c.forV)
			}
			if c.unto != "" {
				md.Set(delay.DelayedUntilKey, c.unto)
			}
			got := MarkDelivered(md, "2", now)
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.want, md.Get(delay.DelayedUntilKey))
			assert.Equal(t, "2", md.Get(AttemptKey))
			if c.want != "" && c.want != "soon" {
				d, err := Delay(md, now)
				require.NoError(t, err)
				assert.Zero(t, d, "published again, it would wait")
			}
		})
	}
}

// The context key of delay.WithContext is learnt from Watermill at start
// (a Watermill upgrade that changed how delay.NewPublisher reads it would
// leave it nil, and context delays unapplied).
func TestDelay_ContextDelayKeyLearnt(t *testing.T) {
	require.NotNil(t, ContextDelayKey)
	ctx := delay.WithContext(context.Background(), delay.For(time.Minute))
	_, ok := ctx.Value(ContextDelayKey).(delay.Delay)
	require.True(t, ok)
}

// routerLikeContext is a message context as a Router handler's produced
// messages have it: the subscription's cancelable context under the five
// values the Router adds.
func routerLikeContext(t testing.TB) context.Context {
	type key int
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for i := range 5 {
		ctx = context.WithValue(ctx, key(i), "v")
	}
	return ctx
}

// A message without a delay in its context costs the Publish path no
// allocation (and is left untouched).
func TestApplyContextDelays_NoDelayNoAllocation(t *testing.T) {
	plain := message.NewMessage("a", nil)
	routed := message.NewMessage("b", nil)
	routed.SetContext(routerLikeContext(t))
	msgs := []*message.Message{plain, routed}
	allocs := testing.AllocsPerRun(100, func() { ApplyContextDelays(msgs) })
	assert.Zero(t, allocs)
	assert.Empty(t, plain.Metadata)
	assert.Empty(t, routed.Metadata)
}

// BenchmarkApplyContextDelays is what Publish spends per message on
// delay.WithContext: with no delay in a plain or a Router's context (the
// hot path), and writing one.
func BenchmarkApplyContextDelays(b *testing.B) {
	routed := message.NewMessage("b", nil)
	routed.SetContext(routerLikeContext(b))
	withDelay := message.NewMessage("c", nil)
	withDelay.SetContext(delay.WithContext(routerLikeContext(b), delay.For(time.Minute)))
	for _, c := range []struct {
		name string
		msg  *message.Message
	}{
		{"none-background", message.NewMessage("a", nil)},
		{"none-router-context", routed},
		{"delay-in-context", withDelay},
	} {
		b.Run(c.name, func(b *testing.B) {
			msgs := []*message.Message{c.msg}
			b.ReportAllocs()
			for range b.N {
				// written again each time, as for a new message
				delete(c.msg.Metadata, delay.DelayedForKey)
				ApplyContextDelays(msgs)
			}
		})
	}
}
