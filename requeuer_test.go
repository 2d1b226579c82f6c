package redisdelay_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/requeuer"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// runRequeuer runs rq until the test ends.
func runRequeuer(t *testing.T, rq *redisdelay.DelayedRequeuer) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- rq.Run(context.Background()) }()
	t.Cleanup(func() {
		assert.NoError(t, rq.Close())
		assert.NoError(t, <-done)
	})
	<-rq.Running()
}

// A handler that fails a message four times, beside one that never fails:
// each failure sends the message to the requeue topic, where it waits the
// DelayOnError interval (200 ms doubling), and comes back to its topic;
// the fifth delivery succeeds. The Subscriber allows 2 attempts only
// (MaxAttempts: 2) and nothing is dead-lettered: each requeue is a new
// message to it, at attempt 1, while requeuer.RetriesKey counts the
// requeues. Middleware added after the requeuer's sees the handler's
// error: RecordError's text travels with the requeued message, and a
// PoisonQueueWithFilter takes a hopeless message away, never requeued.
func TestDelayedRequeuer_RetriesWithGrowingDelayUntilSuccess(t *testing.T) {
	t.Parallel()
	const fails = 4
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 2})
	tp, requeueTopic := topic(), topic()
	rq, err := redisdelay.NewDelayedRequeuer(redisdelay.DelayedRequeuerConfig{
		Client:       env.client,
		RequeueTopic: requeueTopic, // the default "requeue" would be shared with other tests running at once
		DelayOnError: &middleware.DelayOnError{InitialInterval: 200 * time.Millisecond, MaxInterval: 10 * time.Second, Multiplier: 2},
	}, logger)
	require.NoError(t, err)

	type delivery struct {
		at                      time.Time
		payload, attempt, error string
		retries                 int
	}
	deliveries := make(chan delivery, 16)
	var mu sync.Mutex
	failed := map[string]int{}
	errHopeless := errors.New("hopeless")
	poison, err := middleware.PoisonQueueWithFilter(env.pub, env.topic, func(err error) bool { return errors.Is(err, errHopeless) })
	require.NoError(t, err)
	router := newRouter(t)
	router.AddMiddleware(rq.Middleware()...)
	router.AddMiddleware(redisdelay.RecordError, poison)
	router.AddNoPublisherHandler("h", tp, sub, func(msg *message.Message) error {
		retries, _ := strconv.Atoi(msg.Metadata.Get(requeuer.RetriesKey))
		deliveries <- delivery{time.Now(), string(msg.Payload), msg.Metadata.Get(redisdelay.AttemptKey), msg.Metadata.Get(redisdelay.ErrorKey), retries}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case string(msg.Payload) == "hopeless":
			return errHopeless
		case string(msg.Payload) == "flaky" && failed[msg.UUID] < fails:
			failed[msg.UUID]++
			return errors.New("not yet")
		}
		return nil
	})
	runRouter(t, router)
	runRequeuer(t, rq)

	poisoned := subscribe(t, sub, env.topic)
	require.NoError(t, env.pub.Publish(tp, newMessage("flaky"), newMessage("fine"), newMessage("hopeless")))
	var flakyAt []time.Time
	hopeless := 0
	for len(flakyAt) < fails+1 {
		select {
		case d := <-deliveries:
			assert.Equal(t, "1", d.attempt, "a requeued message is a new message to the Subscriber")
			if d.payload == "hopeless" {
				hopeless++
			}
			if d.payload != "flaky" {
				assert.Zero(t, d.retries, d.payload)
				continue
			}
			assert.Equal(t, len(flakyAt), d.retries, "requeuer.RetriesKey")
			if len(flakyAt) > 0 {
				assert.Equal(t, "not yet", d.error, "RecordError's text on the requeued message")
			}
			flakyAt = append(flakyAt, d.at)
		case <-time.After(10 * time.Second):
			t.Fatalf("flaky message delivered %d times of %d", len(flakyAt), fails+1)
		}
	}
	for i := 1; i < len(flakyAt); i++ {
		intended := 200 * time.Millisecond << (i - 1)
		checkGap(t, "requeue "+strconv.Itoa(i), flakyAt[i].Sub(flakyAt[i-1]), intended, 300*time.Millisecond)
	}
	select {
	case d := <-deliveries:
		t.Fatalf("delivered again after it succeeded: %+v", d)
	case <-time.After(300 * time.Millisecond):
	}
	p := receive(t, poisoned, 5*time.Second)
	p.Ack()
	assert.Equal(t, "hopeless", string(p.Payload))
	assert.Equal(t, 1, hopeless, "deliveries of the poisoned message: it was requeued")
	assert.Zero(t, groupStats(t, env.insp, tp, "g").DeadTotal, "dead letters of the handler's group")
	assert.Zero(t, topicStats(t, env.insp, requeueTopic).Waiting, "still waiting on the requeue topic")
}

// A message on the requeue topic without PoisonQueue's topic metadata
// cannot be requeued: the default GeneratePublishTopic's error is a Nack,
// so the message stays in the requeuer's group for a retry (and would end
// in its dead letters), nothing lost.
func TestDelayedRequeuer_MessageWithoutTopicIsRetriedNotLost(t *testing.T) {
	t.Parallel()
	env := setup(t)
	rq, err := redisdelay.NewDelayedRequeuer(redisdelay.DelayedRequeuerConfig{Client: env.client, RequeueTopic: env.topic}, logger)
	require.NoError(t, err)
	runRequeuer(t, rq)

	require.NoError(t, newPublisher(t, env.client).Publish(env.topic, newMessage("no topic")))
	require.Eventually(t, func() bool {
		return groupStats(t, env.insp, env.topic, "requeuer").Retry == 1
	}, 10*time.Second, 20*time.Millisecond, "the message is waiting for its retry in the requeuer's group")
}

// The zero value plus Client works, and so does DelayOnError with a
// multiplier of 1 (watermill-sql's default: the same delay every time).
// Every setting that cannot work is in TestBadInput_Config.
func TestDelayedRequeuerConfig_Defaults(t *testing.T) {
	t.Parallel()
	env := setup(t)
	for _, config := range []redisdelay.DelayedRequeuerConfig{
		{Client: env.client},
		{Client: env.client, DelayOnError: &middleware.DelayOnError{InitialInterval: time.Second, MaxInterval: time.Second, Multiplier: 1}},
	} {
		rq, err := redisdelay.NewDelayedRequeuer(config, nil)
		require.NoError(t, err)
		require.NoError(t, rq.Close())
	}
}

// Run returns when Close is called, or its context is done; it runs once,
// and not after Close; Close may come first, and twice.
func TestDelayedRequeuer_RunAndClose(t *testing.T) {
	t.Parallel()
	env := setup(t)
	newRequeuer := func() *redisdelay.DelayedRequeuer {
		rq, err := redisdelay.NewDelayedRequeuer(redisdelay.DelayedRequeuerConfig{Client: env.client, RequeueTopic: topic()}, nil)
		require.NoError(t, err)
		return rq
	}

	rq := newRequeuer()
	done := make(chan error, 1)
	go func() { done <- rq.Run(context.Background()) }()
	<-rq.Running()
	require.ErrorContains(t, rq.Run(context.Background()), "Run called twice")
	require.NoError(t, rq.Close())
	select {
	case err := <-done:
		require.NoError(t, err)
	default:
		t.Fatal("Close returned before Run")
	}
	require.NoError(t, rq.Close(), "Close again")

	rq = newRequeuer()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- rq.Run(ctx) }()
	<-rq.Running()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10s after its context was cancelled")
	}
	require.NoError(t, rq.Close())

	rq = newRequeuer()
	require.NoError(t, rq.Close(), "Close before Run")
	require.ErrorIs(t, rq.Run(context.Background()), redisdelay.ErrClosed)
}
