package redisdelay_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/components/fanin"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/components/requeuer"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Watermill's components publish received messages again, with the delay
// metadata they arrived with. These tests run the real components on the
// adapter and check each gap against the delay Watermill intends: never
// early, and not a second delay on top.

// The port of Watermill's _examples/real-world-examples/delayed-requeue:
// PoisonQueue and DelayOnError on the handler send a failed message to a
// requeue topic, delayed by DelayOnError; the requeuer publishes it back.
// Each retry comes after the DelayOnError interval, which doubles.
func TestRepublish_RequeuerWithDelayOnError(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	requeueTopic := topic()

	poison, err := middleware.PoisonQueue(env.pub, requeueTopic)
	require.NoError(t, err)
	router := newRouter(t)
	router.AddMiddleware(poison, (&middleware.DelayOnError{
		InitialInterval: 400 * time.Millisecond, MaxInterval: 10 * time.Second, Multiplier: 2,
	}).Middleware)
	const fails = 3
	deliveries := make(chan time.Time, 10)
	router.AddNoPublisherHandler("h", env.topic, sub, func(msg *message.Message) error {
		deliveries <- time.Now()
		if n, _ := strconv.Atoi(msg.Metadata.Get(requeuer.RetriesKey)); n < fails {
			return errors.New("fails")
		}
		return nil
	})
	runRouter(t, router)

	rqRouter := newRouter(t)
	_, err = requeuer.NewRequeuer(requeuer.Config{
		Subscriber: sub, SubscribeTopic: requeueTopic, Publisher: env.pub, Router: rqRouter,
		GeneratePublishTopic: func(p requeuer.GeneratePublishTopicParams) (string, error) {
			return p.Message.Metadata.Get(middleware.PoisonedTopicKey), nil
		},
	}, logger)
	require.NoError(t, err)
	runRouter(t, rqRouter)

	require.NoError(t, env.pub.Publish(env.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	prev := receiveTime(t, deliveries, 2*time.Second)
	for i, intended := range []time.Duration{400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond} {
		at := receiveTime(t, deliveries, 2*intended+2*time.Second)
		checkGap(t, "retry "+strconv.Itoa(i+1), at.Sub(prev), intended, 100*time.Millisecond)
		prev = at
	}
}

// components/fanin republishes what it receives: a message delayed 1s is
// delivered on the target topic 1s after it was published, not 2s.
func TestRepublish_FanIn(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	dst := topic()
	f, err := fanin.NewFanIn(sub, env.pub, fanin.Config{SourceTopics: []string{env.topic}, TargetTopic: dst, CloseTimeout: time.Second}, logger)
	require.NoError(t, err)
	go func() { _ = f.Run(context.Background()) }()
	t.Cleanup(func() { _ = f.Close() })
	<-f.Running()
	ch := subscribe(t, sub, dst)

	start := time.Now()
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(time.Second), "x")))
	msg := receive(t, ch, 3*time.Second)
	msg.Ack()
	checkGap(t, "fanned in", time.Since(start), time.Second, 100*time.Millisecond)
}

// laggingPublisher is an outbox that hands messages on lag after they were
// published, like a forwarder running behind.
type laggingPublisher struct {
	message.Publisher
	lag time.Duration
	wg  sync.WaitGroup
}

func (p *laggingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		time.Sleep(p.lag)
		_ = p.Publisher.Publish(topic, msgs...)
	}()
	return nil
}

// components/forwarder 2s behind: a delay.For message already due when it
// is forwarded is delivered at once; a delay.Until message still ahead is
// delivered at its instant, or at most by the end of its until second (the
// metadata does not say where in that second the instant was), never
// before.
func TestRepublish_ForwarderWithLag(t *testing.T) {
	t.Parallel()
	const lag = 2 * time.Second
	env := setup(t)
	sub := env.subscriber(t, "g")
	outbox := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, logger)
	fwdTopic := topic()
	fwd, err := forwarder.NewForwarder(outbox, env.pub, logger, forwarder.Config{ForwarderTopic: fwdTopic, CloseTimeout: time.Second})
	require.NoError(t, err)
	go func() { _ = fwd.Run(context.Background()) }()
	t.Cleanup(func() { _ = fwd.Close() })
	<-fwd.Running()
	lagging := &laggingPublisher{Publisher: outbox, lag: lag}
	t.Cleanup(lagging.wg.Wait)
	out := forwarder.NewPublisher(lagging, forwarder.PublisherConfig{ForwarderTopic: fwdTopic})
	ch := subscribe(t, sub, env.topic)

	start := time.Now()
	dueFor := start.Add(time.Second)
	forMsg := delayed(delay.For(time.Second), "for")
	dueUntil := start.Add(3500 * time.Millisecond)
	untilMsg := delayed(delay.Until(dueUntil), "until")
	require.NoError(t, out.Publish(env.topic, forMsg))
	require.NoError(t, out.Publish(env.topic, untilMsg))

	for range 2 {
		msg := receive(t, ch, 5*time.Second)
		at := time.Now()
		msg.Ack()
		switch string(msg.Payload) {
		case "for":
			t.Logf("delay.For(1s) forwarded %s late: delivered %s after publish", lag, at.Sub(start).Round(time.Millisecond))
			assert.False(t, at.Before(dueFor), "delay.For delivered early")
			assert.Less(t, at.Sub(start), lag+300*time.Millisecond, "delay.For: already due when forwarded, yet delayed again")
		case "until":
			endOfSecond := dueUntil.Truncate(time.Second).Add(time.Second)
			t.Logf("delay.Until(+3.5s) forwarded %s late: delivered %s after its instant (end of its second: %s)",
				lag, at.Sub(dueUntil).Round(time.Millisecond), endOfSecond.Sub(dueUntil).Round(time.Millisecond))
			assert.False(t, at.Before(dueUntil), "delay.Until delivered early")
			assert.Less(t, at.Sub(endOfSecond), 300*time.Millisecond, "delay.Until delivered past the end of its until second")
		}
	}
}

// PoisonQueue publishes a failed message as it was received: its copy is
// due at once, though the message had been delayed.
func TestRepublish_PoisonQueueCopyIsDueAtOnce(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	poisonTopic := topic()
	poison, err := middleware.PoisonQueue(env.pub, poisonTopic)
	require.NoError(t, err)
	router := newRouter(t)
	failed := make(chan time.Time, 1)
	router.AddMiddleware(signalAfter(failed), poison)
	router.AddNoPublisherHandler("h", env.topic, sub, func(*message.Message) error { return errors.New("poison") })
	runRouter(t, router)
	ch := subscribe(t, sub, poisonTopic)

	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(1500*time.Millisecond), "x")))
	at := receiveTime(t, failed, 3*time.Second)
	msg := receive(t, ch, 3*time.Second)
	msg.Ack()
	gap := time.Since(at)
	t.Logf("poisoned copy of a message delayed 1.5s arrived %s after the failure (intended: at once)", gap.Round(time.Millisecond))
	assert.Less(t, gap, 300*time.Millisecond, "the poisoned copy was delayed again")
	assert.Equal(t, "poison", msg.Metadata.Get(middleware.ReasonForPoisonedKey))
}

// signalAfter is an outermost middleware reporting when a handler call,
// with the middleware inside it, has failed.
func signalAfter(failed chan<- time.Time) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			msgs, err := h(msg)
			select {
			case failed <- time.Now():
			default:
			}
			return msgs, err
		}
	}
}

// A received message published again does not hold its business key: two
// failed messages with one key are both requeued (each copy waiting for
// DelayOnError's interval), where the second used to be refused with
// ErrDuplicateBusinessKey, nacked, and (MaxAttempts 1) dead-lettered. The
// copies keep the key in their metadata.
func TestRepublish_PoisonedCopiesDoNotHoldBusinessKey(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g", func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = 1 })
	requeueTopic := topic()
	const interval = time.Second
	poison, err := middleware.PoisonQueue(env.pub, requeueTopic)
	require.NoError(t, err)
	router := newRouter(t)
	failed := make(chan time.Time, 4)
	router.AddMiddleware(signalAfter(failed), poison, (&middleware.DelayOnError{
		InitialInterval: interval, MaxInterval: interval, Multiplier: 1,
	}).Middleware)
	handled := make(chan time.Time, 4) // before DelayOnError reads the clock: gaps from here are never short
	router.AddNoPublisherHandler("h", env.topic, sub, func(*message.Message) error {
		handled <- time.Now()
		return errors.New("fails")
	})
	runRouter(t, router)
	ch := subscribe(t, sub, requeueTopic)

	withKey := func(payload string) *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte(payload))
		m.Metadata.Set(redisdelay.BusinessKey, "order-1")
		return m
	}
	require.NoError(t, env.pub.Publish(env.topic, withKey("first")))
	firstFailed := receiveTime(t, handled, 2*time.Second)
	receiveTime(t, failed, 2*time.Second) // its copy is published: now the second
	require.NoError(t, env.pub.Publish(env.topic, withKey("second")))
	secondFailed := receiveTime(t, handled, 2*time.Second)

	got := map[string]time.Time{}
	for range 2 {
		var msg *message.Message
		select {
		case msg = <-ch:
		case <-time.After(3 * time.Second):
			dead, err := env.insp.DeadLetters(context.Background(), env.topic, "g", "", 10)
			require.NoError(t, err)
			for _, d := range dead {
				t.Logf("dead letter %q: %s", d.Message.Payload, d.Reason)
			}
			t.Fatalf("copies received: %v; %d dead letters", got, len(dead))
		}
		got[string(msg.Payload)] = time.Now()
		assert.Equal(t, "order-1", msg.Metadata.Get(redisdelay.BusinessKey), "the copy keeps the key in its metadata")
		msg.Ack()
	}
	require.Contains(t, got, "first")
	require.Contains(t, got, "second", "the second message with the key was not requeued")
	checkGap(t, "first copy", got["first"].Sub(firstFailed), interval, 100*time.Millisecond)
	checkGap(t, "second copy", got["second"].Sub(secondFailed), interval, 100*time.Millisecond)
}

// middleware.DelayOnError on Nack: the retry intervals grow 1x, 2x, 4x, 8x,
// each measured from the failure.
func TestRepublish_DelayOnErrorGrowsOnNack(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	router := newRouter(t)
	router.AddMiddleware((&middleware.DelayOnError{
		InitialInterval: 200 * time.Millisecond, MaxInterval: 10 * time.Second, Multiplier: 2,
	}).Middleware)
	deliveries := make(chan time.Time, 10)
	router.AddNoPublisherHandler("h", env.topic, sub, func(msg *message.Message) error {
		deliveries <- time.Now()
		if msg.Metadata.Get(redisdelay.AttemptKey) != "5" {
			return errors.New("fails")
		}
		return nil
	})
	runRouter(t, router)

	require.NoError(t, env.pub.Publish(env.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	prev := receiveTime(t, deliveries, 2*time.Second)
	for i, intended := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond} {
		at := receiveTime(t, deliveries, 2*intended+2*time.Second)
		checkGap(t, "retry "+strconv.Itoa(i+1), at.Sub(prev), intended, 100*time.Millisecond)
		prev = at
	}
}

// A received message's context ends at its Ack (as in watermill-redisstream
// and watermill-sql), and Publish runs with the first message's context: so
// publishing a received message again after acking it fails with "context
// canceled" (docs/coming-from.md). Publishing before the Ack, or with
// another context, works. The context ends once the subscription sees the
// Ack, just after Ack returns: the test waits for that.
func TestRepublish_AfterAckNeedsAnotherContext(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("x")))
	msg := receive(t, ch, 5*time.Second)
	require.True(t, msg.Ack())
	select {
	case <-msg.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the message's context did not end after its Ack")
	}

	err := env.pub.Publish(env.topic+"-copy", msg)
	require.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "context canceled")

	msg.SetContext(context.Background())
	require.NoError(t, env.pub.Publish(env.topic+"-copy", msg))
}
