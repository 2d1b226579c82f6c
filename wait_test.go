package redisdelay_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Idle subscriptions wait for their partition's bell (internal/consumption/fetch.go, store.ReadNew)
// instead of blocking a connection. Run on Cluster and Sentinel too
// (.ci/run's REPLICATED_SET): the bell is rung inside scripts on the
// partition's node and heard on the hub's one pub/sub connection.

// iwBound is how long Close, or the end of a Subscribe context, may take
// with every subscription idle: generous, the machine is shared.
const iwBound = 2 * time.Second

// Close returns at once, on every partition, with the embedded scheduler
// on and a BlockTime of 30s.
func TestIdleWait_CloseReturnsAtOnce(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g",
		BlockTime: 30 * time.Second, Partitions: 3}, logger)
	require.NoError(t, err)
	ch := subscribe(t, sub, env.topic)
	awaitIdleSubscriptions(t, env.client, env.topic, 3)

	start := time.Now()
	require.NoError(t, sub.Close())
	took := time.Since(start)
	t.Logf("FIGURE Close of idle subscriptions: %s", took.Round(time.Millisecond))
	assert.Less(t, took, iwBound)
	_, open := <-ch
	assert.False(t, open)
}

// The end of a Subscribe context closes its channel at once, and the
// Subscriber's other subscriptions read on.
func TestIdleWait_ContextCancel(t *testing.T) {
	t.Parallel()
	env := setup(t)
	other := topic()
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BlockTime: 30 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, env.topic)
	require.NoError(t, err)
	otherCh := subscribe(t, sub, other)
	awaitIdleSubscriptions(t, env.client, env.topic, 1)

	start := time.Now()
	cancel()
	select {
	case _, open := <-ch:
		assert.False(t, open)
	case <-time.After(iwBound):
		t.Fatalf("the channel was not closed within %s of the context's end", iwBound)
	}
	t.Logf("FIGURE channel closed %s after the context ended", time.Since(start).Round(time.Millisecond))

	require.NoError(t, env.pub.Publish(other, newMessage("still read")))
	receive(t, otherCh, 2*time.Second).Ack()
}

// Every way an entry reaches a stream consumers read rings the bell, so an
// idle subscription gets it at once, not at its next poll (BlockTime is a
// minute here): a publish, a delayed message promoted, a Nack redelivered
// at once, a hand-back by a closing subscription, and a dead letter
// requeued by the Inspector.
func TestIdleWait_EveryWriterRings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", BlockTime: time.Minute, RetryDelay: noRetry,
		CloseTimeout: 100 * time.Millisecond} // hand-back: Close waits no longer for the handler that never acks
	idle := func(t *testing.T, tp string) <-chan *message.Message {
		ch := subscribe(t, newSubscriber(t, env.client, config), tp)
		awaitIdleSubscriptions(t, env.client, tp, 1)
		return ch
	}
	prompt := func(t *testing.T, ch <-chan *message.Message, since time.Time, what string) *message.Message {
		t.Helper()
		msg := receive(t, ch, 2*time.Second)
		t.Logf("FIGURE %s: received %s after", what, time.Since(since).Round(time.Microsecond))
		return msg
	}

	t.Run("publish", func(t *testing.T) {
		tp := topic()
		ch := idle(t, tp)
		start := time.Now()
		require.NoError(t, env.pub.Publish(tp, newMessage("m")))
		prompt(t, ch, start, "publish").Ack()
	})
	t.Run("promote", func(t *testing.T) {
		tp := topic()
		ch := idle(t, tp)
		start := time.Now()
		require.NoError(t, env.pub.Publish(tp, delayed(delay.For(50*time.Millisecond), "m")))
		prompt(t, ch, start, "a delay of 50ms").Ack()
	})
	t.Run("nack", func(t *testing.T) {
		tp := topic()
		first := subscribe(t, newSubscriber(t, env.client, config), tp)
		second := idle(t, tp)
		require.NoError(t, env.pub.Publish(tp, newMessage("m")))
		var msg *message.Message
		select {
		case msg = <-first:
		case msg = <-second:
			t.Skip("the waiting subscription took the message first")
		case <-time.After(2 * time.Second):
			t.Fatal("no message")
		}
		awaitIdleSubscriptions(t, env.client, tp, 1)
		start := time.Now()
		msg.Nack()
		select {
		case msg = <-second:
		case msg = <-first:
		case <-time.After(2 * time.Second):
			t.Fatal("the nacked message did not come back")
		}
		t.Logf("FIGURE nack: redelivered %s after", time.Since(start).Round(time.Microsecond))
		msg.Ack()
	})
	t.Run("hand-back", func(t *testing.T) {
		tp := topic()
		closing := newSubscriber(t, env.client, config)
		held := subscribe(t, closing, tp)
		require.NoError(t, env.pub.Publish(tp, newMessage("handled"), newMessage("prefetched")))
		receive(t, held, 2*time.Second) // never acked: the other is handed back at once
		other := idle(t, tp)
		start := time.Now()
		go func() { _ = closing.Close() }()
		assert.Equal(t, "prefetched", string(prompt(t, other, start, "hand-back on Close").Payload))
	})
	t.Run("requeue", func(t *testing.T) {
		tp := topic()
		dying := config
		dying.MaxAttempts = 1
		ch := subscribe(t, newSubscriber(t, env.client, dying), tp)
		require.NoError(t, env.pub.Publish(tp, newMessage("m")))
		receive(t, ch, 2*time.Second).Nack()
		awaitDeadLetters(t, env.insp, tp, "g", 1, 2*time.Second)
		awaitIdleSubscriptions(t, env.client, tp, 1)
		start := time.Now()
		n, err := env.insp.RequeueDeadLetters(ctx, tp, "g")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		prompt(t, ch, start, "dead letter requeued").Ack()
	})
}

// A subscription that found nothing costs one script call per BlockTime,
// not a loop: 100 idle topics with a subscriber each, on a server of the
// test's own, cost Redis 50 script calls per second with a BlockTime of 2s.
func TestIdleWait_CostsNearlyNothing(t *testing.T) {
	t.Parallel()
	env := setupOn(t, ownRedis(t))
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BlockTime: 2 * time.Second})
	topics := newTopics(100)
	for _, tp := range topics {
		subscribe(t, sub, tp)
	}
	for _, tp := range topics {
		awaitIdleSubscriptions(t, env.client, tp, 1)
	}
	time.Sleep(time.Second) // the schedulers' first ticks, their loops retire
	calls := func() (all, scripts int64) {
		info, err := env.client.Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			require.NoError(t, err)
			all += n
			if name == "cmdstat_evalsha" {
				scripts += n
			}
		}
		return all, scripts
	}
	const window = 4 * time.Second
	all0, scripts0 := calls()
	time.Sleep(window)
	all1, scripts1 := calls()
	perSecond := float64(scripts1-scripts0) / window.Seconds()
	t.Logf("FIGURE 100 idle topics, BlockTime 2s: %.1f script calls/s, %.1f commands/s with those the scripts run",
		perSecond, float64(all1-all0)/window.Seconds())
	assert.Less(t, perSecond, 80.0)
}

// A wrapper of the application's around a go-redis client (neither a
// *redis.Client nor a *redis.ClusterClient) works as any client.
func TestIdleWait_WrappedClient(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: wrappedClient{env.client}, ConsumerGroup: "g"}, logger)
	require.NoError(t, err)
	ch := subscribe(t, sub, env.topic)
	awaitIdleSubscriptions(t, env.client, env.topic, 1)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("m")))
	receive(t, ch, time.Second).Ack()
	start := time.Now()
	require.NoError(t, sub.Close())
	assert.Less(t, time.Since(start), iwBound)
}

// iwLog records the errors a Subscriber logs.
type iwLog struct {
	watermill.LoggerAdapter
	mu     sync.Mutex
	errors []string
}

func (l *iwLog) Error(msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	l.errors = append(l.errors, msg+": "+err.Error())
	l.mu.Unlock()
}

func (l *iwLog) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...)
}

// A Redis user that may not subscribe to channels: the Subscriber says
// once what to grant, its idle subscriptions read every 100ms, so messages
// come promptly all the same, and Close is prompt.
func TestIdleWait_WithoutSubscribe(t *testing.T) {
	t.Parallel()
	needSingle(t, "it creates Redis users")
	acl := strings.Fields(strings.ReplaceAll(minimalACL, "<prefix>", redisdelay.DefaultKeyPrefix))
	restricted, _ := newACLUser(t, append(acl, "-subscribe")...)
	env := setup(t)
	log := &iwLog{LoggerAdapter: watermill.NopLogger{}}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: restricted, ConsumerGroup: "g", Partitions: 2,
		DisableScheduler: true}, log)
	require.NoError(t, err)
	ch := subscribe(t, sub, env.topic)
	awaitIdleSubscriptions(t, restricted, env.topic, 2)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: restricted, Partitions: 2}, logger)
	require.NoError(t, err)
	for range 3 {
		start := time.Now()
		require.NoError(t, pub.Publish(env.topic, newMessage("m")))
		receive(t, ch, time.Second).Ack()
		t.Logf("FIGURE without the channels: received %s after Publish", time.Since(start).Round(time.Millisecond))
	}

	logged := log.logged()
	require.Len(t, logged, 1, "%q", logged)
	assert.Contains(t, logged[0], "ACL SETUSER <user> &"+redisdelay.DefaultKeyPrefix+":*")
	assert.Contains(t, logged[0], "NOPERM")

	start := time.Now()
	require.NoError(t, sub.Close())
	assert.Less(t, time.Since(start), iwBound)
}

// Redis stops answering (a partition without resets) while every
// subscription is idle: Close does not wait on Redis for long (the
// hand-back and the scheduler's lease release time out, 5s and 1s, which
// with go-redis's ReadTimeout of 3s comes to about 7s; the storage level
// announcer is waited for 1s at most). It took 25-29s before the lanes
// ended a pipeline's retries with its callers' contexts.
func TestIdleWait_CloseOnSilentRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for timeouts (about 7s)")
	}
	t.Parallel()
	proxy := newFaultProxy(t)
	env := setup(t)
	client := proxy.client(t)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "g",
		BlockTime: time.Minute}, logger)
	require.NoError(t, err)
	subscribe(t, sub, env.topic)
	awaitIdleSubscriptions(t, env.client, env.topic, 1)
	proxy.stall()

	start := time.Now()
	require.NoError(t, sub.Close())
	took := time.Since(start)
	t.Logf("FIGURE Close with Redis silent: %s", took.Round(time.Millisecond))
	assert.Less(t, took, 30*time.Second)
	proxy.restore(t)
}

// An entry added without ringing the bell (by another tool, or a writer
// of an older version) is found by the Subscriber's sweep, which peeks at
// idle subscriptions once per BlockTime: not at once, but within it.
func TestIdleWait_SweepFindsEntriesAddedWithoutBell(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const block = 300 * time.Millisecond
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BlockTime: block})
	ch := subscribe(t, sub, env.topic)
	awaitIdleSubscriptions(t, env.client, env.topic, 1)
	start := time.Now()
	require.NoError(t, env.client.XAdd(context.Background(), &redis.XAddArgs{
		Stream: shardOf(env.topic, 0).Stream(), Values: []any{"m", redisdelay.EncodeForTest(newMessage("unrung"))}}).Err())
	got := receive(t, ch, 5*block)
	assert.Equal(t, "unrung", string(got.Payload))
	got.Ack()
	t.Logf("FIGURE an entry added without the bell: received %s after (BlockTime %s)", time.Since(start).Round(time.Millisecond), block)
}

// A read whose reply was lost (go-redis retried it, so the subscription saw
// no error) leaves entries pending for a consumer that does not know them.
// Reads no longer look for such entries each time: an idle subscription,
// which holds nothing, is told by the Subscriber's sweep (once per
// BlockTime) and reads them, as the same attempt, long before the
// visibility timeout would have them reclaimed as the next one.
func TestIdleWait_SweepFindsEntriesPendingForTheConsumer(t *testing.T) {
	t.Parallel()
	env := setup(t)
	// BlockTime: the sweep peeks once per BlockTime; the visibility timeout
	// is far beyond the test, so a reclaim cannot be what delivers.
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BlockTime: 300 * time.Millisecond,
		VisibilityTimeout: time.Minute})
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("first")))
	receive(t, ch, 2*time.Second).Ack()

	ctx := context.Background()
	stream := shardOf(env.topic, 0).Stream()
	consumers, err := env.client.XInfoConsumers(ctx, stream, "g").Result()
	require.NoError(t, err)
	require.Len(t, consumers, 1)
	// The lost read: an entry added and read for the consumer at once (the
	// subscription is not rung, and cannot read it itself first).
	lost := newMessage("reply lost")
	pipe := env.client.TxPipeline()
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"m", redisdelay.EncodeForTest(lost)}})
	pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: consumers[0].Name, Streams: []string{stream, ">"}, Count: 1, Block: -1})
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)

	m := receive(t, ch, 3*time.Second)
	assert.Equal(t, lost.UUID, m.UUID)
	assert.Equal(t, "1", m.Metadata.Get(redisdelay.AttemptKey), "read again, not reclaimed as the next attempt")
	m.Ack()
	nothing(t, ch, 300*time.Millisecond)
}
