package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// SetDueAt writes the instant with milliseconds, rounded up, and drops the
// duration Publish would prefer; a zero time removes both.
func TestSetDueAt_Metadata(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage(watermill.NewUUID(), nil)
	delay.Message(msg, delay.For(time.Hour))
	at := time.Date(2030, 1, 2, 3, 4, 5, 123_400_000, time.FixedZone("CET", 3600))
	redisdelay.SetDueAt(msg, at)
	assert.Equal(t, "2030-01-02T02:04:05.124Z", msg.Metadata.Get(delay.DelayedUntilKey), "UTC, to the ms, never before the instant")
	assert.NotContains(t, msg.Metadata, delay.DelayedForKey)
	redisdelay.SetDueAt(msg, at.Truncate(time.Millisecond))
	assert.Equal(t, "2030-01-02T02:04:05.123Z", msg.Metadata.Get(delay.DelayedUntilKey), "a whole ms stays")
	redisdelay.SetDueAt(msg, time.Time{})
	assert.Empty(t, msg.Metadata, "due at once")
}

// A message made due with SetDueAt is due at the instant, late by no more
// than its Publish took, near (the waiting set) and far (the far tier):
// delay.Until, called a while before Publish, is late by that while.
func TestSetDueAt_IsDueAtTheInstant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	pub := newPublisher(t, client)
	insp := newInspector(t, client)
	tp := topic()
	// Instants just after a whole second: delay.Until's until key (the end
	// of its second) then comes after its duration, which decides.
	for _, ahead := range []time.Duration{2 * time.Second, time.Minute} {
		at := time.Now().Add(ahead).Truncate(time.Second).Add(time.Second + 123*time.Millisecond + 400*time.Microsecond)
		exact := message.NewMessage(watermill.NewUUID(), nil)
		redisdelay.SetDueAt(exact, at)
		until := message.NewMessage(watermill.NewUUID(), nil)
		delay.Message(until, delay.Until(at))
		const gap = 100 * time.Millisecond // between delay.Until and Publish
		time.Sleep(gap)
		start := time.Now()
		require.NoError(t, pub.Publish(tp, exact, until))
		took := time.Since(start)

		w, ok, err := insp.FindWaiting(ctx, tp, exact.UUID)
		require.NoError(t, err)
		require.True(t, ok)
		ceil := at.Truncate(time.Millisecond).Add(time.Millisecond)
		assert.False(t, w.Due.Before(ceil), "%s ahead: due %s, before %s", ahead, w.Due, at)
		// Publish turned the instant into a delay, rounded up to the ms,
		// that Redis counts from its own ms, rounded up too.
		assert.LessOrEqual(t, w.Due.Sub(ceil), took+2*time.Millisecond, "%s ahead: due %s, %s after %s; Publish took %s", ahead, w.Due, w.Due.Sub(at), at, took)

		w, ok, err = insp.FindWaiting(ctx, tp, until.UUID)
		require.NoError(t, err)
		require.True(t, ok)
		assert.GreaterOrEqual(t, w.Due.Sub(at), gap, "%s ahead: delay.Until is late by the time before Publish", ahead)
	}
}

// Delivered to a subscription at the instant, never before.
func TestSetDueAt_Delivered(t *testing.T) {
	t.Parallel()
	pub, sub := newPubSub(t, "g")
	tp := topic()
	ch := subscribe(t, sub, tp)
	defer sub.Close()
	at := time.Now().Add(700 * time.Millisecond)
	msg := message.NewMessage(watermill.NewUUID(), nil)
	redisdelay.SetDueAt(msg, at)
	require.NoError(t, pub.Publish(tp, msg))
	got := receive(t, ch, 5*time.Second)
	now := time.Now()
	got.Ack()
	assert.False(t, now.Before(at), "delivered %s early", at.Sub(now))
	assert.Less(t, now.Sub(at), time.Second, "delivered %s late", now.Sub(at))
}
