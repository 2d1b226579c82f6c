package redisdelay_test

// Handler deadlines (SubscriberConfig.HandlerTimeout, HandlerTimeoutKey):
// a handler stuck on a call that never returns holds neither its
// subscription nor an ordered partition. Each test sets a timeout far
// below the default (30 minutes) so that it can wait for it.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// In a Router, a handler that hangs on its first attempt (ignoring its
// context) has its message context cancelled at the timeout; the message
// is retried at once and acked by the second attempt, whose metadata names
// the timeout. The hung handler's late Ack is ignored: the message is
// counted once, nothing stays pending, and the timeout shows in the
// metrics and in Inspector.Health.
func TestHandlerTimeout_RouterRetriesAStuckHandler(t *testing.T) {
	t.Parallel()
	env := setup(t)
	m, reg := newMetrics(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Metrics: m,
		HandlerTimeout: 300 * time.Millisecond, RetryDelay: func(int) time.Duration { return 0 }})

	release := make(chan struct{})
	cancelled := make(chan struct{})
	var mu sync.Mutex
	var attempts []string
	var lastError string
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	router.AddMiddleware(redisdelay.RecordError)
	router.AddNoPublisherHandler("h", env.topic, sub, func(msg *message.Message) error {
		attempt := msg.Metadata.Get(redisdelay.AttemptKey)
		mu.Lock()
		attempts = append(attempts, attempt)
		lastError = msg.Metadata.Get(redisdelay.ErrorKey)
		mu.Unlock()
		if attempt == "1" {
			<-msg.Context().Done() // the timeout cancels it...
			close(cancelled)
			<-release // ...but this handler ignores that, like a stuck call
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-runErr
	})
	<-router.Running()

	require.NoError(t, env.pub.Publish(env.topic, newMessage("stuck")))
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck handler's context was not cancelled")
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) == 2
	}, 10*time.Second, 10*time.Millisecond, "the second attempt runs while the first is stuck")
	mu.Lock()
	assert.Equal(t, []string{"1", "2"}, attempts)
	assert.Contains(t, lastError, "handler timed out after 300ms")
	mu.Unlock()
	close(release) // the stuck handler returns: the Router acks a message already retried

	require.Eventually(t, func() bool {
		g := groupStats(t, env.insp, env.topic, "g")
		return g.Pending+g.Retry+g.Ready == 0
	}, 10*time.Second, 20*time.Millisecond, "nothing left in flight")
	tg := map[string]string{"topic": env.topic, "consumer_group": "g"}
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_handler_timeouts_total", tg))
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_retries_total", tg))

	report, err := env.insp.Health(context.Background(), redisdelay.HealthConfig{Topics: []string{env.topic}})
	require.NoError(t, err)
	require.False(t, report.Healthy)
	require.Len(t, report.Problems, 1, "%+v", report.Problems)
	assert.Equal(t, redisdelay.ProblemHandlerTimeouts, report.Problems[0].Kind)
	assert.Equal(t, "g", report.Problems[0].Group)
	assert.Contains(t, report.Problems[0].Detail, "1 time(s)")
	assert.Contains(t, report.Problems[0].Detail, "HandlerTimeout")
	t.Logf("health: %s", report.Problems[0].Detail)

	report, err = env.insp.Health(context.Background(), redisdelay.HealthConfig{Topics: []string{env.topic}, TimedOutWithin: time.Millisecond})
	require.NoError(t, err)
	assert.True(t, report.Healthy, "a timeout older than TimedOutWithin is not a problem: %+v", report.Problems)
}

// An ordered partition moves on past a message whose handler hangs on
// every attempt: each attempt times out, it is retried in place, then
// dead-lettered with a reason naming the timeout, and the next messages
// of its key are handled, in order.
func TestHandlerTimeout_OrderedPartitionMovesOn(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, 1)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Ordered: true, MaxAttempts: 2,
		HandlerTimeout: 200 * time.Millisecond, RetryDelay: func(int) time.Duration { return 0 }})
	ch := subscribe(t, sub, env.topic)
	for seq := range 3 {
		require.NoError(t, pub.Publish(env.topic, keyedMessage("k", seq)))
	}
	var got []string
	for len(got) < 4 {
		msg := receive(t, ch, 10*time.Second)
		got = append(got, string(msg.Payload)+"/"+msg.Metadata.Get(redisdelay.AttemptKey))
		if string(msg.Payload) != "0" {
			msg.Ack()
		} // "0" is never acked nor nacked
	}
	assert.Equal(t, []string{"0/1", "0/2", "1/1", "2/1"}, got)
	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 1, 5*time.Second)
	assert.Equal(t, "0", string(dead[0].Message.Payload))
	assert.Equal(t, 2, dead[0].Attempts)
	assert.Contains(t, dead[0].Reason, "handler timed out after 200ms")
	t.Logf("reason: %s", dead[0].Reason)
}

// A message's HandlerTimeoutKey overrides the Subscriber's timeout (the
// default 30 minutes here); Publish refuses a value that is not a
// duration, saying how to set one.
func TestHandlerTimeout_PerMessage(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", RetryDelay: func(int) time.Duration { return 0 }})
	ch := subscribe(t, sub, env.topic)

	bad := newMessage("bad")
	bad.Metadata.Set(redisdelay.HandlerTimeoutKey, "soon")
	err := env.pub.Publish(env.topic, bad)
	require.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
	assert.Contains(t, err.Error(), redisdelay.HandlerTimeoutKey)
	assert.Contains(t, err.Error(), "SetHandlerTimeout")

	msg := newMessage("short")
	redisdelay.SetHandlerTimeout(msg, 200*time.Millisecond)
	require.NoError(t, env.pub.Publish(env.topic, msg))
	first := receive(t, ch, 5*time.Second)
	assert.Equal(t, "200ms", first.Metadata.Get(redisdelay.HandlerTimeoutKey))
	// Not acked: the second attempt comes once the message's timeout passed.
	second := receive(t, ch, 5*time.Second)
	assert.Equal(t, msg.UUID, second.UUID)
	assert.Equal(t, "2", second.Metadata.Get(redisdelay.AttemptKey))
	assert.True(t, strings.HasPrefix(second.Metadata.Get(redisdelay.ErrorKey), "handler timed out after 200ms"))
	second.Ack()
	first.Ack() // late: ignored
	nothing(t, ch, 300*time.Millisecond)

	unbounded := newMessage("unbounded")
	redisdelay.SetHandlerTimeout(unbounded, -1)
	assert.Equal(t, "none", unbounded.Metadata.Get(redisdelay.HandlerTimeoutKey))
	redisdelay.SetHandlerTimeout(unbounded, 0)
	assert.NotContains(t, unbounded.Metadata, redisdelay.HandlerTimeoutKey)
}

// A HandlerTimeout below a millisecond is refused, saying what to use.
func TestHandlerTimeout_Validate(t *testing.T) {
	env := setup(t)
	_, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g", HandlerTimeout: time.Nanosecond}, watermill.NopLogger{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SubscriberConfig.HandlerTimeout is 1ns: use at least 1ms")
	_, err = redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g", HandlerTimeout: -1}, watermill.NopLogger{})
	assert.NoError(t, err, "negative: no bound")
}
