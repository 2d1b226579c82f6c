package redisdelay_test

// Attempt limits and dead letters, and input that is not a message, against the
// real test server. Every test uses a fresh topic and runs in parallel.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// A Router handler that always fails, with RecordError: the message is
// delivered exactly MaxAttempts times, then lands in the group's dead
// letters as published, with the handler's last error as the reason.
func TestLifecycle_FailingHandlerDeadLettersAfterMaxAttemptsWithItsError(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 3, RetryDelay: noRetry})

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	require.NoError(t, err)
	router.AddMiddleware(redisdelay.RecordError)
	var mu sync.Mutex
	var attempts []string
	router.AddNoPublisherHandler("always-fails", env.topic, sub, func(msg *message.Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, msg.Metadata.Get(redisdelay.AttemptKey))
		return fmt.Errorf("payment service said no (try %d)", len(attempts))
	})
	go func() { _ = router.Run(context.Background()) }()
	t.Cleanup(func() { _ = router.Close() })
	<-router.Running()

	msg := newMessage("charge order 42")
	msg.Metadata.Set("order", "42")
	require.NoError(t, env.pub.Publish(env.topic, msg))

	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 1, 5*time.Second)
	time.Sleep(300 * time.Millisecond) // time for a wrong fourth delivery
	mu.Lock()
	assert.Equal(t, []string{"1", "2", "3"}, attempts, "deliveries (attempt numbers)")
	mu.Unlock()

	d := dead[0]
	require.NotNil(t, d.Message, "dead letter not decodable: %q", d.Body)
	assert.Equal(t, msg.UUID, d.Message.UUID)
	assert.Equal(t, "charge order 42", string(d.Message.Payload))
	assert.Equal(t, "42", d.Message.Metadata.Get("order"), "original metadata kept")
	assert.Equal(t, "payment service said no (try 3)", d.Message.Metadata.Get(redisdelay.ErrorKey))
	assert.Equal(t, 3, d.Attempts)
	assert.Equal(t, "payment service said no (try 3)", d.Reason)
	assert.WithinDuration(t, time.Now(), d.Time, 5*time.Second)

	g := groupStats(t, env.insp, env.topic, "g")
	assert.EqualValues(t, 1, g.Dead)
	assert.EqualValues(t, 1, g.DeadTotal)
	assert.Zero(t, g.Pending+g.Retry+g.Ready, "nothing left in flight: %+v", g)
}

// Nacked by hand, without RecordError: the reason says which attempt it was
// and points at ErrorKey.
func TestLifecycle_NackedByHandDeadLetterReasonMentionsErrorKey(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 3, RetryDelay: noRetry})
	ch := subscribe(t, sub, env.topic)

	msg := newMessage("x")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	for attempt := 1; attempt <= 3; attempt++ {
		got := receive(t, ch, 2*time.Second)
		assert.Equal(t, strconv.Itoa(attempt), got.Metadata.Get(redisdelay.AttemptKey))
		got.Nack()
	}
	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 1, 2*time.Second)
	nothing(t, ch, 300*time.Millisecond)
	assert.Equal(t, msg.UUID, dead[0].Message.UUID)
	assert.Equal(t, 3, dead[0].Attempts)
	assert.Contains(t, dead[0].Reason, "attempt 3 of 3")
	assert.Contains(t, dead[0].Reason, redisdelay.ErrorKey)
}

// MaxAttempts < 0: no limit, well past the default bound of 16.
func TestLifecycle_NegativeMaxAttemptsRetriesForever(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: -1, RetryDelay: noRetry})
	ch := subscribe(t, sub, env.topic)

	msg := newMessage("x")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	for attempt := 1; attempt <= 20; attempt++ {
		got := receive(t, ch, 2*time.Second)
		require.Equal(t, msg.UUID, got.UUID)
		require.Equal(t, strconv.Itoa(attempt), got.Metadata.Get(redisdelay.AttemptKey))
		if attempt < 20 {
			got.Nack()
		} else {
			got.Ack()
		}
	}
	nothing(t, ch, 200*time.Millisecond)
	g := groupStats(t, env.insp, env.topic, "g")
	assert.Zero(t, g.Dead)
	assert.Zero(t, g.DeadTotal)
}

// MaxDeadLetters bounds the dead letters: the oldest is evicted, and the
// eviction is counted.
func TestLifecycle_DeadLettersBeyondMaxDeadLettersEvictTheOldest(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 1, MaxDeadLetters: 2})
	ch := subscribe(t, sub, env.topic)

	msgs := []*message.Message{newMessage("0"), newMessage("1"), newMessage("2")}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	for range msgs {
		receive(t, ch, 2*time.Second).Nack()
	}
	require.Eventually(t, func() bool { return groupStats(t, env.insp, env.topic, "g").DeadTotal == 3 }, 2*time.Second, 20*time.Millisecond)

	g := groupStats(t, env.insp, env.topic, "g")
	assert.EqualValues(t, 2, g.Dead)
	assert.EqualValues(t, 3, g.DeadTotal)
	assert.EqualValues(t, 1, g.DeadEvicted)
	dead, err := env.insp.DeadLetters(context.Background(), env.topic, "g", "", 10)
	require.NoError(t, err)
	require.Len(t, dead, 2)
	assert.Equal(t, msgs[1].UUID, dead[0].Message.UUID, "the oldest was evicted")
	assert.Equal(t, msgs[2].UUID, dead[1].Message.UUID)
}

// Entries that are not messages (another tool wrote them) go to the dead
// letters with their raw bytes, and the subscription carries on.
func TestLifecycle_UndecodableEntriesGoToDeadLettersAndDeliveryContinues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	stream := shardOf(env.topic, 0).Stream()
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	require.NoError(t, env.client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"m", "not a message"}}).Err())
	require.NoError(t, env.client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"x", "y"}}).Err())
	valid := newMessage("valid")
	require.NoError(t, env.pub.Publish(env.topic, valid))

	ch := subscribe(t, sub, env.topic)
	got := receive(t, ch, 2*time.Second)
	assert.Equal(t, valid.UUID, got.UUID)
	got.Ack()
	nothing(t, ch, 200*time.Millisecond)

	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 2, 2*time.Second)
	assert.Nil(t, dead[0].Message)
	assert.Equal(t, "not a message", string(dead[0].Body))
	assert.Contains(t, dead[0].Reason, "corrupt")
	assert.Equal(t, 1, dead[0].Attempts)
	assert.Nil(t, dead[1].Message)
	assert.Empty(t, dead[1].Body)
	assert.Contains(t, dead[1].Reason, "corrupt")
	assert.Contains(t, dead[1].Reason, "no field m")
	assert.Zero(t, pendingCount(t, env.client, env.topic, "g"))
}
