package redisdelay_test

// Graceful shutdown: Close and running handlers, stuck handlers and
// prefetched messages. Every test uses a fresh topic and runs in parallel.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Close cancels a running handler's context and waits for its Ack, which
// counts: no one gets the message again.
func TestLifecycle_CloseWaitsForRunningHandlersAck(t *testing.T) {
	t.Parallel()
	env := setup(t)
	config := redisdelay.SubscriberConfig{
		ConsumerGroup: "g", CloseTimeout: 5 * time.Second, VisibilityTimeout: 500 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	}
	first := newSubscriber(t, env.client, config)
	ch := subscribe(t, first, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("x")))
	msg := receive(t, ch, 2*time.Second)

	cancelled := make(chan error, 1)
	go func() {
		<-msg.Context().Done()
		cancelled <- msg.Context().Err()
		time.Sleep(300 * time.Millisecond) // finishing up
		msg.Ack()
	}()
	start := time.Now()
	require.NoError(t, first.Close())
	took := time.Since(start)
	select {
	case err := <-cancelled:
		assert.ErrorIs(t, err, context.Canceled)
	default:
		t.Fatal("Close returned without cancelling the handler's context")
	}
	assert.GreaterOrEqual(t, took, 250*time.Millisecond, "Close did not wait for the handler")
	assert.Less(t, took, 3*time.Second)
	assert.Zero(t, pendingCount(t, env.client, env.topic, "g"), "the Ack was recorded before Close returned")

	second := newSubscriber(t, env.client, config)
	nothing(t, subscribe(t, second, env.topic), 1500*time.Millisecond) // > VisibilityTimeout + CheckInterval
}

// A handler that never finishes: Close gives up after CloseTimeout and the
// message goes to another consumer of the group at once, same attempt.
func TestLifecycle_CloseHandsBackMessageOfStuckHandler(t *testing.T) {
	t.Parallel()
	env := setup(t)
	stuck := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", CloseTimeout: 500 * time.Millisecond})
	other := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"}) // VisibilityTimeout 30s
	ch := subscribe(t, stuck, env.topic)
	msg := newMessage("x")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	held := receive(t, ch, 2*time.Second)
	chOther := subscribe(t, other, env.topic)

	start := time.Now()
	require.NoError(t, stuck.Close())
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, 450*time.Millisecond, "Close did not wait CloseTimeout")
	assert.Less(t, took, 2500*time.Millisecond, "Close waited far beyond CloseTimeout")
	assert.Error(t, held.Context().Err(), "handler's context cancelled")

	closed := time.Now()
	again := receive(t, chOther, 2*time.Second)
	t.Logf("Close took %s; redelivered %s after it", took, time.Since(closed))
	assert.Equal(t, msg.UUID, again.UUID)
	assert.Equal(t, "1", again.Metadata.Get(redisdelay.AttemptKey), "a hand-back keeps the attempt")
	again.Ack()
	held.Ack() // far too late: no effect
	nothing(t, chOther, 300*time.Millisecond)
	assert.Zero(t, pendingCount(t, env.client, env.topic, "g"))
}

// Prefetched messages not yet handed to a handler go back to the group as
// soon as Close starts, while the handler still finishes its own.
func TestLifecycle_CloseHandsBackPrefetchedMessagesAtOnce(t *testing.T) {
	t.Parallel()
	env := setup(t)
	first := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BatchSize: 10, CloseTimeout: 5 * time.Second})
	other := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	require.NoError(t, first.SubscribeInitialize(env.topic))
	var msgs []*message.Message
	for i := 0; i < 5; i++ {
		msgs = append(msgs, newMessage(strconv.Itoa(i)))
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	ch := subscribe(t, first, env.topic)
	handled := receive(t, ch, 2*time.Second)
	require.Equal(t, msgs[0].UUID, handled.UUID)
	chOther := subscribe(t, other, env.topic)
	nothing(t, chOther, 300*time.Millisecond) // the other four are prefetched
	require.EqualValues(t, 5, pendingCount(t, env.client, env.topic, "g"))

	go func() {
		<-handled.Context().Done()
		time.Sleep(1500 * time.Millisecond)
		handled.Ack()
	}()
	closeDone := closeAsync(first)
	var got []string
	for i := 0; i < 4; i++ {
		m := receive(t, chOther, time.Second)
		assert.Equal(t, "1", m.Metadata.Get(redisdelay.AttemptKey))
		got = append(got, m.UUID)
		m.Ack()
	}
	select {
	case <-closeDone:
		t.Error("prefetched messages came back only after Close returned")
	default:
	}
	assert.ElementsMatch(t, []string{msgs[1].UUID, msgs[2].UUID, msgs[3].UUID, msgs[4].UUID}, got)
	select {
	case <-closeDone:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	nothing(t, chOther, 300*time.Millisecond) // the handled one was acked
	assert.Zero(t, pendingCount(t, env.client, env.topic, "g"))
}
