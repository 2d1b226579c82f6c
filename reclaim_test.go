package redisdelay_test

// Reclaim of crashed consumers' messages, lease extension and idle-consumer
// cleanup, against the real test server. Every test uses a fresh topic and
// runs in parallel.

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

func TestLifecycle_CrashedConsumersMessageReclaimedAfterVisibilityTimeout(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{
		ConsumerGroup: "g", VisibilityTimeout: 600 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	msg := newMessage("x")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	crashedRead(t, env.client, env.topic, "g", "crashed-1")
	readAt := time.Now()

	ch := subscribe(t, sub, env.topic)
	got := receive(t, ch, 3*time.Second)
	took := time.Since(readAt)
	assert.Equal(t, msg.UUID, got.UUID)
	assert.Equal(t, "x", string(got.Payload))
	assert.Equal(t, "2", got.Metadata.Get(redisdelay.AttemptKey))
	assert.GreaterOrEqual(t, took, 550*time.Millisecond, "reclaimed before the visibility timeout")
	t.Logf("reclaimed %s after the crashed read", took)
	got.Ack()
	nothing(t, ch, 300*time.Millisecond)

	held, err := env.client.XPendingExt(context.Background(), &redis.XPendingExtArgs{
		Stream: shardOf(env.topic, 0).Stream(), Group: "g", Start: "-", End: "+", Count: 10, Consumer: "crashed-1",
	}).Result()
	require.NoError(t, err)
	assert.Empty(t, held, "the crashed consumer holds nothing any more")
}

func TestLifecycle_CrashedConsumersLastAttemptGoesToDeadLetters(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{
		ConsumerGroup: "g", MaxAttempts: 1, VisibilityTimeout: 600 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	msg := newMessage("x")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	crashedRead(t, env.client, env.topic, "g", "crashed-1")
	ch := subscribe(t, sub, env.topic) // runs the scheduler that reclaims

	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 1, 3*time.Second)
	nothing(t, ch, 300*time.Millisecond)
	d := dead[0]
	assert.Equal(t, msg.UUID, d.Message.UUID)
	assert.Equal(t, 1, d.Attempts)
	assert.Contains(t, d.Reason, "not acknowledged within 600 ms")
	assert.Contains(t, d.Reason, "crashed-1")
	assert.Contains(t, d.Reason, "attempt 1 of 1")
	assert.Zero(t, pendingCount(t, env.client, env.topic, "g"))
}

// A live subscription's slow handler keeps its message past several
// visibility timeouts: the lease is extended, nobody else gets it, and its
// Ack settles it for good.
func TestLifecycle_SlowHandlerKeepsItsMessageByLeaseExtension(t *testing.T) {
	t.Parallel()
	env := setup(t)
	config := redisdelay.SubscriberConfig{
		ConsumerGroup: "g", VisibilityTimeout: 500 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	}
	slow := newSubscriber(t, env.client, config)
	other := newSubscriber(t, env.client, config)
	chSlow := subscribe(t, slow, env.topic)

	msg := newMessage("slow")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	got := receive(t, chSlow, 2*time.Second)
	chOther := subscribe(t, other, env.topic)
	nothing(t, chOther, 2*time.Second) // 4× VisibilityTimeout
	assert.NoError(t, got.Context().Err(), "the handler's context stays alive")
	got.Ack()

	nothing(t, chOther, time.Second)
	nothing(t, chSlow, 10*time.Millisecond)
	g := groupStats(t, env.insp, env.topic, "g")
	assert.Zero(t, g.Pending+g.Ready+g.Retry+g.Dead, "settled once: %+v", g)
}

// Messages fetched behind a handler that runs long go back to the group
// (attempt unchanged) instead of waiting for it; the slow one stays put.
func TestLifecycle_MessagesFetchedBehindSlowHandlerGoToOtherConsumers(t *testing.T) {
	t.Parallel()
	env := setup(t)
	config := redisdelay.SubscriberConfig{
		ConsumerGroup: "g", BatchSize: 10, VisibilityTimeout: 600 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	}
	slow := newSubscriber(t, env.client, config)
	other := newSubscriber(t, env.client, config)
	require.NoError(t, slow.SubscribeInitialize(env.topic))
	msgs := []*message.Message{newMessage("slow"), newMessage("b"), newMessage("c"), newMessage("d")}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	chSlow := subscribe(t, slow, env.topic) // fetches all four in one read
	first := receive(t, chSlow, 2*time.Second)
	require.Equal(t, "slow", string(first.Payload))

	chOther := subscribe(t, other, env.topic)
	start := time.Now()
	for _, want := range []string{"b", "c", "d"} {
		got := receive(t, chOther, 2*time.Second) // within 2/3 VisibilityTimeout + a read
		assert.Equal(t, want, string(got.Payload))
		assert.Equal(t, "1", got.Metadata.Get(redisdelay.AttemptKey), "a hand-back is not an attempt")
		got.Ack()
	}
	t.Logf("messages behind the slow handler delivered elsewhere after %s", time.Since(start))
	nothing(t, chOther, 900*time.Millisecond) // the slow handler's message stays leased
	first.Ack()
	nothing(t, chSlow, 300*time.Millisecond)
	g := groupStats(t, newInspector(t, env.client), env.topic, "g")
	assert.Zero(t, g.Pending+g.Ready+g.Retry+g.Dead, "each settled once: %+v", g)
}

// A scheduler removes consumers that hold nothing and stayed silent past
// ConsumerIdleTimeout, and keeps those holding a message.
func TestLifecycle_IdleConsumersWithoutMessagesAreRemoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	stream := shardOf(env.topic, 0).Stream()
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{
		ConsumerGroup: "g", ConsumerIdleTimeout: time.Second, VisibilityTimeout: time.Minute, DisableScheduler: true,
	})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	require.NoError(t, env.pub.Publish(env.topic, newMessage("held")))
	crashedRead(t, env.client, env.topic, "g", "holder")
	require.NoError(t, env.client.XGroupCreateConsumer(ctx, stream, "g", "idler").Err())
	created := time.Now()

	consumers := func() map[string]int64 {
		cs, err := env.client.XInfoConsumers(ctx, stream, "g").Result()
		require.NoError(t, err)
		out := map[string]int64{}
		for _, c := range cs {
			out[c.Name] = c.Pending
		}
		return out
	}
	require.Equal(t, map[string]int64{"holder": 1, "idler": 0}, consumers())

	runManager(t, env.client, redisdelay.ManagerConfig{
		Topics: []string{env.topic}, CheckInterval: 100 * time.Millisecond, TrimInterval: 200 * time.Millisecond,
	})
	require.Eventually(t, func() bool {
		_, ok := consumers()["idler"]
		return !ok
	}, 4*time.Second, 20*time.Millisecond, "idle consumer not removed")
	assert.GreaterOrEqual(t, time.Since(created), 950*time.Millisecond, "removed before ConsumerIdleTimeout")
	time.Sleep(500 * time.Millisecond) // a few more cleanup rounds
	assert.Equal(t, map[string]int64{"holder": 1}, consumers(), "a consumer holding a message stays")
}

// Schedulers pace a group's reclaims by its stored visibility timeout
// (with nothing pending, one sweep per timeout). A subscriber that stores
// a shorter one wakes them, so a message its crashed consumer held is
// reclaimed after the shorter timeout, not at the pace of the longer.
func TestLifecycle_ShorterVisibilityTimeoutIsReclaimedAtItsPace(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pacedByALongTimeout(t, env, time.Minute) // its cleanup's sweeps out of the test
	short := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", VisibilityTimeout: 600 * time.Millisecond})
	require.NoError(t, short.SubscribeInitialize(env.topic)) // stores the shorter timeout
	awaitCrashedReclaimed(t, env, 3*time.Second, "reclaimed at the shorter timeout's pace")
}

// During a rollout, a subscriber of a release before the wake-up stores a
// shorter timeout without it (init.lua's HSET alone): the cleanup's sweep
// at the next TrimInterval finds its crashed consumer's message.
func TestLifecycle_ShorterVisibilityTimeoutUnannouncedIsReclaimedByTheCleanup(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pacedByALongTimeout(t, env, time.Second)
	require.NoError(t, env.client.HSet(context.Background(), shardOf(env.topic, 0).Meta("g"), "vis", 600).Err())
	awaitCrashedReclaimed(t, env, 5*time.Second, "reclaimed by the cleanup (TrimInterval 1s)")
}

// pacedByALongTimeout stores a group g with a visibility timeout of a
// minute and runs a Manager alone on the env's topic (no subscription
// reads what the test's crashed consumer is to read), with trim as its
// TrimInterval, until it has swept the group (not to sweep it again for a
// minute but at the cleanup). CheckInterval 100ms keeps the reclaim bound
// (a quarter of the timeout plus a check interval) well below what the
// tests allow.
func pacedByALongTimeout(t *testing.T, env *env, trim time.Duration) {
	t.Helper()
	ctx := context.Background()
	long := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", VisibilityTimeout: time.Minute})
	require.NoError(t, long.SubscribeInitialize(env.topic))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}, CheckInterval: 100 * time.Millisecond, TrimInterval: trim})
	// A loop's first tick sweeps, before any message is due: once the
	// Manager moved one due later, it has.
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(50*time.Millisecond), "first")))
	require.Eventually(t, func() bool {
		n, err := env.client.XLen(ctx, shardOf(env.topic, 0).Stream()).Result()
		return err == nil && n == 1
	}, 3*time.Second, 10*time.Millisecond)
	m := crashedRead(t, env.client, env.topic, "g", "reader")
	require.NoError(t, env.client.XAck(ctx, shardOf(env.topic, 0).Stream(), "g", m.ID).Err())
}

// awaitCrashedReclaimed publishes a message, reads it as a consumer that
// then crashes, and awaits its reclaim within the time given.
func awaitCrashedReclaimed(t *testing.T, env *env, within time.Duration, msg string) {
	t.Helper()
	require.NoError(t, env.pub.Publish(env.topic, newMessage("x")))
	crashedRead(t, env.client, env.topic, "g", "crashed-1")
	readAt := time.Now()
	require.Eventually(t, func() bool {
		held, err := env.client.XPendingExt(context.Background(), &redis.XPendingExtArgs{
			Stream: shardOf(env.topic, 0).Stream(), Group: "g", Start: "-", End: "+", Count: 10, Consumer: "crashed-1",
		}).Result()
		return err == nil && len(held) == 0
	}, within, 10*time.Millisecond, msg)
	t.Logf("reclaimed %s after the crashed read", time.Since(readAt))
}
