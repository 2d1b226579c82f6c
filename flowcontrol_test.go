package redisdelay_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// collect acks what ch delivers into got (UUID -> deliveries) until ctx ends.
func collect(ctx context.Context, ch <-chan *message.Message, mu *sync.Mutex, got map[string]int) {
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			mu.Lock()
			got[msg.UUID]++
			mu.Unlock()
			msg.Ack()
		}
	}
}

func count(mu *sync.Mutex, got map[string]int) int {
	mu.Lock()
	defer mu.Unlock()
	return len(got)
}

// A paused group receives nothing while another group of the topic keeps
// receiving; its messages accumulate (immediate and delayed ones), the
// pause outlives a restart of its subscriber, and Resume delivers them all.
// Two partitions: the partition 1 subscription reads the flag on partition 0.
func TestPause_GroupAccumulatesAndResumeDeliversAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	const parts, n = 2, 40
	pub := newPartitionedPublisher(t, env.client, parts)
	config := func(group string) redisdelay.SubscriberConfig {
		return redisdelay.SubscriberConfig{ConsumerGroup: group, Partitions: parts, BlockTime: 100 * time.Millisecond, CheckInterval: 100 * time.Millisecond}
	}
	subA := newSubscriber(t, env.client, config("a"))
	subB := newSubscriber(t, env.client, config("b"))
	var muA, muB sync.Mutex
	gotA, gotB := map[string]int{}, map[string]int{}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go collect(runCtx, subscribe(t, subA, env.topic), &muA, gotA)
	go collect(runCtx, subscribe(t, subB, env.topic), &muB, gotB)

	require.NoError(t, pub.Publish(env.topic, newMessage("before")))
	require.Eventually(t, func() bool { return count(&muA, gotA) == 1 && count(&muB, gotB) == 1 }, 3*time.Second, 10*time.Millisecond)

	require.NoError(t, env.insp.Pause(ctx, env.topic, "a"))
	require.NoError(t, env.insp.Pause(ctx, env.topic, "a"), "pausing a paused group")
	paused, err := env.insp.Paused(ctx, env.topic, "a")
	require.NoError(t, err)
	require.True(t, paused)
	// A read waiting when Pause ran may still return one batch: let it end.
	time.Sleep(300 * time.Millisecond)

	for i := range n {
		msg := newMessage(fmt.Sprint(i))
		if i%2 == 1 {
			delay.Message(msg, delay.For(200*time.Millisecond))
		}
		require.NoError(t, pub.Publish(env.topic, msg))
	}
	require.Eventually(t, func() bool { return count(&muB, gotB) == n+1 }, 5*time.Second, 10*time.Millisecond, "the other group keeps receiving")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 1, count(&muA, gotA), "the paused group received messages")
	ga := groupStats(t, env.insp, env.topic, "a")
	require.True(t, ga.Paused)
	require.EqualValues(t, n, ga.Ready, "the paused group's messages accumulate")
	require.False(t, groupStats(t, env.insp, env.topic, "b").Paused)

	// The pause is in Redis: a new subscriber of the group stays paused.
	require.NoError(t, subA.Close())
	subA2 := newSubscriber(t, env.client, config("a"))
	go collect(runCtx, subscribe(t, subA2, env.topic), &muA, gotA)
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, 1, count(&muA, gotA), "the paused group received messages after its subscriber restarted")

	resumed := time.Now()
	was, err := env.insp.Resume(ctx, env.topic, "a")
	require.NoError(t, err)
	require.True(t, was)
	require.Eventually(t, func() bool { return count(&muA, gotA) == n+1 }, 5*time.Second, 5*time.Millisecond, "resume delivers everything")
	t.Logf("FIGURE resume: all %d accumulated messages delivered %s after Resume (BlockTime 100ms)", n, time.Since(resumed).Round(time.Millisecond))
	muA.Lock()
	for id, k := range gotA {
		require.Equal(t, 1, k, "message %s delivered %d times", id, k)
	}
	muA.Unlock()
	require.Eventually(t, func() bool {
		g := groupStats(t, env.insp, env.topic, "a")
		return g.Ready == 0 && g.Pending == 0 && !g.Paused
	}, 3*time.Second, 20*time.Millisecond)
	was, err = env.insp.Resume(ctx, env.topic, "a")
	require.NoError(t, err)
	require.False(t, was, "resuming a group that is not paused")
}

// DeleteGroup removes the group's pause with the rest of it.
func TestPause_DeleteGroupRemovesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	require.NoError(t, newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"}).SubscribeInitialize(env.topic))
	require.NoError(t, env.insp.Pause(ctx, env.topic, "g"))
	_, err := env.insp.DeleteGroup(ctx, env.topic, "g")
	require.NoError(t, err)
	paused, err := env.insp.Paused(ctx, env.topic, "g")
	require.NoError(t, err)
	require.False(t, paused)
}

func TestPause_RejectsInvalidNames(t *testing.T) {
	ctx := context.Background()
	env := setup(t)
	require.ErrorIs(t, env.insp.Pause(ctx, "a{b", "g"), redisdelay.ErrInvalidTopic)
	_, err := env.insp.Resume(ctx, "a{b", "g")
	require.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
	_, err = env.insp.Paused(ctx, "t", "")
	require.ErrorContains(t, err, "consumer group")
}

func TestRateLimit_Validate(t *testing.T) {
	base := redisdelay.SubscriberConfig{Client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), ConsumerGroup: "g"}
	for _, c := range []struct {
		name      string
		configure func(*redisdelay.SubscriberConfig)
		want      string
	}{
		{"no messages", func(c *redisdelay.SubscriberConfig) { c.RateLimit = redisdelay.RateLimit{Per: time.Second} },
			"SubscriberConfig.RateLimit.Messages is 0: use 1 to 1,000,000 messages per 1s (leave the whole RateLimit zero for no limit)"},
		{"no interval", func(c *redisdelay.SubscriberConfig) { c.RateLimit = redisdelay.RateLimit{Messages: 10} },
			"SubscriberConfig.RateLimit.Per is 0s: use whole milliseconds from 1ms to 24h"},
		{"negative", func(c *redisdelay.SubscriberConfig) {
			c.RateLimit = redisdelay.RateLimit{Messages: -1, Per: time.Second}
		}, "RateLimit.Messages is -1"},
		{"sub-millisecond", func(c *redisdelay.SubscriberConfig) {
			c.RateLimit = redisdelay.RateLimit{Messages: 1, Per: 1500 * time.Microsecond}
		}, "RateLimit.Per is 1.5ms"},
		{"zero per topic", func(c *redisdelay.SubscriberConfig) {
			c.TopicRateLimits = map[string]redisdelay.RateLimit{"orders": {}}
		}, `SubscriberConfig.TopicRateLimits["orders"].Messages is 0`},
		{"bad topic", func(c *redisdelay.SubscriberConfig) {
			c.TopicRateLimits = map[string]redisdelay.RateLimit{"a{b": {Messages: 1, Per: time.Second}}
		}, "SubscriberConfig.TopicRateLimits: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			config := base
			c.configure(&config)
			_, err := redisdelay.NewSubscriber(config, logger)
			require.ErrorContains(t, err, c.want)
		})
	}
}

// rateRun consumes tp with subs subscribers of group g, each on its own
// client, until want messages arrived; it returns how long that took from
// the first message and how many each subscriber received. It closes the
// subscribers before it returns, so a message one of them fetched beyond
// want goes back to the group for the next run (left open, it would hold
// it, its receiver gone).
func rateRun(t *testing.T, tp string, subs int, config redisdelay.SubscriberConfig, want int, within time.Duration) (time.Duration, []int) {
	t.Helper()
	var total atomic.Int64
	per := make([]atomic.Int64, subs)
	var first atomic.Int64
	done := make(chan time.Time, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for k := range subs {
		sub := newSubscriber(t, newClient(t), config)
		defer sub.Close()
		ch := subscribe(t, sub, tp)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case msg, ok := <-ch:
					if !ok {
						return
					}
					msg.Ack()
					first.CompareAndSwap(0, time.Now().UnixNano())
					per[k].Add(1)
					if total.Add(1) == int64(want) {
						done <- time.Now()
					}
				}
			}
		}()
	}
	var end time.Time
	select {
	case end = <-done:
	case <-time.After(within):
		t.Fatalf("%d of %d messages within %s", total.Load(), want, within)
	}
	cancel()
	counts := make([]int, subs)
	for k := range per {
		counts[k] = int(per[k].Load())
	}
	return end.Sub(time.Unix(0, first.Load())), counts
}

// Three subscribers (own clients: as three processes) of one group share
// one limit: 100 messages take about (100-5)/50 s at 50 msg/s (a read
// takes a tenth of the limit), and each subscriber gets turns.
func TestRateLimit_HoldsAcrossSubscribers(t *testing.T) {
	t.Parallel()
	env := setup(t)
	publishBacklog(t, env.topic, 300)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", BatchSize: 10, BlockTime: 100 * time.Millisecond,
		TopicRateLimits: map[string]redisdelay.RateLimit{env.topic: {Messages: 50, Per: time.Second}}}
	took, counts := rateRun(t, env.topic, 3, config, 100, 10*time.Second)
	rate := float64(100-5) / took.Seconds() // the first batch is a burst
	t.Logf("FIGURE rate limit 50/s, 3 subscribers: 100 messages in %s (%.1f msg/s after the first batch), per subscriber %v", took.Round(time.Millisecond), rate, counts)
	require.Greater(t, took, 1200*time.Millisecond, "the limit did not hold")
	require.Less(t, took, 4*time.Second, "far below the limit")
	for k, n := range counts {
		require.Positive(t, n, "subscriber %d starved: %v", k, counts)
	}
}

// A subscriber started with another limit applies it at once, even when
// reservations under the old, slower one reach far ahead.
func TestRateLimit_ChangeApplies(t *testing.T) {
	t.Parallel()
	env := setup(t)
	publishBacklog(t, env.topic, 100)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", BatchSize: 5, BlockTime: 100 * time.Millisecond,
		RateLimit: redisdelay.RateLimit{Messages: 5, Per: time.Second}}
	took, _ := rateRun(t, env.topic, 1, config, 10, 10*time.Second)
	t.Logf("FIGURE 5/s: 10 messages in %s", took.Round(time.Millisecond))
	require.Greater(t, took, 700*time.Millisecond)
	config.RateLimit = redisdelay.RateLimit{Messages: 1000, Per: time.Second}
	took, _ = rateRun(t, env.topic, 1, config, 90, 10*time.Second)
	t.Logf("FIGURE then 1000/s: 90 messages in %s", took.Round(time.Millisecond))
	require.Less(t, took, 1500*time.Millisecond, "the new limit did not apply (the old one: 18 s)")
}

// The accuracy figure (REDISDELAY_FIGURES=1): 3 subscribers, each with its
// own client, consume a backlog at 200 msg/s for 10 s.
func TestFigures_RateLimitAccuracy(t *testing.T) {
	if os.Getenv("REDISDELAY_FIGURES") == "" {
		t.Skip("set REDISDELAY_FIGURES=1")
	}
	for _, c := range []struct{ limit, batch int }{{200, 10}, {200, 32}, {1000, 32}} {
		env := setup(t)
		publishBacklog(t, env.topic, c.limit*12)
		config := redisdelay.SubscriberConfig{ConsumerGroup: "g", BatchSize: c.batch,
			RateLimit: redisdelay.RateLimit{Messages: c.limit, Per: time.Second}}
		want := c.limit * 10
		took, counts := rateRun(t, env.topic, 3, config, want, 30*time.Second)
		// want messages from the first: the first batch is a burst, the rest at the limit.
		steady := float64(want-min(c.batch, (c.limit+9)/10)) / took.Seconds()
		t.Logf("FIGURE limit %d msg/s, BatchSize %d, 3 subscribers: %d messages in %s: %.1f msg/s after the first batch (%+.2f%%), %.1f msg/s overall; per subscriber %v",
			c.limit, c.batch, want, took.Round(time.Millisecond), steady, 100*(steady/float64(c.limit)-1), float64(want)/took.Seconds(), counts)
	}
}

// Redis unreachable while the group is paused (the pause check fails):
// the subscription retries, and after Redis is back and the group resumed
// it delivers what accumulated.
func TestPause_CheckSurvivesRedisOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy := newFaultProxy(t)
	client := proxy.client(t)
	env := setup(t)
	require.NoError(t, env.insp.Pause(ctx, env.topic, "g"))
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BlockTime: 50 * time.Millisecond, CheckInterval: 100 * time.Millisecond})
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("m")))
	nothing(t, ch, 300*time.Millisecond)
	proxy.cut(0)
	time.Sleep(500 * time.Millisecond)
	proxy.restore(t)
	_, err := env.insp.Resume(ctx, env.topic, "g")
	require.NoError(t, err)
	receive(t, ch, 5*time.Second).Ack()
}

// A paused group's subscribers do not read, by design: Health does not
// report them as stopped (no_active_consumer) while messages accumulate.
func TestPause_PausedGroupIsHealthy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	require.NoError(t, env.insp.Pause(ctx, env.topic, "g"))
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BlockTime: 50 * time.Millisecond})
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, newPublisher(t, env.client).Publish(env.topic, newMessage("m")))
	time.Sleep(600 * time.Millisecond)
	rep := healthReport(t, env.insp, redisdelay.HealthConfig{Topics: []string{env.topic}, ConsumerIdle: 200 * time.Millisecond})
	require.Empty(t, rep.Problems)
	_, err := env.insp.Resume(ctx, env.topic, "g")
	require.NoError(t, err)
	receive(t, ch, 3*time.Second).Ack()
}

// With the default BlockTime (30s) the subscriptions are blocked in long
// reads: Pause and Resume reach them at once through their notification,
// on every partition.
func TestPause_PromptWithLongReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	const parts = 2
	pub := newPartitionedPublisher(t, env.client, parts)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts})
	var mu sync.Mutex
	got := map[string]int{}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go collect(runCtx, subscribe(t, sub, env.topic), &mu, got)
	awaitIdleSubscriptions(t, env.client, env.topic, parts)

	require.NoError(t, env.insp.Pause(ctx, env.topic, "g"))
	time.Sleep(200 * time.Millisecond) // the notification's way
	for i := range 10 {
		require.NoError(t, pub.Publish(env.topic, newMessage(fmt.Sprint(i))))
	}
	time.Sleep(time.Second)
	require.Equal(t, 0, count(&mu, got), "the paused group received messages")

	resumed := time.Now()
	_, err := env.insp.Resume(ctx, env.topic, "g")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return count(&mu, got) == 10 }, 2*time.Second, 5*time.Millisecond, "resume delivers at once")
	t.Logf("FIGURE resume with reads blocked for 30s: all 10 delivered %s after Resume", time.Since(resumed).Round(time.Millisecond))
}

// A pause set without a notification (by a version before notifications,
// or while the subscriber's notification connection was down) is seen at
// the latest within BlockTime, and so is its end.
func TestPause_WithoutNotificationSeenWithinBlockTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	const block = 300 * time.Millisecond
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BlockTime: block})
	ch := subscribe(t, sub, env.topic)
	awaitIdleSubscriptions(t, env.client, env.topic, 1)
	paused := shardOf(env.topic, 0).Paused("g")
	require.NoError(t, env.client.Set(ctx, paused, "1", 0).Err())
	time.Sleep(3 * block) // a read timed out, then the check
	require.NoError(t, env.pub.Publish(env.topic, newMessage("m")))
	nothing(t, ch, 3*block)
	require.NoError(t, env.client.Del(ctx, paused).Err())
	receive(t, ch, 5*block).Ack()
}

// Pause and Resume store the change even when Redis refuses them the
// notification (a user without the channels): they say so, and
// subscribers see it within BlockTime.
func TestPause_NotificationRefused(t *testing.T) {
	t.Parallel()
	needSingle(t, "it creates Redis users")
	ctx := context.Background()
	restricted, _ := newACLUser(t, "~"+redisdelay.DefaultKeyPrefix+":*", "resetchannels", "+@all", "-@dangerous")
	env := setup(t)
	insp := newInspector(t, restricted)
	err := insp.Pause(ctx, env.topic, "g")
	require.ErrorContains(t, err, "the change is stored, but telling the subscribers failed")
	require.ErrorContains(t, err, "NOPERM")
	paused, err := insp.Paused(ctx, env.topic, "g")
	require.NoError(t, err)
	require.True(t, paused)
	was, err := insp.Resume(ctx, env.topic, "g")
	require.ErrorContains(t, err, "the change is stored, but telling the subscribers failed")
	require.True(t, was)
	paused, err = insp.Paused(ctx, env.topic, "g")
	require.NoError(t, err)
	require.False(t, paused)
}
