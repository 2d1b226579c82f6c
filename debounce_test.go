package redisdelay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// A burst of 10 publishes with one business key leaves one waiting
// message, the last (its UUID and body), delivered once: under
// ReplaceWaiting (debounce) due after the last publish's delay, each
// publish moving the due time; under ReplaceKeepDue (throttle) due exactly
// when the first was. In topics of 1 and 4 partitions.
func TestBusinessKey_Burst(t *testing.T) {
	t.Parallel()
	for _, policy := range []redisdelay.BusinessKeyPolicy{redisdelay.ReplaceWaiting, redisdelay.ReplaceKeepDue} {
		for _, parts := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/%d", policy, parts), func(t *testing.T) {
				t.Parallel()
				burst(t, setup(t), policy, parts)
			})
		}
	}
}

func burst(t *testing.T, env *env, policy redisdelay.BusinessKeyPolicy, parts int) {
	const (
		n       = 10
		wait    = 500 * time.Millisecond
		spacing = 20 * time.Millisecond
	)
	ctx := context.Background()
	pub := env.publisher(t, redisdelay.PublisherConfig{Partitions: parts,
		TopicBusinessKeyPolicy: map[string]redisdelay.BusinessKeyPolicy{env.topic: policy}})
	var firstDue, lastSent time.Time
	var last *message.Message
	for i := range n {
		last = businessKeyMessage("job-1", wait, fmt.Sprint("v", i), "")
		lastSent = time.Now()
		require.NoError(t, pub.Publish(env.topic, last))
		w, found, err := env.insp.FindWaitingKey(ctx, env.topic, "job-1")
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, last.UUID, w.Message.UUID)
		if i == 0 {
			firstDue = w.Due
		}
		time.Sleep(spacing)
	}
	w, found, err := env.insp.FindWaitingKey(ctx, env.topic, "job-1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, fmt.Sprint("v", n-1), string(w.Message.Payload))
	require.EqualValues(t, 1, topicStats(t, env.insp, env.topic).Waiting)
	require.Equal(t, map[string]string{"job-1": last.UUID}, businessKeyState(t, env.topic, redisdelay.PartitionOf("job-1", parts)))
	if policy == redisdelay.ReplaceWaiting {
		require.False(t, w.Due.Before(lastSent.Add(wait).Truncate(time.Millisecond)), "due after the last publish's delay")
		require.GreaterOrEqual(t, w.Due.Sub(firstDue), (n-1)*spacing, "moved by the burst")
	} else {
		require.Equal(t, firstDue, w.Due, "due when the first message was")
	}
	t.Logf("%s: due %s after the first publish's due", policy, w.Due.Sub(firstDue))

	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts})
	ch := subscribe(t, sub, env.topic)
	got := receive(t, ch, 3*time.Second)
	require.False(t, time.Now().Before(w.Due), "early")
	require.Equal(t, last.UUID, got.UUID)
	require.Equal(t, fmt.Sprint("v", n-1), string(got.Payload))
	got.Ack()
	nothing(t, ch, 500*time.Millisecond)
}

// ReplaceKeepDue: an immediate message replacing a holder waits for the
// holder's due time and holds the key; without a holder a message keeps
// its own due time (an immediate one is sent at once); an immediate
// message whose UUID waits under another key is refused.
func TestBusinessKey_ReplaceKeepDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	pub := env.publisher(t, redisdelay.PublisherConfig{BusinessKeyPolicy: redisdelay.ReplaceKeepDue})

	first := businessKeyMessage("order-1", time.Hour, "first", "")
	require.NoError(t, pub.Publish(env.topic, first))
	due := waitingScore(t, env.topic, first.UUID)
	now := businessKeyMessage("order-1", 0, "now", "")
	require.NoError(t, pub.Publish(env.topic, now))
	got := content(t, env.topic)
	require.Equal(t, []string{now.UUID}, got.waiting, "the immediate message waits in the holder's place")
	require.EqualValues(t, 0, got.ready)
	require.Equal(t, due, waitingScore(t, env.topic, now.UUID), "the holder's score, exactly")
	require.Equal(t, map[string]string{"order-1": now.UUID}, businessKeyState(t, env.topic, 0))

	require.NoError(t, pub.Publish(env.topic, businessKeyMessage("order-2", 0, "free", "")))
	require.EqualValues(t, 1, content(t, env.topic).ready, "no holder: sent at once")
	own := businessKeyMessage("order-3", 2*time.Hour, "own", "")
	require.NoError(t, pub.Publish(env.topic, own))
	w, _, err := env.insp.FindWaiting(ctx, env.topic, own.UUID)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), w.Due, time.Second, "no holder: its own due time")

	// an immediate message with order-3 and the UUID of the order-1 holder
	clash := businessKeyMessage("order-3", 0, "clash", "")
	clash.UUID = now.UUID
	before := topicState(t, env.topic)
	err = pub.Publish(env.topic, clash)
	require.ErrorIs(t, err, redisdelay.ErrDuplicateMessage)
	require.Equal(t, before, topicState(t, env.topic))
}

// ReplaceKeepDue within one script run: a message replacing one accepted
// earlier in the same run takes the score that one took, whether it came
// from a holder waiting before the run or from its own delay.
func TestBusinessKey_ReplaceKeepDueCoalesced(t *testing.T) {
	t.Parallel()
	env := setupGated(t, redisdelay.PublisherConfig{BusinessKeyPolicy: redisdelay.ReplaceKeepDue})
	old := businessKeyMessage("a", time.Hour, "old", "")
	require.NoError(t, env.pub.Publish(env.topic, old))
	due := waitingScore(t, env.topic, old.UUID)
	first, second := twoInFlight(t, env.proxy, env.pub, env.topic)

	a1 := businessKeyMessage("a", 3*time.Hour, "a1", "") // replaces old: its score
	a2 := businessKeyMessage("a", 0, "a2", "")           // replaces a1: old's score
	b1 := businessKeyMessage("b", time.Hour, "b1", "")   // no holder: its own delay
	b2 := businessKeyMessage("b", 0, "b2", "")           // replaces b1: b1's delay
	b3 := businessKeyMessage("b", 5*time.Hour, "b3", "") // replaces b2: b1's delay
	calls := []*message.Message{a1, a2, b1, b2, b3}
	errs := make([]chan error, len(calls))
	for i, msg := range calls {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- env.pub.Publish(env.topic, msg) }()
		awaitQueued(t, env.pub, env.topic, i+1)
	}
	start := time.Now()
	env.proxy.open()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	for i := range errs {
		require.NoError(t, <-errs[i])
	}
	require.Equal(t, map[string]string{"a": a2.UUID, "b": b3.UUID}, businessKeyState(t, env.topic, 0))
	require.Equal(t, due, waitingScore(t, env.topic, a2.UUID))
	bDue := time.UnixMilli(int64(waitingScore(t, env.topic, b3.UUID)) / 1024)
	require.WithinDuration(t, start.Add(time.Hour), bDue, time.Second)
	require.Len(t, content(t, env.topic).waiting, 2)
}
