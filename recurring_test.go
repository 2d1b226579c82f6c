package redisdelay_test

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// setupSchedule is what the schedule tests start with: schedules are per
// key prefix, so the env works under a prefix of the test's own.
func setupSchedule(t *testing.T) *prefixedEnv {
	t.Helper()
	return setupPrefixed(t, "sc-"+watermill.NewShortUUID())
}

// scTick is a tick's message as a subscriber received it.
type scTick struct {
	tick     time.Time
	received time.Time
	uuid     string
}

// scCollector subscribes to topic and records every tick received.
type scCollector struct {
	mu    sync.Mutex
	ticks []scTick
}

func scCollect(t *testing.T, client redis.UniversalClient, prefix, topic string) *scCollector {
	t.Helper()
	// DisableScheduler: the collector publishes no tick itself (ticks are
	// immediate messages: no scheduling needed to receive them).
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{KeyPrefix: prefix, ConsumerGroup: "g", DisableScheduler: true})
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	c := &scCollector{}
	go func() {
		for msg := range ch {
			tick, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(redisdelay.ScheduleTickKey))
			if err == nil {
				c.mu.Lock()
				c.ticks = append(c.ticks, scTick{tick: tick, received: time.Now(), uuid: msg.UUID})
				c.mu.Unlock()
			}
			msg.Ack()
		}
	}()
	return c
}

func (c *scCollector) snapshot() []scTick {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]scTick(nil), c.ticks...)
	sort.Slice(out, func(i, j int) bool { return out[i].tick.Before(out[j].tick) })
	return out
}

// scCheck asserts one message per tick, every period from the first tick
// received to the last: none twice, none missing.
func scCheck(t *testing.T, ticks []scTick, period time.Duration) {
	t.Helper()
	seen := map[int64]int{}
	for _, tk := range ticks {
		seen[tk.tick.UnixMilli()]++
	}
	for tick, n := range seen {
		assert.Equal(t, 1, n, "tick %s published %d times", time.UnixMilli(tick).UTC().Format(time.RFC3339Nano), n)
	}
	for i := 1; i < len(ticks); i++ {
		if gap := ticks[i].tick.Sub(ticks[i-1].tick); gap != period && gap != 0 {
			assert.Failf(t, "tick missing", "ticks %s then %s: %s apart, want %s",
				ticks[i-1].tick.Format(time.RFC3339Nano), ticks[i].tick.Format(time.RFC3339Nano), gap, period)
		}
	}
}

func scManager(t *testing.T, client redis.UniversalClient, prefix, topic string) *redisdelay.Manager {
	return runManager(t, client, redisdelay.ManagerConfig{KeyPrefix: prefix, Topics: []string{topic}})
}

// Three Managers compete for the ticks of one schedule: each tick is
// published once, and none is missed.
func TestSchedule_OneTickPerManager(t *testing.T) {
	t.Parallel()
	env := setupSchedule(t)
	col := scCollect(t, env.client, env.prefix, env.topic)
	require.NoError(t, env.pub.Schedule(context.Background(), redisdelay.Schedule{
		ID: "every200", Spec: "@every 200ms", Topic: env.topic, Payload: []byte("tick"),
		Metadata: map[string]string{"k": "v"},
	}))
	for range 3 {
		scManager(t, env.client, env.prefix, env.topic)
	}
	time.Sleep(2500 * time.Millisecond)
	ticks := col.snapshot()
	require.GreaterOrEqual(t, len(ticks), 9, "ticks received in 2.5 s of @every 200ms")
	scCheck(t, ticks, 200*time.Millisecond)
	var late []time.Duration
	for _, tk := range ticks {
		late = append(late, tk.received.Sub(tk.tick))
	}
	t.Logf("%d ticks, 3 Managers; delivered after their tick instant by: %v", len(ticks), late)
}

// A Manager stopped for two ticks and started again publishes the ticks it
// missed (within the catch-up window), each once; with a window shorter
// than the downtime, the older ones are skipped.
func TestSchedule_CatchUpAfterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Managers for seconds")
	}
	t.Parallel()
	for _, tc := range []struct {
		name   string
		window time.Duration
	}{{"default window", 0}, {"short window", 250 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			env := setupSchedule(t)
			const period = 400 * time.Millisecond
			col := scCollect(t, env.client, env.prefix, env.topic)
			require.NoError(t, env.pub.Schedule(context.Background(), redisdelay.Schedule{
				ID: "s", Spec: "@every 400ms", Topic: env.topic, CatchUpWindow: tc.window,
			}))
			mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: env.client, KeyPrefix: env.prefix, Topics: []string{env.topic}}, logger)
			require.NoError(t, err)
			go func() { _ = mgr.Run(context.Background()) }()
			<-mgr.Running()
			time.Sleep(1300 * time.Millisecond)
			require.NoError(t, mgr.Close())
			stopped := time.Now()
			time.Sleep(2*period + 150*time.Millisecond) // two ticks missed
			restarted := time.Now()
			scManager(t, env.client, env.prefix, env.topic)
			time.Sleep(1300 * time.Millisecond)

			ticks := col.snapshot()
			var missed []scTick
			for _, tk := range ticks {
				if tk.tick.After(stopped) && tk.tick.Before(restarted) {
					missed = append(missed, tk)
				}
			}
			if tc.window == 0 {
				scCheck(t, ticks, period)
				// 950ms down: 2 or 3 ticks of 400ms, by phase
				require.GreaterOrEqual(t, len(missed), 2, "ticks due while no Manager ran")
			} else {
				seen := map[int64]bool{}
				for _, tk := range ticks {
					assert.False(t, seen[tk.tick.UnixMilli()], "tick %s twice", tk.tick)
					seen[tk.tick.UnixMilli()] = true
				}
				for _, tk := range missed {
					assert.False(t, tk.tick.Before(restarted.Add(-tc.window)), "tick %s, later than the 250ms window at the restart, published", tk.tick)
				}
				assert.Less(t, len(missed), 2, "ticks later than the 250ms window are skipped")
			}
			var late []time.Duration
			for _, tk := range missed {
				late = append(late, tk.received.Sub(tk.tick))
			}
			var normal []time.Duration
			for _, tk := range ticks {
				if tk.tick.After(restarted) {
					normal = append(normal, tk.received.Sub(tk.tick))
				}
			}
			t.Logf("%s: %d ticks; missed ticks delivered %v after their instant (restart %s after stop); ticks after the restart: %v",
				tc.name, len(ticks), late, restarted.Sub(stopped).Round(time.Millisecond), normal)
		})
	}
}

// Redis unreachable across a tick instant, for less than a tick: the tick
// is published when Redis answers again, once.
func TestSchedule_RedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("cuts Redis for seconds")
	}
	t.Parallel()
	proxy := newFaultProxy(t)
	env := setupSchedule(t)
	cut := proxy.client(t)
	const period = 500 * time.Millisecond
	col := scCollect(t, env.client, env.prefix, env.topic)
	require.NoError(t, env.pub.Schedule(context.Background(), redisdelay.Schedule{ID: "s", Spec: "@every 500ms", Topic: env.topic}))
	scManager(t, cut, env.prefix, env.topic)
	var outages []time.Time
	for range 3 {
		// cut 150ms before a tick, for 400ms
		now := time.Now()
		next := now.Truncate(period).Add(period)
		if next.Sub(now) < 300*time.Millisecond {
			next = next.Add(period)
		}
		time.Sleep(time.Until(next.Add(-150 * time.Millisecond)))
		proxy.cut(0)
		outages = append(outages, next)
		time.Sleep(400 * time.Millisecond)
		proxy.restore(t)
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(800 * time.Millisecond)
	ticks := col.snapshot()
	scCheck(t, ticks, period)
	got := map[int64]scTick{}
	for _, tk := range ticks {
		got[tk.tick.UnixMilli()] = tk
	}
	var late []time.Duration
	for _, at := range outages {
		tk, ok := got[at.UnixMilli()]
		if assert.True(t, ok, "tick %s, during an outage, missing", at.Format(time.RFC3339Nano)) {
			late = append(late, tk.received.Sub(at))
		}
	}
	t.Logf("%d ticks; the ticks during 400ms outages were delivered after their instant by %v", len(ticks), late)
}

// A claim left by a process that died between claiming a tick and
// publishing it is published by another once it expired.
func TestSchedule_ExpiredClaim(t *testing.T) {
	t.Parallel()
	env := setupSchedule(t)
	col := scCollect(t, env.client, env.prefix, env.topic)
	require.NoError(t, env.pub.Schedule(context.Background(), redisdelay.Schedule{ID: "daily", Spec: "@daily", Topic: env.topic}))
	tick := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	require.NoError(t, env.client.ZAdd(context.Background(), store.Keys{Prefix: env.prefix}.Schedules().Claims(),
		redis.Z{Score: 1, Member: "daily@" + strconv.FormatInt(tick.UnixMilli(), 10)}).Err())
	scManager(t, env.client, env.prefix, env.topic)
	require.Eventually(t, func() bool { return len(col.snapshot()) == 1 }, 3*time.Second, 20*time.Millisecond)
	assert.Equal(t, tick, col.snapshot()[0].tick.UTC())
	n, err := env.client.ZCard(context.Background(), store.Keys{Prefix: env.prefix}.Schedules().Claims()).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "claim removed once published")
}

// Inspector lists and removes schedules; registering one again keeps its
// next tick unless its timing changed.
func TestSchedule_ListRemove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setupSchedule(t)

	list, err := env.insp.Schedules(ctx)
	require.NoError(t, err)
	assert.Empty(t, list)

	ny := redisdelay.Schedule{ID: "morning", Spec: "0 9 * * *", Timezone: "America/New_York", Topic: env.topic, Payload: []byte("p")}
	require.NoError(t, env.pub.Schedule(ctx, ny))
	require.NoError(t, env.pub.Schedule(ctx, redisdelay.Schedule{ID: "fast", Spec: "@every 1h", Topic: env.topic}))
	list, err = env.insp.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, "fast", list[0].ID)
	assert.Equal(t, "morning", list[1].ID)
	assert.Equal(t, "America/New_York", list[1].Timezone)
	assert.Equal(t, []byte("p"), list[1].Payload)
	loc, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	next := list[1].Next.In(loc)
	assert.Equal(t, 9, next.Hour())
	assert.Zero(t, next.Minute())
	assert.WithinDuration(t, time.Now(), next, 25*time.Hour)
	assert.Equal(t, time.Now().Truncate(time.Hour).Add(time.Hour), list[0].Next)

	// Registered again with another payload: same next tick. Another spec: reset.
	ny.Payload = []byte("q")
	require.NoError(t, env.pub.Schedule(ctx, ny))
	again, err := env.insp.Schedules(ctx)
	require.NoError(t, err)
	assert.Equal(t, list[1].Next, again[1].Next)
	assert.Equal(t, []byte("q"), again[1].Payload)
	require.NoError(t, env.client.ZAdd(ctx, store.Keys{Prefix: env.prefix}.Schedules().Next(), redis.Z{Score: 1000, Member: "morning"}).Err())
	ny.Spec = "0 10 * * *"
	require.NoError(t, env.pub.Schedule(ctx, ny))
	again, err = env.insp.Schedules(ctx)
	require.NoError(t, err)
	assert.Equal(t, 10, again[1].Next.In(loc).Hour(), "a changed spec resets the next tick")

	removed, err := env.insp.RemoveSchedule(ctx, "morning")
	require.NoError(t, err)
	assert.True(t, removed)
	removed, err = env.insp.RemoveSchedule(ctx, "morning")
	require.NoError(t, err)
	assert.False(t, removed)
	list, err = env.insp.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "fast", list[0].ID)
}

// A schedule that cannot work is refused, naming what is wrong.
func TestSchedule_Invalid(t *testing.T) {
	t.Parallel()
	env := setupSchedule(t)
	for _, tc := range []struct {
		s    redisdelay.Schedule
		want string
	}{
		{redisdelay.Schedule{ID: "", Spec: "@daily", Topic: env.topic}, "schedule ID"},
		{redisdelay.Schedule{ID: "a@b", Spec: "@daily", Topic: env.topic}, "contains \"@\""},
		{redisdelay.Schedule{ID: "a", Spec: "@daily", Topic: ""}, "topic"},
		{redisdelay.Schedule{ID: "a", Spec: "61 * * * *", Topic: env.topic}, "spec \"61 * * * *\""},
		{redisdelay.Schedule{ID: "a", Spec: "@every 0s", Topic: env.topic}, "at least 1ms"},
		{redisdelay.Schedule{ID: "a", Spec: "@every soon", Topic: env.topic}, "Go duration"},
		{redisdelay.Schedule{ID: "a", Spec: "CRON_TZ=UTC 0 9 * * *", Topic: env.topic}, "Schedule.Timezone"},
		{redisdelay.Schedule{ID: "a", Spec: "@daily", Timezone: "Mars/Olympus", Topic: env.topic}, "time zone \"Mars/Olympus\" is unknown"},
		{redisdelay.Schedule{ID: "a", Spec: "@daily", Timezone: "Local", Topic: env.topic}, "time zone \"Local\""},
		{redisdelay.Schedule{ID: "a", Spec: "@daily", Topic: env.topic, CatchUpWindow: -time.Second}, "CatchUpWindow"},
		{redisdelay.Schedule{ID: "a", Spec: "0 0 30 2 *", Topic: env.topic}, "never ticks"},
	} {
		err := env.pub.Schedule(context.Background(), tc.s)
		require.ErrorIs(t, err, redisdelay.ErrInvalidSchedule, "%+v", tc.s)
		assert.Contains(t, err.Error(), tc.want)
	}
	// Its messages would be refused at every tick: refused once, here.
	err := env.pub.Schedule(context.Background(), redisdelay.Schedule{ID: "big", Spec: "@daily", Topic: env.topic, Payload: make([]byte, 2<<20)})
	require.ErrorIs(t, err, redisdelay.ErrInvalidSchedule)
	require.ErrorIs(t, err, redisdelay.ErrMessageTooLarge)
	assert.Contains(t, err.Error(), `schedule "big": its messages cannot be published`)
	err = env.pub.Schedule(context.Background(), redisdelay.Schedule{ID: "baddelay", Spec: "@daily", Topic: env.topic,
		Metadata: map[string]string{delay.DelayedForKey: "soon"}})
	require.ErrorIs(t, err, redisdelay.ErrInvalidSchedule)
	require.ErrorIs(t, err, redisdelay.ErrInvalidDelay)

	list, err := env.insp.Schedules(context.Background())
	require.NoError(t, err)
	assert.Empty(t, list, "nothing stored")
}

// Without a Manager, the scheduler a Subscriber runs publishes the ticks
// (of every schedule under its prefix, whatever topics it subscribed to).
func TestSchedule_SubscriberPublishesTicks(t *testing.T) {
	t.Parallel()
	env := setupSchedule(t)
	col := scCollect(t, env.client, env.prefix, env.topic)
	require.NoError(t, env.pub.Schedule(context.Background(), redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Topic: env.topic}))
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{KeyPrefix: env.prefix, ConsumerGroup: "other"})
	_, err := sub.Subscribe(context.Background(), "unrelated-"+env.topic)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(col.snapshot()) >= 3 }, 3*time.Second, 20*time.Millisecond)
	require.NoError(t, sub.Close())
	scCheck(t, col.snapshot(), 200*time.Millisecond)
}

// Redis errors name the schedule; a stored definition that does not
// decode (written by hand) makes Schedules fail naming it and the fix.
func TestSchedule_Errors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setupSchedule(t)
	require.NoError(t, env.client.HSet(ctx, store.Keys{Prefix: env.prefix}.Schedules().Defs(), "broken", "{not json").Err())
	_, err := env.insp.Schedules(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `schedule "broken"`)
	assert.Contains(t, err.Error(), "remove it with Inspector.RemoveSchedule")
	removed, err := env.insp.RemoveSchedule(ctx, "broken")
	require.NoError(t, err)
	assert.True(t, removed)

	closed := openClient("")
	require.NoError(t, closed.Close())
	pub := scPublisher(t, closed, env.prefix)
	err = pub.Schedule(ctx, redisdelay.Schedule{ID: "s", Spec: "@daily", Topic: env.topic})
	require.ErrorIs(t, err, redis.ErrClosed)
	assert.Contains(t, err.Error(), `register schedule "s"`)
	closedInsp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: closed, KeyPrefix: env.prefix})
	require.NoError(t, err)
	_, err = closedInsp.Schedules(ctx)
	assert.ErrorIs(t, err, redis.ErrClosed)
	_, err = closedInsp.RemoveSchedule(ctx, "s")
	assert.ErrorIs(t, err, redis.ErrClosed)
}

// A stored definition that does not decode (written by hand) is skipped,
// logged, while the other schedules keep ticking.
func TestSchedule_BrokenDefinitionSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setupSchedule(t)
	col := scCollect(t, env.client, env.prefix, env.topic)
	require.NoError(t, env.client.HSet(ctx, store.Keys{Prefix: env.prefix}.Schedules().Defs(), "broken", "{not json").Err())
	require.NoError(t, env.client.ZAdd(ctx, store.Keys{Prefix: env.prefix}.Schedules().Next(), redis.Z{Score: 1, Member: "broken"}).Err())
	require.NoError(t, env.pub.Schedule(ctx, redisdelay.Schedule{ID: "ok", Spec: "@every 200ms", Topic: env.topic}))
	scManager(t, env.client, env.prefix, env.topic)
	require.Eventually(t, func() bool { return len(col.snapshot()) >= 3 }, 3*time.Second, 20*time.Millisecond)
	scCheck(t, col.snapshot(), 200*time.Millisecond)
}

// A tick loop with no schedule sleeps up to a minute: a schedule
// registered meanwhile wakes it (recurringadd.lua publishes), so its first
// tick is published on time.
func TestSchedule_RegisteredWakesIdleTickLoops(t *testing.T) {
	t.Parallel()
	env := setupSchedule(t)
	col := scCollect(t, env.client, env.prefix, env.topic)
	scManager(t, env.client, env.prefix, env.topic)
	time.Sleep(500 * time.Millisecond) // the loop found nothing and sleeps
	registered := time.Now()
	require.NoError(t, env.pub.Schedule(context.Background(),
		redisdelay.Schedule{ID: "s", Spec: "@every 300ms", Topic: env.topic}))
	require.Eventually(t, func() bool { return len(col.snapshot()) >= 1 }, 2*time.Second, 10*time.Millisecond,
		"no tick within 2s of registering @every 300ms")
	first := col.snapshot()[0]
	t.Logf("FIGURE first tick %s after Schedule, %s after its instant", first.received.Sub(registered).Round(time.Millisecond),
		first.received.Sub(first.tick).Round(time.Millisecond))
	assert.Less(t, first.received.Sub(first.tick), time.Second)
}

// Redis refuses the Manager the subscription to its wake-ups: its tick
// loop reads the schedules once per CheckInterval instead, so a new
// schedule still ticks. A user refused the channel still registers a
// schedule (the wake-up is left out).
func TestSchedule_TicksWithoutWakeUps(t *testing.T) {
	t.Parallel()
	needSingle(t, "it creates Redis users")
	env := setupSchedule(t)
	restricted, _ := newACLUser(t, "~"+env.prefix+":*", "&"+env.prefix+":*", "+@all", "-@dangerous", "-subscribe")
	col := scCollect(t, env.client, env.prefix, env.topic)
	runManager(t, restricted, redisdelay.ManagerConfig{KeyPrefix: env.prefix, Topics: []string{env.topic}, CheckInterval: 200 * time.Millisecond})
	time.Sleep(500 * time.Millisecond) // denied, and the loop sleeps
	require.NoError(t, env.pub.Schedule(context.Background(),
		redisdelay.Schedule{ID: "s", Spec: "@every 300ms", Topic: env.topic}))
	require.Eventually(t, func() bool { return len(col.snapshot()) >= 3 }, 3*time.Second, 10*time.Millisecond)
	scCheck(t, col.snapshot(), 300*time.Millisecond)
	noChannels, _ := newACLUser(t, "~"+env.prefix+":*", "resetchannels", "+@all", "-@dangerous")
	require.NoError(t, scPublisher(t, noChannels, env.prefix).Schedule(context.Background(),
		redisdelay.Schedule{ID: "s2", Spec: "@every 1h", Topic: env.topic}))
}

// A closed Publisher registers no schedule, and a closed Subscriber
// initializes no topic: both say ErrClosed.
func TestSchedule_AndInitializeAfterClose(t *testing.T) {
	t.Parallel()
	env := setupSchedule(t)
	require.NoError(t, env.pub.Close())
	err := env.pub.Schedule(context.Background(), redisdelay.Schedule{ID: "s", Spec: "@daily", Topic: env.topic})
	require.ErrorIs(t, err, redisdelay.ErrClosed)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{KeyPrefix: env.prefix, ConsumerGroup: "g"})
	require.NoError(t, sub.Close())
	require.ErrorIs(t, sub.SubscribeInitialize(env.topic), redisdelay.ErrClosed)
	schedules, err := env.insp.Schedules(context.Background())
	require.NoError(t, err)
	assert.Empty(t, schedules)
}

// A Publisher of 4 partitions schedules to a fresh topic: the topic gets 4
// partitions, so the ticks and the Publisher's own messages both go in,
// rather than the first tick fixing the topic at one partition.
func TestSchedule_PartitionedTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setupSchedule(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.client, KeyPrefix: env.prefix, Partitions: 4}, logger)
	require.NoError(t, err)
	require.NoError(t, pub.Schedule(ctx, redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Topic: env.topic}))
	st, err := env.insp.Stats(ctx, env.topic)
	require.NoError(t, err)
	require.Equal(t, 4, st.Partitions, "stored by Schedule")

	col := scCollect4(t, env.client, env.prefix, env.topic)
	scManager(t, env.client, env.prefix, env.topic)
	require.Eventually(t, func() bool { return col.n.Load() >= 2 }, 5*time.Second, 20*time.Millisecond, "ticks delivered")
	require.NoError(t, pub.Publish(env.topic, newMessage("mine")), "the Publisher's count still matches")

	other, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.client, KeyPrefix: env.prefix, Partitions: 2}, logger)
	require.NoError(t, err)
	err = other.Schedule(ctx, redisdelay.Schedule{ID: "s2", Spec: "@daily", Topic: env.topic})
	require.ErrorIs(t, err, redisdelay.ErrPartitionMismatch)
}

// scCollect4 counts the messages of a topic of 4 partitions.
type scCounter struct{ n atomic.Int64 }

func scCollect4(t *testing.T, client redis.UniversalClient, prefix, topic string) *scCounter {
	t.Helper()
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{KeyPrefix: prefix, ConsumerGroup: "g", DisableScheduler: true, Partitions: 4})
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	c := &scCounter{}
	go func() {
		for msg := range ch {
			c.n.Add(1)
			msg.Ack()
		}
	}()
	return c
}

// A schedule whose ticks would refuse one another (each holds its business
// key for a delay longer than the gap between ticks) is refused by
// Schedule, naming the fix; with a policy that replaces, it is accepted.
func TestSchedule_BusinessKeyOverlapRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setupSchedule(t)
	md := map[string]string{redisdelay.BusinessKey: "report", delay.DelayedForKey: "3s"}
	err := env.pub.Schedule(ctx, redisdelay.Schedule{ID: "s", Spec: "@every 1s", Topic: env.topic, Metadata: md})
	require.ErrorIs(t, err, redisdelay.ErrInvalidSchedule)
	assert.Contains(t, err.Error(), `business key "report"`)
	assert.Contains(t, err.Error(), redisdelay.BusinessKeyPolicyKey)

	md[redisdelay.BusinessKeyPolicyKey] = string(redisdelay.ReplaceWaiting)
	require.NoError(t, env.pub.Schedule(ctx, redisdelay.Schedule{ID: "s", Spec: "@every 1s", Topic: env.topic, Metadata: md}))
	delete(md, redisdelay.BusinessKeyPolicyKey)
	md[delay.DelayedForKey] = "500ms"
	require.NoError(t, env.pub.Schedule(ctx, redisdelay.Schedule{ID: "s", Spec: "@every 1s", Topic: env.topic, Metadata: md}), "shorter than the gap")
}

// A tick Publish refuses (its business key is held by another waiting
// message) is skipped and logged, not retried: the claims do not pile up
// as the later ticks come due.
func TestSchedule_RefusedTicksSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setupSchedule(t)
	holder := newMessage("holder")
	holder.Metadata.Set(redisdelay.BusinessKey, "report")
	delay.Message(holder, delay.For(time.Hour))
	require.NoError(t, env.pub.Publish(env.topic, holder))
	require.NoError(t, env.pub.Schedule(ctx, redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Topic: env.topic,
		Metadata: map[string]string{redisdelay.BusinessKey: "report"}}))
	scManager(t, env.client, env.prefix, env.topic)

	claims := store.Keys{Prefix: env.prefix}.Schedules().Claims()
	first := time.Now()
	require.Eventually(t, func() bool {
		s, err := env.insp.Schedules(ctx)
		return err == nil && len(s) == 1 && s[0].Next.After(first.Add(time.Second))
	}, 10*time.Second, 50*time.Millisecond, "ticks go on past the refused ones")
	n, err := env.client.ZCard(ctx, claims).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, n, int64(1), "refused ticks are not kept claimed")
	st, err := env.insp.Stats(ctx, env.topic)
	require.NoError(t, err)
	assert.EqualValues(t, 1, st.Waiting, "only the holder waits")
}

// A paused schedule publishes no tick, stays paused when registered again
// (as every process does at start), can still be triggered by hand, and
// resumes at its next tick after now.
func TestSchedule_PauseResumeTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setupSchedule(t)
	col := scCollect(t, env.client, env.prefix, env.topic)
	def := redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Topic: env.topic, Payload: []byte("tick")}
	require.NoError(t, env.pub.Schedule(ctx, def))
	scManager(t, env.client, env.prefix, env.topic)
	require.Eventually(t, func() bool { return len(col.snapshot()) >= 2 }, 5*time.Second, 20*time.Millisecond)

	was, err := env.insp.PauseSchedule(ctx, "s")
	require.NoError(t, err)
	assert.True(t, was, "was running")
	was, err = env.insp.PauseSchedule(ctx, "s")
	require.NoError(t, err)
	assert.False(t, was, "already paused")
	require.NoError(t, env.pub.Schedule(ctx, def), "registered again at a deploy")
	list, err := env.insp.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.False(t, list[0].Paused.IsZero(), "listed as paused")
	assert.True(t, list[0].Next.IsZero(), "no next tick while paused")
	// Five ticks' time: a tick claimed before the pause is still published,
	// but none is due after it.
	pausedAt := list[0].Paused
	afterPause := func() (n int) {
		for _, tk := range col.snapshot() {
			if tk.tick.After(pausedAt) {
				n++
			}
		}
		return n
	}
	time.Sleep(time.Second)
	assert.Zero(t, afterPause(), "no tick while paused")
	paused := len(col.snapshot())

	assert.False(t, list[0].LastTick.IsZero(), "the tick loop records the tick it published last")
	assert.False(t, list[0].LastTick.After(pausedAt), "no tick after the pause")
	require.NoError(t, env.insp.TriggerSchedule(ctx, "s"))
	require.Eventually(t, func() bool { return afterPause() == 1 }, 5*time.Second, 20*time.Millisecond, "the triggered tick")
	list, err = env.insp.Schedules(ctx)
	require.NoError(t, err)
	assert.True(t, list[0].LastTick.After(pausedAt), "a trigger is recorded as the last tick")

	was, err = env.insp.ResumeSchedule(ctx, "s")
	require.NoError(t, err)
	assert.True(t, was, "was paused")
	was, err = env.insp.ResumeSchedule(ctx, "s")
	require.NoError(t, err)
	assert.False(t, was, "already running")
	require.Eventually(t, func() bool { return len(col.snapshot()) >= paused+3 }, 5*time.Second, 20*time.Millisecond, "ticks again")
	list, err = env.insp.Schedules(ctx)
	require.NoError(t, err)
	assert.True(t, list[0].Paused.IsZero())
	assert.False(t, list[0].Next.IsZero())

	for _, action := range []func() error{
		func() error { _, err := env.insp.PauseSchedule(ctx, "nope"); return err },
		func() error { _, err := env.insp.ResumeSchedule(ctx, "nope"); return err },
		func() error { return env.insp.TriggerSchedule(ctx, "nope") },
	} {
		err := action()
		require.ErrorIs(t, err, redisdelay.ErrUnknownSchedule)
		assert.Contains(t, err.Error(), `schedule "nope"`)
	}
	removed, err := env.insp.RemoveSchedule(ctx, "s")
	require.NoError(t, err)
	assert.True(t, removed)
	n, err := env.client.Exists(ctx, store.Keys{Prefix: env.prefix}.Schedules().Paused(), store.Keys{Prefix: env.prefix}.Schedules().Last()).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no pause flag left behind")
}

// Jitter spreads the ticks' messages over the window: they wait, due
// within Jitter of their tick; the business-key check counts the jitter.
func TestSchedule_JitterDelaysTicks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setupSchedule(t)
	require.NoError(t, env.pub.Schedule(ctx, redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Topic: env.topic, Jitter: time.Hour}))
	scManager(t, env.client, env.prefix, env.topic)
	var waiting []redisdelay.WaitingMessage
	var err error
	require.Eventually(t, func() bool {
		waiting, err = env.insp.Waiting(ctx, env.topic, 0, 100)
		return err == nil && len(waiting) >= 3
	}, 5*time.Second, 20*time.Millisecond, "the ticks' messages wait")
	for _, w := range waiting {
		tick, err := time.Parse(time.RFC3339Nano, w.Message.Metadata.Get(redisdelay.ScheduleTickKey))
		require.NoError(t, err)
		assert.True(t, !w.Due.Before(tick) && w.Due.Before(tick.Add(time.Hour+time.Second)), "due %s for tick %s", w.Due, tick)
	}

	err = env.pub.Schedule(ctx, redisdelay.Schedule{ID: "k", Spec: "@every 1m", Topic: env.topic, Jitter: 2 * time.Minute,
		Metadata: map[string]string{redisdelay.BusinessKey: "report"}})
	require.ErrorIs(t, err, redisdelay.ErrInvalidSchedule, "a jitter longer than the gap overlaps")
}
