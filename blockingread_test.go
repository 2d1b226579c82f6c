package redisdelay_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Blocking reads that Close interrupts (reader.go). Run on Cluster and
// Sentinel too (.ci/run's REPLICATED_SET): the read's connection is the
// master's that serves the partition, and CLIENT UNBLOCK must reach it.

// brInterruptBound is how long Close, or the end of a Subscribe context,
// may take with a read blocked for 30s: generous, the machine is shared.
const brInterruptBound = 2 * time.Second

// brBlocked waits until the subscriptions of the group are surely blocked
// in their reads of the topic: its group exists (Subscribe created it
// before the first read), then 300ms (Redis 7.0 shows a consumer only
// once a read returned something).
func brBlocked(t *testing.T, client redis.UniversalClient, topic, group string) {
	t.Helper()
	stream := lcKey(topic, "stream")
	require.Eventually(t, func() bool {
		groups, err := client.XInfoGroups(context.Background(), stream).Result()
		return err == nil && len(groups) > 0 && groups[0].Name == group
	}, 5*time.Second, 10*time.Millisecond, "the group was never created")
	time.Sleep(300 * time.Millisecond)
}

// Close returns at once although every read blocks 30s, on every
// partition, and with the embedded scheduler on.
func TestBlockingReadCloseInterrupts(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	tp := topic()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "g",
		BlockTime: 30 * time.Second, Partitions: 3}, logger)
	require.NoError(t, err)
	ch := subscribe(t, sub, tp)
	brBlocked(t, client, tp, "g")

	start := time.Now()
	require.NoError(t, sub.Close())
	took := time.Since(start)
	t.Logf("FIGURE Close with reads blocked for 30s: %s", took.Round(time.Millisecond))
	assert.Less(t, took, brInterruptBound)
	_, open := <-ch
	assert.False(t, open)
}

// The end of a Subscribe context closes its channel at once, and the
// Subscriber's other subscriptions read on.
func TestBlockingReadContextCancelInterrupts(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	tp, other := topic(), topic()
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BlockTime: 30 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, tp)
	require.NoError(t, err)
	otherCh := subscribe(t, sub, other)
	brBlocked(t, client, tp, "g")

	start := time.Now()
	cancel()
	select {
	case _, open := <-ch:
		assert.False(t, open)
	case <-time.After(brInterruptBound):
		t.Fatalf("the channel was not closed within %s of the context's end", brInterruptBound)
	}
	t.Logf("FIGURE channel closed %s after the context ended (reads block 30s)", time.Since(start).Round(time.Millisecond))

	require.NoError(t, lcPublisher(t, client).Publish(other, lcMessage("still read")))
	receive(t, otherCh, 2*time.Second).Ack()
}

// A message published while the subscription is blocked in its long read
// comes at once: the read returns when the stream gets an entry.
func TestBlockingReadDeliversAtOnce(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	tp := topic()
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g"}) // default BlockTime
	ch := subscribe(t, sub, tp)
	brBlocked(t, client, tp, "g")
	pub := lcPublisher(t, client)
	for i := range 3 {
		start := time.Now()
		require.NoError(t, pub.Publish(tp, lcMessage("m")))
		receive(t, ch, time.Second).Ack()
		t.Logf("FIGURE message %d received %s after Publish", i, time.Since(start).Round(time.Microsecond))
		time.Sleep(100 * time.Millisecond)
	}
}

// brWrapped is a redis.UniversalClient that is neither a *redis.Client nor
// a *redis.ClusterClient (as a user's wrapper may be): reads cannot have a
// connection of their own.
type brWrapped struct{ redis.UniversalClient }

// With such a client reads go through its pool and block 1s by default (not
// BlockTime's default 30s), so Close waits at most that long; messages come
// as usual.
func TestBlockingReadOtherClientFallsBack(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	tp := topic()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: brWrapped{client}, ConsumerGroup: "g"}, logger)
	require.NoError(t, err)
	ch := subscribe(t, sub, tp)
	brBlocked(t, client, tp, "g")
	require.NoError(t, lcPublisher(t, client).Publish(tp, lcMessage("m")))
	receive(t, ch, 2*time.Second).Ack()
	time.Sleep(100 * time.Millisecond)

	start := time.Now()
	require.NoError(t, sub.Close())
	assert.Less(t, time.Since(start), time.Second+brInterruptBound)
}

// brUser returns a client logged in as a new Redis user with the minimal
// ACL of docs/operations.md less the given commands, and the user's name.
func brUser(t *testing.T, without ...string) (*redis.Client, string) {
	t.Helper()
	acl := strings.Fields(strings.ReplaceAll(wkMinimalACL, "<prefix>", redisdelay.DefaultKeyPrefix))
	for _, c := range without {
		acl = append(acl, "-"+c)
	}
	return wkACLUser(t, acl...)
}

// brLog records the errors a Subscriber logs.
type brLog struct {
	watermill.LoggerAdapter
	mu     sync.Mutex
	errors []string
}

func (l *brLog) Error(msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	l.errors = append(l.errors, msg+": "+err.Error())
	l.mu.Unlock()
}

func (l *brLog) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...)
}

// A Redis user without CLIENT UNBLOCK (the ACL of an older release), or
// even without CLIENT ID: the Subscriber says once what to grant, reads
// block 1s (BlockTime not set), and messages, pause and Close work.
func TestBlockingReadWithoutClientUnblock(t *testing.T) {
	t.Parallel()
	needSingle(t, "it creates Redis users")
	for _, without := range []string{"client|unblock", "client|id"} {
		t.Run(without, func(t *testing.T) {
			restricted, _ := brUser(t, without)
			tp := topic()
			log := &brLog{LoggerAdapter: watermill.NopLogger{}}
			sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: restricted, ConsumerGroup: "g", Partitions: 2}, log)
			require.NoError(t, err)
			ch := subscribe(t, sub, tp)
			brBlocked(t, restricted, tp, "g")
			pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: restricted, Partitions: 2}, logger)
			require.NoError(t, err)
			require.NoError(t, pub.Publish(tp, lcMessage("m")))
			receive(t, ch, 2*time.Second).Ack()

			logged := log.logged()
			require.Len(t, logged, 1, "%q", logged)
			assert.Contains(t, logged[0], "ACL SETUSER <user> +client|unblock")
			assert.Contains(t, logged[0], "NOPERM")

			time.Sleep(100 * time.Millisecond)
			start := time.Now()
			require.NoError(t, sub.Close())
			assert.Less(t, time.Since(start), time.Second+brInterruptBound)
		})
	}
}

// Redis stops answering (a partition without resets) while a read is
// blocked for a minute: CLIENT UNBLOCK cannot reach it, and Close gives
// the read up after a few seconds rather than wait for it (the hand-back
// and the scheduler's lease release time out too, 5s and 1s).
func TestBlockingReadCloseGivesUpOnSilentRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for timeouts (about 12s)")
	}
	t.Parallel()
	proxy := newLcProxy(t)
	tp := topic()
	client := proxy.client(t)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "g",
		BlockTime: time.Minute}, logger)
	require.NoError(t, err)
	subscribe(t, sub, tp)
	brBlocked(t, newClient(t), tp, "g")
	proxy.stall()

	start := time.Now()
	require.NoError(t, sub.Close())
	took := time.Since(start)
	t.Logf("FIGURE Close with Redis silent and a read blocked for 1m: %s", took.Round(time.Millisecond))
	assert.Less(t, took, 30*time.Second)
	proxy.restore(t)
}
