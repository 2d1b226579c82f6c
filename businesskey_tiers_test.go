package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// keyTiers are due times that put a message in the waiting set (near: due
// before the far tier starts, at the test binary's short far timing) and
// in the far tier (issue 37: a business key or a priority no longer keeps a
// message out of it).
var keyTiers = []struct {
	name string
	due  time.Duration
	far  bool
}{
	{"near", time.Second, false},
	{"far", time.Hour, true},
}

// inFar reports whether the far tier of partition 0 holds uuid.
func inFar(t *testing.T, tp, uuid string) bool {
	t.Helper()
	_, ok, err := redisdelay.FarPeek(context.Background(), newClient(t), tp, 0, uuid)
	require.NoError(t, err)
	return ok
}

// Every business-key policy, Find, Reschedule and Cancel by key mean the
// same for a holder in either tier. No scheduler runs: what waits stays.
func TestBusinessKey_PoliciesInBothTiers(t *testing.T) {
	t.Parallel()
	for _, tier := range keyTiers {
		t.Run(tier.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := setup(t)

			first := businessKeyMessage("order", tier.due, "first", "")
			require.NoError(t, env.pub.Publish(env.topic, first))
			require.Equal(t, tier.far, inFar(t, env.topic, first.UUID), "the tier of a keyed message")
			require.Equal(t, map[string]string{"order": first.UUID}, businessKeyState(t, env.topic, 0))
			require.NoError(t, env.pub.Publish(env.topic, first.Copy()), "an identical re-publish is a no-op")

			// reject (the default)
			err := env.pub.Publish(env.topic, businessKeyMessage("order", tier.due, "second", ""))
			require.ErrorIs(t, err, redisdelay.ErrDuplicateBusinessKey)
			require.ErrorContains(t, err, first.UUID)
			// keep first
			require.NoError(t, env.pub.Publish(env.topic, businessKeyMessage("order", tier.due, "dropped", redisdelay.KeepFirst)))
			w, ok, err := env.insp.FindWaitingKey(ctx, env.topic, "order")
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, "first", string(w.Message.Payload))

			// replace
			third := businessKeyMessage("order", tier.due, "third", redisdelay.ReplaceWaiting)
			require.NoError(t, env.pub.Publish(env.topic, third))
			_, ok, err = env.insp.FindWaiting(ctx, env.topic, first.UUID)
			require.NoError(t, err)
			assert.False(t, ok, "the holder is replaced")
			require.Equal(t, tier.far, inFar(t, env.topic, third.UUID))
			require.Equal(t, map[string]string{"order": third.UUID}, businessKeyState(t, env.topic, 0))
			due := waitingScore(t, env.topic, third.UUID)

			// replace, keeping the holder's due time: an immediate message waits in its place
			now := businessKeyMessage("order", 0, "now", redisdelay.ReplaceKeepDue)
			require.NoError(t, env.pub.Publish(env.topic, now))
			require.Equal(t, due, waitingScore(t, env.topic, now.UUID), "the holder's score, exactly")
			require.Equal(t, map[string]string{"order": now.UUID}, businessKeyState(t, env.topic, 0))
			assert.EqualValues(t, 0, content(t, env.topic).ready)

			// keep last if active, while waiting: replaces
			last := businessKeyMessage("order", tier.due, "last", redisdelay.KeepLastIfActive)
			require.NoError(t, env.pub.Publish(env.topic, last))
			w, ok, err = env.insp.FindWaitingKey(ctx, env.topic, "order")
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, "last", string(w.Message.Payload))
			assert.Equal(t, []string{last.UUID}, content(t, env.topic).waiting)

			// reschedule and cancel by key
			to := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
			moved, err := env.pub.RescheduleKey(ctx, env.topic, "order", to)
			require.NoError(t, err)
			require.True(t, moved)
			w, ok, err = env.insp.FindWaitingKey(ctx, env.topic, "order")
			require.NoError(t, err)
			require.True(t, ok)
			assert.WithinDuration(t, to, w.Due, time.Second)
			cancelled, err := env.pub.CancelKey(ctx, env.topic, "order")
			require.NoError(t, err)
			require.True(t, cancelled)
			cancelled, err = env.pub.CancelKey(ctx, env.topic, "order")
			require.NoError(t, err)
			require.False(t, cancelled, "once")
			require.Empty(t, businessKeyState(t, env.topic, 0))
			require.Empty(t, content(t, env.topic).waiting)
			require.Zero(t, content(t, env.topic).bodies)
		})
	}
}

// A keyed, high-priority message in the far tier keeps both when it is
// unpacked: delivered on time, first (high priority), and its key freed
// once delivered; a UUID reused with another body is refused in either
// tier, and an identical re-publish is delivered once.
func TestFar_KeyAndPriorityRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	at := time.Now().Add(4 * time.Second)
	high := businessKeyMessage("order-h", 0, "high", "")
	delay.Message(high, delay.Until(at))
	high.Metadata.Set(redisdelay.PriorityKey, redisdelay.PriorityHigh)
	plain := delayed(delay.Until(at.Add(-time.Millisecond)), "plain")
	require.NoError(t, env.pub.Publish(env.topic, plain, high))
	require.True(t, inFar(t, env.topic, high.UUID), "a keyed high-priority message waits in the far tier")

	changed := high.Copy()
	changed.Payload = message.Payload("changed")
	require.ErrorIs(t, env.pub.Publish(env.topic, changed), redisdelay.ErrDuplicateMessage)
	require.NoError(t, env.pub.Publish(env.topic, high.Copy()), "identical: a no-op")

	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)
	got := map[string]int{}
	for range 2 {
		msg := receive(t, ch, 10*time.Second)
		got[string(msg.Payload)]++
		assert.False(t, time.Now().Before(at.Add(-time.Millisecond)), "never early")
		msg.Ack()
	}
	assert.Equal(t, map[string]int{"high": 1, "plain": 1}, got)
	nothing(t, ch, 300*time.Millisecond)
	require.Eventually(t, func() bool {
		keys, err := env.client.HLen(ctx, shardOf(env.topic, 0).Bkeys()).Result()
		return err == nil && keys == 0
	}, 5*time.Second, 10*time.Millisecond, "the key is freed once delivered")
	prio, err := env.client.HLen(ctx, shardOf(env.topic, 0).Prio()).Result()
	require.NoError(t, err)
	assert.Zero(t, prio)
}

// A far keyed message whose UUID is waiting already when it is unpacked
// (published again due too soon to be looked up in the far tier: see
// FarArgOf) leaves the waiting one in place, as before, and frees its key
// rather than leaving it marked far with no far message behind it.
func TestFar_UnpackedOverWaitingUUIDFreesKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	far := businessKeyMessage("order-x", time.Hour, "far", "")
	require.NoError(t, env.pub.Publish(env.topic, far))
	require.True(t, inFar(t, env.topic, far.UUID))
	_, _, margin := redisdelay.FarTier()
	near := delayed(delay.For(margin/2), "near") // not looked up in the far tier
	near.UUID = far.UUID
	require.NoError(t, env.pub.Publish(env.topic, near))

	moved, err := redisdelay.UnpackFarNow(ctx, env.client, env.topic, 0)
	require.NoError(t, err)
	assert.Zero(t, moved, "the waiting message stays")
	assert.Empty(t, businessKeyState(t, env.topic, 0), "the key is free")
	assert.Equal(t, []string{near.UUID}, content(t, env.topic).waiting)
	w, ok, err := newInspector(t, env.client).FindWaiting(ctx, env.topic, near.UUID)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "near", string(w.Message.Payload))
}
