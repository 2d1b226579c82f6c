package redisdelay_test

// Snooze against the real test server: a handler puts a message back for a
// while without spending an attempt.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Three snoozes keep attempt 1, even with MaxAttempts 2; a real Nack then
// moves to attempt 2, and a snooze on that last attempt does not
// dead-letter it.
func TestSnooze_KeepsTheAttempt(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 2, RetryDelay: noRetry,
		CheckInterval: 100 * time.Millisecond})
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("x")))

	var attempts []string
	for i := range 6 {
		got := receive(t, ch, 3*time.Second)
		attempts = append(attempts, got.Metadata.Get(redisdelay.AttemptKey))
		switch i {
		case 3:
			got.Nack()
		case 5:
			got.Ack()
		default:
			require.NoError(t, redisdelay.Snooze(got, 20*time.Millisecond))
		}
	}
	nothing(t, ch, 300*time.Millisecond)
	assert.Equal(t, []string{"1", "1", "1", "1", "2", "2"}, attempts)
	assert.EqualValues(t, 0, groupStats(t, env.insp, env.topic, "g").DeadTotal)
}

// The snoozed message comes back after its delay, never early, and not
// much later.
func TestSnooze_DelayHonoured(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", CheckInterval: 100 * time.Millisecond})
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("x")))

	const d = 400 * time.Millisecond
	var lates []time.Duration
	for range 3 {
		got := receive(t, ch, 3*time.Second)
		start := time.Now()
		require.NoError(t, redisdelay.Snooze(got, d))
		again := receive(t, ch, 3*time.Second)
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, d, "back early")
		assert.Less(t, took, d+time.Second, "back too late")
		assert.Equal(t, "1", again.Metadata.Get(redisdelay.AttemptKey))
		lates = append(lates, took-d)
		// Put back for the next round.
		require.NoError(t, redisdelay.Snooze(again, 0))
	}
	t.Logf("snooze %s: back %v after the delay", d, lates)
	receive(t, ch, 3*time.Second).Ack()
}

// In a Router with Retry and PoisonQueue middleware, a handler returning
// Snooze's nil is no failure: no in-process retry, nothing poisoned, the
// message comes back with its attempt unchanged.
func TestSnooze_InARouter(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", CheckInterval: 100 * time.Millisecond})

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	require.NoError(t, err)
	poison, err := middleware.PoisonQueue(env.pub, env.topic+"-poison")
	require.NoError(t, err)
	router.AddMiddleware(redisdelay.RecordError, poison, middleware.Retry{MaxRetries: 3}.Middleware)
	var mu sync.Mutex
	var calls []string
	done := make(chan struct{})
	router.AddNoPublisherHandler("snoozer", env.topic, sub, func(msg *message.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, msg.Metadata.Get(redisdelay.AttemptKey))
		if len(calls) < 3 {
			return redisdelay.Snooze(msg, 50*time.Millisecond)
		}
		close(done)
		return nil
	})
	go func() { _ = router.Run(context.Background()) }()
	t.Cleanup(func() { _ = router.Close() })
	<-router.Running()

	require.NoError(t, env.pub.Publish(env.topic, newMessage("x")))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("not handled three times")
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	assert.Equal(t, []string{"1", "1", "1"}, calls)
	mu.Unlock()
	st := topicStats(t, env.insp, env.topic+"-poison")
	assert.Zero(t, st.Stream+st.Waiting, "nothing poisoned")
}

// An ordered subscription holds the partition while a snoozed message
// waits, and delivers it again, attempt unchanged, before what follows.
func TestSnooze_Ordered(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Ordered: true, MaxAttempts: 1})
	ch := subscribe(t, sub, env.topic)
	first := newMessage("first")
	require.NoError(t, env.pub.Publish(env.topic, first, newMessage("second")))

	got := receive(t, ch, 3*time.Second)
	require.Equal(t, first.UUID, got.UUID)
	start := time.Now()
	require.NoError(t, redisdelay.Snooze(got, 200*time.Millisecond))
	again := receive(t, ch, 3*time.Second)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	assert.Equal(t, first.UUID, again.UUID, "the snoozed message first")
	assert.Equal(t, "1", again.Metadata.Get(redisdelay.AttemptKey))
	again.Ack()
	second := receive(t, ch, 3*time.Second)
	assert.Equal(t, "second", string(second.Payload))
	second.Ack()
}

// Snooze refuses a negative delay or one beyond 100 years, and a message
// already acked, doing nothing.
func TestSnooze_Errors(t *testing.T) {
	msg := newMessage("x")
	for _, d := range []time.Duration{-time.Second, 101 * 365 * 24 * time.Hour} {
		err := redisdelay.Snooze(msg, d)
		require.ErrorIs(t, err, redisdelay.ErrInvalidDelay, "delay %s", d)
		assert.Contains(t, err.Error(), "0 to 100 years")
	}
	select {
	case <-msg.Nacked():
		t.Fatal("nacked by a refused Snooze")
	default:
	}
	msg.Ack()
	err := redisdelay.Snooze(msg, time.Second)
	require.Error(t, err)
	assert.False(t, errors.Is(err, redisdelay.ErrInvalidDelay))
	assert.Contains(t, err.Error(), "acked already")
	assert.Empty(t, msg.Metadata, "no snooze request left behind")
}
