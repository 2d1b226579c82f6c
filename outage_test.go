package redisdelay_test

// Redis outages, through an in-test TCP proxy (faultProxy, never touching the
// shared server): bounded Publish failures, resuming after an outage, a
// read reply lost in transit. Every test uses a fresh topic and runs in
// parallel.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Publish to an unreachable Redis fails within PublishTimeout (plus a
// margin) with an error naming the topic and wrapping the cause, and
// returns promptly when the message's context ends first: with a default
// client (the script runs in a goroutine of its own, as go-redis reads a
// stalled socket for its ReadTimeout of 3s), and with one that ends its
// socket waits at the context's deadline (ContextTimeoutEnabled: the
// script runs in the caller's goroutine when nothing else can end it).
func TestLifecycle_PublishFailsBoundedWhenRedisIsUnreachable(t *testing.T) {
	t.Parallel()
	for _, opts := range []redis.Options{{}, {ContextTimeoutEnabled: true}} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", opts.ContextTimeoutEnabled), func(t *testing.T) {
			t.Parallel()
			testPublishFailsBounded(t, opts)
		})
	}
}

func testPublishFailsBounded(t *testing.T, opts redis.Options) {
	proxy := newFaultProxy(t)
	env := setupOn(t, proxy.clientWith(t, opts))
	const timeout = 500 * time.Millisecond
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.client, PublishTimeout: timeout}, logger)
	require.NoError(t, err)
	patient, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.client, PublishTimeout: time.Minute}, logger)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(env.topic, newMessage("before")))
	require.NoError(t, patient.Publish(env.topic, newMessage("before")))

	publish := func(p *redisdelay.Publisher, msg *message.Message) (error, time.Duration) {
		start := time.Now()
		err := p.Publish(env.topic, msg)
		return err, time.Since(start)
	}
	check := func(t *testing.T, err error, took, bound time.Duration) {
		t.Helper()
		require.Error(t, err)
		require.ErrorContains(t, err, env.topic)
		assert.True(t, isUnreachableCause(err), "the error does not wrap its cause: %#v", err)
		assert.Less(t, took, bound, "Publish took too long: %v", err)
		t.Logf("failed after %s: %v", took, err)
	}
	resumed := func(t *testing.T) {
		t.Helper()
		require.Eventually(t, func() bool { return pub.Publish(env.topic, newMessage("after")) == nil },
			5*time.Second, 50*time.Millisecond, "Publish does not work again after Redis is back")
	}

	t.Run("refused", func(t *testing.T) {
		proxy.cut(0)
		err, took := publish(pub, newMessage("x"))
		check(t, err, took, timeout+1500*time.Millisecond)

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		msg := newMessage("x")
		msg.SetContext(ctx)
		err, took = publish(patient, msg)
		check(t, err, took, time.Second)

		proxy.restore(t)
		resumed(t)
	})
	t.Run("stalled by timeout", func(t *testing.T) {
		proxy.stall()
		defer proxy.restore(t)
		err, took := publish(pub, newMessage("x"))
		check(t, err, took, timeout+1500*time.Millisecond)
	})
	t.Run("stalled by context", func(t *testing.T) {
		proxy.stall()
		defer proxy.restore(t)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		msg := newMessage("x")
		msg.SetContext(ctx)
		err, took := publish(patient, msg)
		check(t, err, took, 300*time.Millisecond+time.Second)
	})
	t.Run("stalled, then cancelled", func(t *testing.T) {
		// A cancellation ends no socket wait of go-redis, whatever its
		// options: such a call never runs in the caller's goroutine.
		proxy.stall()
		defer proxy.restore(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer time.AfterFunc(300*time.Millisecond, cancel).Stop()
		msg := newMessage("x")
		msg.SetContext(ctx)
		err, took := publish(patient, msg)
		check(t, err, took, 300*time.Millisecond+time.Second)
	})
	resumed(t)
}

// A subscriber with its embedded scheduler loses Redis for 1.5s while
// messages, some delayed, are published: once Redis is reachable again all
// of them arrive, with nothing restarted.
func TestLifecycle_SubscriberAndSchedulerResumeAfterRedisOutage(t *testing.T) {
	t.Parallel()
	proxy := newFaultProxy(t)
	env := setup(t) // its client and pub go straight to Redis
	sub := newSubscriber(t, proxy.client(t), redisdelay.SubscriberConfig{
		ConsumerGroup: "g", CheckInterval: 200 * time.Millisecond, CloseTimeout: time.Second,
	})
	ch := subscribe(t, sub, env.topic)
	first := newMessage("first")
	require.NoError(t, env.pub.Publish(env.topic, first))
	receive(t, ch, 2*time.Second).Ack()
	time.Sleep(100 * time.Millisecond) // the subscription is back in its blocking read

	want := map[string]string{}
	publish := func(msg *message.Message) {
		require.NoError(t, env.pub.Publish(env.topic, msg))
		want[msg.UUID] = string(msg.Payload)
	}
	publish(delayed(delay.For(700*time.Millisecond), "due during the outage"))
	proxy.cut(0)
	cutAt := time.Now()
	// Let Redis notice the closed connections first: a publish it serves to
	// a blocked read before that is the lost-reply case, tested on its own
	// (TestLifecycle_ReadReplyLostInTransitIsStillDelivered).
	time.Sleep(50 * time.Millisecond)
	publish(newMessage("immediate 1"))
	publish(newMessage("immediate 2"))
	publish(delayed(delay.For(500*time.Millisecond), "delayed 0.5s"))
	publish(delayed(delay.For(2500*time.Millisecond), "due after the outage"))
	publish(newMessage("immediate 3"))
	time.Sleep(1500*time.Millisecond - time.Since(cutAt))
	proxy.restore(t)
	restored := time.Now()

	got := map[string]int{}
	deadline := time.After(8 * time.Second)
	for len(got) < len(want) {
		select {
		case m := <-ch:
			require.NotNil(t, m, "channel closed")
			_, expected := want[m.UUID]
			assert.True(t, expected, "unexpected message %q", m.Payload)
			got[m.UUID]++
			m.Ack()
		case <-deadline:
			var missing []string
			for id, p := range want {
				if got[id] == 0 {
					missing = append(missing, p)
				}
			}
			pending, _ := env.client.XPendingExt(context.Background(), &redis.XPendingExtArgs{
				Stream: shardOf(env.topic, 0).Stream(), Group: "g", Start: "-", End: "+", Count: 100,
			}).Result()
			t.Fatalf("after the outage: missing %q; pending in the ready stream: %+v", missing, pending)
		}
	}
	t.Logf("all %d delivered %s after Redis came back", len(want), time.Since(restored))
	nothing(t, ch, 300*time.Millisecond)
	for id, n := range got {
		if n > 1 {
			t.Logf("message %q delivered %d times (at-least-once)", want[id], n)
		}
	}
}

// A blocked read that Redis serves while the connection is breaking: the
// entry is assigned to the consumer but the reply never arrives. On the
// subscription's own connection the read fails, and the subscription reads
// its pending entries; through a client's pool (a client that gives no
// connection of its own) the client library retries the read on a new
// connection by itself, so the subscription sees no error, and its next
// lease renewal (not skipped after such a read) finds the entry. Either
// way the message must be delivered: re-read, or reclaimed after
// VisibilityTimeout.
func TestLifecycle_ReadReplyLostInTransitIsStillDelivered(t *testing.T) {
	t.Parallel()
	for _, pooled := range []bool{false, true} {
		t.Run(fmt.Sprintf("pooled=%v", pooled), func(t *testing.T) {
			t.Parallel()
			env := setup(t)
			readReplyLost(t, env, pooled)
		})
	}
}

func readReplyLost(t *testing.T, env *env, pooled bool) {
	proxy := newFaultProxy(t)
	const visibility = time.Second
	var client redis.UniversalClient = proxy.client(t)
	if pooled {
		client = wrappedClient{client}
	}
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{
		ConsumerGroup: "g", CheckInterval: 100 * time.Millisecond, VisibilityTimeout: visibility,
		BlockTime:    3 * time.Second, // the read is surely blocked when the connection breaks
		CloseTimeout: time.Second,
	})
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("first")))
	receive(t, ch, 2*time.Second).Ack()
	time.Sleep(200 * time.Millisecond) // back in the blocking read

	// The server side of the connections lingers after the cut: the publish
	// serves the blocked read, whose reply is lost on the way.
	proxy.cut(500 * time.Millisecond)
	lost := newMessage("reply lost")
	require.NoError(t, env.pub.Publish(env.topic, lost))
	time.Sleep(100 * time.Millisecond)
	proxy.restore(t)

	select {
	case m := <-ch:
		require.NotNil(t, m, "channel closed")
		assert.Equal(t, lost.UUID, m.UUID)
		m.Ack()
	case <-time.After(3*visibility + 2*time.Second):
		pending, _ := env.client.XPendingExt(context.Background(), &redis.XPendingExtArgs{
			Stream: shardOf(env.topic, 0).Stream(), Group: "g", Start: "-", End: "+", Count: 10,
		}).Result()
		t.Fatalf("message never delivered (%s after the outage, VisibilityTimeout %s); "+
			"pending in the ready stream: %+v", 3*visibility+2*time.Second, visibility, pending)
	}
	nothing(t, ch, 300*time.Millisecond)
}
