package redisdelay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// A stream entry a newer release wrote (a codec version this release
// does not know) is neither dead-lettered nor acked: the subscription
// hands it back to its group for later, its attempt unchanged, reads on,
// logs it, and the process reports it (Storage, Health).
func TestStorageLevel_NewerEntryIsLeftForANewerRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setupOwnKeys(t)
	sh := store.Keys{Prefix: env.prefix}.Shard(env.topic, 0)
	stream := sh.Stream()
	log := &recLogger{}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, KeyPrefix: env.prefix, ConsumerGroup: "g", MaxAttempts: 1}, log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	newer := string([]byte{4, 1, 'x', 0})
	require.NoError(t, env.client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"m", newer}}).Err())
	valid := newMessage("valid")
	require.NoError(t, env.pub.Publish(env.topic, valid))

	ch := subscribe(t, sub, env.topic)
	got := receive(t, ch, 2*time.Second)
	assert.Equal(t, valid.UUID, got.UUID, "no head-of-line stall")
	got.Ack()
	nothing(t, ch, 200*time.Millisecond)

	// In the group's retry set, byte for byte, on its first attempt (the
	// group's MaxAttempts is 1: a failed attempt would bury it).
	retry := sh.Retry("g")
	require.Eventually(t, func() bool { return env.client.ZCard(ctx, retry).Val() == 1 }, 2*time.Second, 10*time.Millisecond)
	member := env.client.ZRange(ctx, retry, 0, 0).Val()[0]
	assert.True(t, strings.HasPrefix(member, "1:"), "attempt unchanged: %s", member)
	assert.Equal(t, newer, env.client.HGet(ctx, string(sh)+":g:g:rbody", member).Val())
	dead, err := env.insp.DeadLetters(ctx, env.topic, "g", "", 10)
	require.NoError(t, err)
	assert.Empty(t, dead)
	pending, err := env.client.XPending(ctx, stream, "g").Result()
	require.NoError(t, err)
	assert.Zero(t, pending.Count)
	assert.Contains(t, strings.Join(log.logged(), "\n"), "written by a newer release")

	require.Eventually(t, func() bool {
		s, err := env.insp.Storage(ctx)
		require.NoError(t, err)
		for _, p := range s.Processes {
			if p.Unreadable > 0 {
				return true
			}
		}
		return false
	}, 5*time.Second, 20*time.Millisecond, "the count reaches the registry at once")
	rep := healthReport(t, env.insp, redisdelay.HealthConfig{Topics: []string{env.topic}})
	var kinds []string
	for _, p := range rep.Problems {
		kinds = append(kinds, p.Kind)
	}
	assert.Contains(t, kinds, redisdelay.ProblemNewerStorage)
}

// Publishers write what every live reader reads: while a consumer of
// release 0.1.0 (a name without a level mark) reads the topic, messages
// are stored at level 1 (no metadata codes, nothing in the far tier);
// once none is seen, level 2 again after the settle time.
func TestStorageLevel_WritesWhatTheOldestLiveReaderReads(t *testing.T) {
	// Keys of its own (a prefix), so that the scan sees only its topics
	// and its settle time applies to no other test.
	ctx := context.Background()
	env := setupOwnKeys(t)
	require.NoError(t, env.insp.SetStorageSettle(ctx, 0))
	sh := store.Keys{Prefix: env.prefix}.Shard(env.topic, 0)
	// A reader of release 0.1.0: listens to the topic's bell without the
	// mark, as an idle subscription of that release does.
	require.NoError(t, env.client.SAdd(ctx, env.prefix+":topics", env.topic).Err())
	old := env.client.Subscribe(ctx, sh.Bell())
	_, err := old.Receive(ctx)
	require.NoError(t, err)

	// The scan runs at the announcements after the first (every 10s).
	require.Eventually(t, func() bool {
		s, err := env.insp.Storage(ctx)
		require.NoError(t, err)
		require.NoError(t, env.pub.Publish(env.topic, newMessage("probe")))
		return !s.OlderRelease.IsZero()
	}, 30*time.Second, 200*time.Millisecond)
	s, err := env.insp.Storage(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, s.Level)
	assert.Contains(t, s.OlderReleaseSeen, "waiting on "+sh.Bell())

	// Level 1: a business key as text, a far delay into the waiting set.
	m := delayed(delay.For(time.Hour), "far")
	redisdelay.SetBusinessKey(m, "order-1")
	require.Eventually(t, func() bool {
		return env.pub.Publish(env.topic, m) == nil // the publisher's level follows the registry's within an announcement
	}, 15*time.Second, 100*time.Millisecond)
	body := env.client.HGet(ctx, sh.Bodies(), m.UUID).Val()
	require.NotEmpty(t, body, "in the waiting set, not the far tier")
	assert.Equal(t, store.Level1, store.BodyLevel([]byte(body)))
	assert.Contains(t, body, "_redisdelay_business_key")
	require.NoError(t, old.Close())
}

// The rollback's rewrite: after a pin to level 1, far messages of format
// 2 move into the waiting set and bodies lose level 2's codes, and every
// message is still delivered when due.
func TestStorageLevel_RewriteToLevel1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setupOwnKeys(t)
	runManager(t, env.client, redisdelay.ManagerConfig{KeyPrefix: env.prefix, Topics: []string{env.topic}})
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{KeyPrefix: env.prefix, ConsumerGroup: "g", DisableScheduler: true})
	var msgs []*message.Message
	for i := range 6 {
		m := delayed(delay.For(20*time.Second), fmt.Sprint(i)) // after the rewrite's wait
		if i%2 == 0 {
			redisdelay.SetBusinessKey(m, fmt.Sprint("key-", i))
		}
		msgs = append(msgs, m)
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	ch := subscribe(t, sub, env.topic)
	sh := store.Keys{Prefix: env.prefix}.Shard(env.topic, 0)
	require.Zero(t, env.client.ZCard(ctx, sh.Waiting()).Val(), "all in the far tier (TestMain's far timing)")

	_, err := env.insp.RewriteStorage(ctx, 1)
	require.ErrorContains(t, err, "pin level 1 first")
	require.NoError(t, env.insp.PinStorageLevel(ctx, 1))
	start := time.Now()
	r, err := env.insp.RewriteStorage(ctx, 1)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 5*time.Second, "waits for every process to learn of the pin (TestMain: announcements every 5s)")
	assert.Equal(t, redisdelay.StorageRewrite{FarMoved: 6, Bodies: 6}, r)
	for _, m := range msgs {
		body := env.client.HGet(ctx, sh.Bodies(), m.UUID).Val()
		assert.Equal(t, store.Level1, store.BodyLevel([]byte(body)), "level 1 in the waiting set")
	}
	got := map[string]bool{}
	for range msgs {
		m := receive(t, ch, 20*time.Second)
		got[m.UUID] = true
		m.Ack()
	}
	assert.Len(t, got, len(msgs))
}

// setupOwnKeys returns an env on keys of the test's own (a KeyPrefix):
// what the test does to the storage level registry (a pin, an unreadable
// item counted) must not reach the package's other tests, which share the
// default prefix's registry. Its pub has a client of its own, as a
// process of its own.
func setupOwnKeys(t *testing.T) *prefixedEnv {
	t.Helper()
	client := newClient(t)
	prefix := uniquePrefix()
	return &prefixedEnv{env: &env{client: client, topic: topic(), pub: newPublisherWithConfig(t, redisdelay.PublisherConfig{KeyPrefix: prefix}),
		insp: newInspectorPrefix(t, client, prefix)}, prefix: prefix}
}
