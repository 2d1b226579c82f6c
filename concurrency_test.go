package redisdelay_test

// The concurrency cap (SubscriberConfig.Concurrency): at most N handlers
// of a group run at once on a topic, across subscribers (each on its own
// client, as separate processes), at start, after Pause/Resume and when a
// backlog reaches idle subscribers; a dead holder's slot lapses.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// ccHandlers runs a handler per message, as a Router does, and records
// how many run at once.
type ccHandlers struct {
	running, most, done atomic.Int64
}

func (h *ccHandlers) consume(ch <-chan *message.Message, hold time.Duration) {
	go func() {
		for msg := range ch {
			go func() {
				n := h.running.Add(1)
				for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
				}
				time.Sleep(hold)
				h.running.Add(-1)
				h.done.Add(1)
				msg.Ack()
			}()
		}
	}()
}

// At most 2 handlers of the group run at once on a topic of 4 partitions,
// however many subscribers (each able to run 4): while a backlog is
// consumed from the start, after Pause and Resume, and when a backlog
// reaches subscribers that were idle; and the 2 slots are used.
func TestConcurrency_CapHoldsAcrossSubscribers(t *testing.T) {
	const limit, parts = 2, 4
	for _, subs := range []int{1, 3, 6} {
		t.Run(fmt.Sprintf("%d subscribers", subs), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := setup(t)
			idle := topic()
			pub := newPartitionedPublisher(t, env.client, parts)
			publish := func(tp string, n int) {
				for i := range n {
					require.NoError(t, pub.Publish(tp, keyedMessage(fmt.Sprint(i), i)))
				}
			}
			publish(env.topic, 100)
			config := redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, Concurrency: limit}
			var hb, hi ccHandlers
			for range subs {
				sub := newSubscriber(t, newClient(t), config)
				hb.consume(subscribe(t, sub, env.topic), 20*time.Millisecond)
				hi.consume(subscribe(t, sub, idle), 20*time.Millisecond)
			}
			require.Eventually(t, func() bool { return hb.done.Load() >= 30 }, 20*time.Second, 10*time.Millisecond)

			require.NoError(t, env.insp.Pause(ctx, env.topic, "g"))
			time.Sleep(200 * time.Millisecond)
			_, err := env.insp.Resume(ctx, env.topic, "g")
			require.NoError(t, err)
			publish(idle, 60)
			require.Eventually(t, func() bool { return hb.done.Load() == 100 && hi.done.Load() == 60 }, 30*time.Second, 10*time.Millisecond,
				"busy %d/100, idle %d/60", hb.done.Load(), hi.done.Load())

			t.Logf("FIGURE concurrency cap %d, %d subscribers of 4 partitions: at most %d and %d handlers at once (backlog with a Pause/Resume; idle, then a backlog)",
				limit, subs, hb.most.Load(), hi.most.Load())
			assert.Equal(t, int64(limit), hb.most.Load())
			assert.LessOrEqual(t, hi.most.Load(), int64(limit))
			assert.Positive(t, hi.most.Load())
		})
	}
}

// A holder cut off from Redis (as a dead process) keeps its slot only for
// its lease: another subscriber then handles messages. The lease is
// VisibilityTimeout, 1 s here so the test need not wait the default 30 s.
func TestConcurrency_SlotOfADeadHolderLapses(t *testing.T) {
	t.Parallel()
	env := setup(t)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", Concurrency: 1, VisibilityTimeout: time.Second}
	proxy := newFaultProxy(t)
	stuckConfig := config
	stuckConfig.CloseTimeout = 100 * time.Millisecond // its handler never finishes: Close need not wait for it
	stuck := newSubscriber(t, proxy.client(t), stuckConfig)
	first := subscribe(t, stuck, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("held")))
	receive(t, first, 5*time.Second) // never acked: its handler holds the one slot
	proxy.stall()
	t.Cleanup(func() { proxy.restore(t) })

	other := newSubscriber(t, newClient(t), config)
	ch := subscribe(t, other, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("next")))
	start := time.Now()
	got := receive(t, ch, 10*time.Second)
	t.Logf("FIGURE the slot of a holder cut off from Redis lapsed: the next message handled after %s (VisibilityTimeout 1s)", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, "next", string(got.Payload))
	got.Ack()
}

// Concurrency is validated with the other settings.
func TestConcurrency_Validate(t *testing.T) {
	env := setup(t)
	for _, c := range []struct {
		config redisdelay.SubscriberConfig
		want   string
	}{
		{redisdelay.SubscriberConfig{Concurrency: -1}, "SubscriberConfig.Concurrency is -1: use 1 to 1,000,000 handlers at once (0: no cap)"},
		{redisdelay.SubscriberConfig{TopicConcurrency: map[string]int{"orders": 0}}, `SubscriberConfig.TopicConcurrency["orders"] is 0: use 1 to 1,000,000`},
		{redisdelay.SubscriberConfig{TopicConcurrency: map[string]int{"a{b": 1}}, "SubscriberConfig.TopicConcurrency: "},
	} {
		c.config.Client, c.config.ConsumerGroup = env.client, "g"
		_, err := redisdelay.NewSubscriber(c.config, logger)
		require.ErrorContains(t, err, c.want)
	}
}
