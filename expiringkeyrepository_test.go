package redisdelay_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

const dedupField = "dedup_key"

// Asserted here rather than in expiringkeyrepository.go, so that the core
// package does not link Watermill's middleware package (with its circuit
// breaker and backoff libraries) into every importer.
var _ middleware.ExpiringKeyRepository = (*redisdelay.ExpiringKeyRepository)(nil)

func dedupRepo(t *testing.T, namespace string, window time.Duration) *redisdelay.ExpiringKeyRepository {
	t.Helper()
	repo, err := redisdelay.NewExpiringKeyRepository(redisdelay.ExpiringKeyRepositoryConfig{
		Client: newClient(t), Namespace: namespace, Window: window}, logger)
	require.NoError(t, err)
	return repo
}

func dedupMessage(key, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set(dedupField, key)
	return msg
}

// dedupRouter runs a Router whose handler, behind Watermill's Deduplicator
// with repo, sends the payloads it handles to the returned channel; seen
// counts every message the Router received, duplicate or not.
func dedupRouter(t *testing.T, topic string, repo middleware.ExpiringKeyRepository, seen *atomic.Int64) (<-chan string, func()) {
	t.Helper()
	_, sub := newPubSub(t, "g", func(c *redisdelay.SubscriberConfig) { c.BatchSize = 1 })
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	require.NoError(t, err)
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			seen.Add(1)
			return h(msg)
		}
	})
	router.AddMiddleware((&middleware.Deduplicator{
		KeyFactory: middleware.NewMessageHasherFromMetadataField(dedupField),
		Repository: repo,
		Timeout:    5 * time.Second,
	}).Middleware)
	handled := make(chan string, 100)
	router.AddConsumerHandler("h", topic, sub, func(msg *message.Message) error {
		handled <- string(msg.Payload)
		return nil
	})
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()
	var once sync.Once
	stop := func() { once.Do(func() { _ = router.Close(); _ = sub.Close() }) }
	t.Cleanup(stop)
	return handled, stop
}

// A duplicate (another UUID, same key) delivered within the window is
// acked unhandled; once the window has passed, the key is new again. The
// messages are delayed, as a duplicated schedule would be: dedup applies at
// delivery.
func TestExpiringKeyRepository_RouterDropsDuplicateWithinWindow(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const window = 1500 * time.Millisecond
	var seen atomic.Int64
	handled, _ := dedupRouter(t, env.topic, dedupRepo(t, env.topic, window), &seen)

	first, dup, marker := dedupMessage("order-1", "first"), dedupMessage("order-1", "dup"), dedupMessage("order-2", "marker")
	for _, m := range []*message.Message{first, dup, marker} {
		delay.Message(m, delay.For(200*time.Millisecond))
	}
	require.NoError(t, env.pub.Publish(env.topic, first, dup, marker))
	// The three are due together and handled in stream order by the one
	// subscription: the marker comes after the duplicate was decided.
	assert.Equal(t, "first", receiveHandled(t, handled, 3*time.Second))
	firstAt := time.Now()
	assert.Equal(t, "marker", receiveHandled(t, handled, 3*time.Second))
	assert.EqualValues(t, 3, seen.Load(), "the Router received the duplicate and dropped it")

	time.Sleep(time.Until(firstAt.Add(window + 100*time.Millisecond)))
	require.NoError(t, env.pub.Publish(env.topic, dedupMessage("order-1", "after window")))
	assert.Equal(t, "after window", receiveHandled(t, handled, 3*time.Second))
	noneOf(t, handled, 200*time.Millisecond)
}

// Two Routers (as two processes would: each its own client, subscriber and
// repository) share the deduplication state in Redis: a key handled by one
// is a duplicate for the other, and of many copies of a key consumed by
// both at once exactly one is handled.
func TestExpiringKeyRepository_RoutersShareState(t *testing.T) {
	t.Parallel()
	env := setup(t)
	var seen1, seen2 atomic.Int64
	handled1, stop1 := dedupRouter(t, env.topic, dedupRepo(t, env.topic, time.Minute), &seen1)

	require.NoError(t, env.pub.Publish(env.topic, dedupMessage("k", "by router 1")))
	assert.Equal(t, "by router 1", receiveHandled(t, handled1, 3*time.Second))
	stop1()

	handled2, _ := dedupRouter(t, env.topic, dedupRepo(t, env.topic, time.Minute), &seen2)
	require.NoError(t, env.pub.Publish(env.topic, dedupMessage("k", "dup"), dedupMessage("k2", "marker")))
	assert.Equal(t, "marker", receiveHandled(t, handled2, 3*time.Second), "router 2 dropped the key router 1 handled")

	// Now both at once, competing in the group for 40 copies of one key.
	handled1, _ = dedupRouter(t, env.topic, dedupRepo(t, env.topic, time.Minute), &seen1)
	seen1.Store(0)
	seen2.Store(0)
	copies := make([]*message.Message, 40)
	for i := range copies {
		copies[i] = dedupMessage("burst", "burst")
	}
	require.NoError(t, env.pub.Publish(env.topic, copies...))
	require.Eventually(t, func() bool { return seen1.Load()+seen2.Load() == 40 }, 5*time.Second, 10*time.Millisecond)
	t.Logf("router 1 received %d copies, router 2 %d", seen1.Load(), seen2.Load())
	// The copy that passed may still be on its way to the channel.
	require.Eventually(t, func() bool { return len(handled1)+len(handled2) >= 1 }, 2*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, 1, len(handled1)+len(handled2), "exactly one copy handled")
}

// The key is one SET NX: of many concurrent checks of a key through
// several repositories (clients), exactly one sees it as new.
func TestExpiringKeyRepository_ConcurrentChecksOneWinner(t *testing.T) {
	t.Parallel()
	env := setup(t)
	repos := []*redisdelay.ExpiringKeyRepository{dedupRepo(t, env.topic, time.Minute), dedupRepo(t, env.topic, time.Minute)}
	var fresh atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dup, err := repos[i%2].IsDuplicate(context.Background(), "same")
			assert.NoError(t, err)
			if !dup {
				fresh.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 1, fresh.Load())
}

// The key layout: "<prefix>:dedup:<namespace>:{<key>}", each key its own
// hash tag, expiring after Window; keys that are not readable names (the
// Deduplicator's default Adler-32 hasher makes raw bytes) are hex-encoded
// behind "~", and readable keys starting with "~" too, so none collide.
// Namespaces and prefixes separate states.
func TestExpiringKeyRepository_KeyLayoutAndNamespaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	repo := dedupRepo(t, env.topic, 10*time.Second)

	adler, err := middleware.NewMessageHasherAdler32(math.MaxInt64)(message.NewMessage("u", []byte("{payload}")))
	require.NoError(t, err)
	for key, redisKey := range map[string]string{
		"order-1":    "redisdelay:dedup:" + env.topic + ":{order-1}",
		"~7b":        "redisdelay:dedup:" + env.topic + ":{~7e3762}",
		"a}b":        "redisdelay:dedup:" + env.topic + ":{~617d62}",
		"":           "redisdelay:dedup:" + env.topic + ":{~}",
		adler:        "redisdelay:dedup:" + env.topic + ":{~" + hexOf(adler) + "}",
		"with space": "redisdelay:dedup:" + env.topic + ":{~" + hexOf("with space") + "}",
	} {
		dup, err := repo.IsDuplicate(ctx, key)
		require.NoError(t, err)
		assert.False(t, dup, "%q", key)
		ttl, err := env.client.PTTL(ctx, redisKey).Result()
		require.NoError(t, err)
		assert.True(t, ttl > 9*time.Second && ttl <= 10*time.Second, "%q: key %s has TTL %s", key, redisKey, ttl)
	}
	// "{" hex-encoded is "~7b": the readable key "~7b" did not take its place.
	dup, err := repo.IsDuplicate(ctx, "{")
	require.NoError(t, err)
	assert.False(t, dup)

	other := dedupRepo(t, env.topic+"-other", 10*time.Second)
	dup, err = other.IsDuplicate(ctx, "order-1")
	require.NoError(t, err)
	assert.False(t, dup, "another namespace has its own state")
	prefixed, err := redisdelay.NewExpiringKeyRepository(redisdelay.ExpiringKeyRepositoryConfig{
		Client: env.client, KeyPrefix: "other-prefix", Namespace: env.topic}, nil)
	require.NoError(t, err)
	dup, err = prefixed.IsDuplicate(ctx, "order-1")
	require.NoError(t, err)
	assert.False(t, dup, "another prefix has its own state")
	t.Cleanup(func() { env.client.Del(context.Background(), "other-prefix:dedup:"+env.topic+":{order-1}") })
	dup, err = repo.IsDuplicate(ctx, "order-1")
	require.NoError(t, err)
	assert.True(t, dup)
}

func TestExpiringKeyRepositoryConfig_Validate(t *testing.T) {
	t.Parallel()
	env := setup(t)
	for _, tc := range []struct {
		config redisdelay.ExpiringKeyRepositoryConfig
		want   string
	}{
		{redisdelay.ExpiringKeyRepositoryConfig{}, "redisdelay: ExpiringKeyRepositoryConfig.Client is nil: pass a redis.UniversalClient"},
		{redisdelay.ExpiringKeyRepositoryConfig{Client: env.client, KeyPrefix: "a{b"}, `ExpiringKeyRepositoryConfig.KeyPrefix "a{b" contains "{" at byte 1`},
		{redisdelay.ExpiringKeyRepositoryConfig{Client: env.client, Namespace: "my handler"}, `ExpiringKeyRepositoryConfig.Namespace "my handler" contains " " at byte 2`},
		{redisdelay.ExpiringKeyRepositoryConfig{Client: env.client, Window: time.Microsecond}, "redisdelay: ExpiringKeyRepositoryConfig.Window is 1µs: use at least 1ms (0 means the default)"},
		{redisdelay.ExpiringKeyRepositoryConfig{Client: env.client, Window: -time.Second}, "redisdelay: ExpiringKeyRepositoryConfig.Window is -1s: use at least 1ms"},
	} {
		_, err := redisdelay.NewExpiringKeyRepository(tc.config, nil)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	repo, err := redisdelay.NewExpiringKeyRepository(redisdelay.ExpiringKeyRepositoryConfig{Client: env.client}, nil)
	require.NoError(t, err)
	require.NotNil(t, repo)
}

// With the repository's Redis unreachable, IsDuplicate fails, the
// Deduplicator fails the handler, and the message is nacked: redelivered
// and handled once Redis is back, never handled unchecked, never lost.
func TestExpiringKeyRepository_RedisUnreachableNacks(t *testing.T) {
	t.Parallel()
	env := setup(t)
	proxy := newFaultProxy(t)
	repoClient := redis.NewClient(&redis.Options{Addr: proxy.addr, MaxRetries: -1})
	t.Cleanup(func() { _ = repoClient.Close() })
	repo, err := redisdelay.NewExpiringKeyRepository(redisdelay.ExpiringKeyRepositoryConfig{
		Client: repoClient, Namespace: topic()}, nil)
	require.NoError(t, err)

	proxy.cut(0)
	dup, err := repo.IsDuplicate(context.Background(), "k")
	require.Error(t, err)
	assert.False(t, dup)
	assert.True(t, isUnreachableCause(err), "%v", err)
	assert.Contains(t, err.Error(), "redisdelay: deduplication key redisdelay:dedup:")

	var seen atomic.Int64
	sub := env.subscriber(t, "g", func(c *redisdelay.SubscriberConfig) {
		c.RetryDelay = func(int) time.Duration { return 300 * time.Millisecond }
	})
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) { seen.Add(1); return h(msg) }
	})
	router.AddMiddleware((&middleware.Deduplicator{
		KeyFactory: middleware.NewMessageHasherFromMetadataField(dedupField),
		Repository: repo, Timeout: time.Second}).Middleware)
	handled := make(chan string, 10)
	router.AddConsumerHandler("h", env.topic, sub, func(msg *message.Message) error {
		handled <- string(msg.Payload) + " attempt " + msg.Metadata.Get(redisdelay.AttemptKey)
		return nil
	})
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()
	t.Cleanup(func() { _ = router.Close() })

	require.NoError(t, env.pub.Publish(env.topic, dedupMessage("k", "m")))
	require.Eventually(t, func() bool { return seen.Load() >= 2 }, 5*time.Second, 10*time.Millisecond, "redelivered after the failed check")
	noneOf(t, handled, 100*time.Millisecond)
	proxy.restore(t)
	got := receiveHandled(t, handled, 5*time.Second)
	assert.Regexp(t, `^m attempt [2-9]`, got)
	noneOf(t, handled, 300*time.Millisecond)
}

func noneOf(t *testing.T, ch <-chan string, during time.Duration) {
	t.Helper()
	select {
	case s := <-ch:
		t.Fatalf("unexpectedly handled %q", s)
	case <-time.After(during):
	}
}

func hexOf(s string) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		b = append(b, digits[s[i]>>4], digits[s[i]&15])
	}
	return string(b)
}
