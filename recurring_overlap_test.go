package redisdelay_test

// The overlap policy of recurring schedules (Schedule.Overlap): with
// OverlapSkip a tick is skipped while the previous tick's message is in
// flight, whatever holds it (waiting, ready, pending, retried, reclaimed),
// and published again once every group finished it; no stale state keeps a
// schedule skipping. Real Redis; each test has a key prefix of its own.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// ovWithin bounds every wait of these tests: generous, for loaded machines.
const ovWithin = 20 * time.Second

// ovEnv is what the overlap tests start with: an env under a prefix of
// the test's own (its pub registers the schedules), with the helpers below
// and a Manager publishing the ticks.
type ovEnv struct {
	*prefixedEnv
	t   *testing.T
	ctx context.Context
}

func setupOverlap(t *testing.T) *ovEnv {
	t.Helper()
	e := &ovEnv{prefixedEnv: setupPrefixed(t, "ov-"+watermill.NewShortUUID()), t: t, ctx: context.Background()}
	t.Cleanup(func() { _ = e.pub.Close() })
	return e
}

// manager runs the Manager that publishes the ticks, promotes and
// reclaims: started after the consumer groups exist, so the first tick
// finds them.
func (e *ovEnv) manager() {
	runManager(e.t, e.client, redisdelay.ManagerConfig{KeyPrefix: e.prefix, Topics: []string{e.topic}, CheckInterval: 100 * time.Millisecond})
}

// subscriber is a subscriber of group that leaves the scheduling to the
// Manager.
func (e *ovEnv) subscriber(group string, configure ...func(*redisdelay.SubscriberConfig)) *redisdelay.Subscriber {
	config := redisdelay.SubscriberConfig{KeyPrefix: e.prefix, ConsumerGroup: group, DisableScheduler: true}
	for _, c := range configure {
		c(&config)
	}
	sub := newSubscriber(e.t, e.client, config)
	require.NoError(e.t, sub.SubscribeInitialize(e.topic))
	return sub
}

// schedule registers s (on e's topic) with OverlapSkip unless it says
// otherwise.
func (e *ovEnv) schedule(s redisdelay.Schedule) {
	e.t.Helper()
	s.Topic = e.topic
	require.NoError(e.t, e.pub.Schedule(e.ctx, s))
}

// listed is schedule id as Inspector.Schedules reports it.
func (e *ovEnv) listed(id string) redisdelay.Schedule {
	e.t.Helper()
	all, err := e.insp.Schedules(e.ctx)
	require.NoError(e.t, err)
	for _, s := range all {
		if s.ID == id {
			return s
		}
	}
	e.t.Fatalf("schedule %q not listed", id)
	return redisdelay.Schedule{}
}

// awaitSkipped waits until n ticks of schedule id were skipped.
func (e *ovEnv) awaitSkipped(id string, n int64) {
	e.t.Helper()
	require.Eventually(e.t, func() bool { return e.listed(id).Skipped >= n }, ovWithin, 20*time.Millisecond,
		"%d ticks skipped", n)
}

// stats is what the topic holds now.
func (e *ovEnv) stats() redisdelay.TopicStats {
	e.t.Helper()
	st, err := e.insp.Stats(e.ctx, e.topic)
	require.NoError(e.t, err)
	return st
}

// group is a group's stats.
func (e *ovEnv) group(name string) redisdelay.GroupStats {
	e.t.Helper()
	for _, g := range e.stats().Groups {
		if g.Group == name {
			return g
		}
	}
	e.t.Fatalf("no group %q", name)
	return redisdelay.GroupStats{}
}

// crashedRead reads the first tick's message as a consumer of group that
// dies: no Ack, no lease renewal.
func (e *ovEnv) crashedRead(group string) redis.XMessage {
	e.t.Helper()
	stream := store.Keys{Prefix: e.prefix}.Shard(e.topic, 0).Stream()
	var read redis.XMessage
	require.Eventually(e.t, func() bool {
		res, err := e.client.XReadGroup(e.ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: "crashed", Streams: []string{stream, ">"}, Count: 1, Block: -1,
		}).Result()
		if err != nil || len(res) == 0 || len(res[0].Messages) == 0 {
			return false
		}
		read = res[0].Messages[0]
		return true
	}, ovWithin, 10*time.Millisecond)
	return read
}

// tickOf is the tick instant a tick's message carries.
func tickOf(t *testing.T, md message.Metadata) time.Time {
	t.Helper()
	tick, err := time.Parse(time.RFC3339Nano, md.Get(redisdelay.ScheduleTickKey))
	require.NoError(t, err)
	return tick
}

// waitingTicks are the ticks of the messages waiting in the topic.
func (e *ovEnv) waitingTicks() []redisdelay.WaitingMessage {
	e.t.Helper()
	w, err := e.insp.Waiting(e.ctx, e.topic, 0, 100)
	require.NoError(e.t, err)
	return w
}

// Skipped while the previous tick's message waits for its due time (no
// consumer group: finished once it left the waiting set), and not caught up
// later: the next tick published is the first after that.
func TestSchedule_OverlapSkipWhileWaiting(t *testing.T) {
	t.Parallel()
	e := setupOverlap(t)
	const period, wait = 200 * time.Millisecond, 3 * time.Second
	e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip,
		Metadata: map[string]string{delay.DelayedForKey: wait.String()}})
	e.manager()

	var first time.Time
	require.Eventually(t, func() bool {
		w := e.waitingTicks()
		if len(w) == 1 {
			first = tickOf(t, w[0].Message.Metadata)
		}
		return len(w) == 1
	}, ovWithin, 10*time.Millisecond)
	e.awaitSkipped("s", 3)
	st := e.stats()
	assert.EqualValues(t, 1, st.Waiting+st.Stream, "one tick published while it waits")

	var second time.Time
	require.Eventually(t, func() bool {
		w := e.waitingTicks()
		if len(w) == 1 && !tickOf(t, w[0].Message.Metadata).Equal(first) {
			second = tickOf(t, w[0].Message.Metadata)
			return true
		}
		return false
	}, ovWithin, 10*time.Millisecond, "the next tick once the first left the waiting set")
	assert.GreaterOrEqual(t, second.Sub(first), wait, "no tick published while the first waited")
	s := e.listed("s")
	assert.GreaterOrEqual(t, s.Skipped, int64(second.Sub(first)/period)-1, "every tick between them skipped, none caught up")
	assert.Equal(t, redisdelay.OverlapSkip, s.Overlap)
	assert.True(t, s.LastSkipped.After(first) && !s.LastSkipped.Before(second.Add(-wait)), "last skipped %s, ticks %s and %s", s.LastSkipped, first, second)
	assert.EqualValues(t, 1, e.stats().Stream, "the first, due; only the second waits")
}

// Skipped while the previous tick's message is delivered and not acked;
// the next tick is published once it is acked. Three Managers compete for
// the ticks: one in flight at a time all the same.
func TestSchedule_OverlapSkipWhileUnacked(t *testing.T) {
	t.Parallel()
	e := setupOverlap(t)
	ch := subscribe(t, e.subscriber("g"), e.topic)
	e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip})
	for range 3 {
		e.manager()
	}

	held := receive(t, ch, ovWithin)
	skipped := e.listed("s").Skipped
	e.awaitSkipped("s", skipped+3)
	g := e.group("g")
	assert.EqualValues(t, 1, g.Pending)
	assert.EqualValues(t, 0, g.Ready, "no tick published while one is unacked")
	assert.EqualValues(t, 1, e.stats().Stream)

	held.Ack()
	next := receive(t, ch, ovWithin)
	assert.True(t, tickOf(t, next.Metadata).After(tickOf(t, held.Metadata).Add(600*time.Millisecond)),
		"ticks %s then %s: the ones between skipped", tickOf(t, held.Metadata), tickOf(t, next.Metadata))
	assert.Equal(t, "s", next.Metadata.Get(redisdelay.PartitionKey), "its ticks go to the partition of its ID")
	next.Ack()
	receive(t, ch, ovWithin).Ack()
}

// A nacked tick waiting in the group's retry set, then redelivered, keeps
// the schedule skipping; once dead-lettered, the next tick is published.
func TestSchedule_OverlapDeadLetter(t *testing.T) {
	t.Parallel()
	e := setupOverlap(t)
	ch := subscribe(t, e.subscriber("g", func(c *redisdelay.SubscriberConfig) {
		c.MaxAttempts = 2
		c.RetryDelay = func(int) time.Duration { return time.Second }
	}), e.topic)
	e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip})
	e.manager()

	first := receive(t, ch, ovWithin)
	first.Nack()
	require.Eventually(t, func() bool { return e.group("g").Retry == 1 }, ovWithin, 10*time.Millisecond)
	skipped := e.listed("s").Skipped
	e.awaitSkipped("s", skipped+2)
	assert.EqualValues(t, 1, e.group("g").Retry, "still to be retried: skipped meanwhile")

	again := receive(t, ch, ovWithin)
	require.Equal(t, first.UUID, again.UUID, "the retry, before any other tick")
	assert.Equal(t, "2", again.Metadata.Get(redisdelay.AttemptKey))
	skipped = e.listed("s").Skipped
	e.awaitSkipped("s", skipped+2)
	again.Nack() // the last attempt: dead-lettered
	next := receive(t, ch, ovWithin)
	assert.NotEqual(t, first.UUID, next.UUID)
	assert.True(t, tickOf(t, next.Metadata).After(tickOf(t, first.Metadata)))
	assert.EqualValues(t, 1, e.group("g").Dead)
	next.Ack()
}

// A waiting tick cancelled (Inspector.Cancel) is finished: the next tick
// is published, though the group never saw the cancelled one.
func TestSchedule_OverlapCancelledTick(t *testing.T) {
	t.Parallel()
	e := setupOverlap(t)
	e.subscriber("g")
	e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip,
		Metadata: map[string]string{delay.DelayedForKey: "1h"}})
	e.manager()

	var w []redisdelay.WaitingMessage
	require.Eventually(t, func() bool { w = e.waitingTicks(); return len(w) == 1 }, ovWithin, 10*time.Millisecond)
	e.awaitSkipped("s", 2)
	require.Len(t, e.waitingTicks(), 1, "skipped while it waits")
	cancelled, err := e.insp.Cancel(e.ctx, e.topic, w[0].Message.UUID)
	require.NoError(t, err)
	require.True(t, cancelled)
	require.Eventually(t, func() bool {
		now := e.waitingTicks()
		return len(now) == 1 && now[0].Message.UUID != w[0].Message.UUID
	}, ovWithin, 10*time.Millisecond, "the next tick, once the waiting one was cancelled")
	skipped := e.listed("s").Skipped
	e.awaitSkipped("s", skipped+2)
	assert.Len(t, e.waitingTicks(), 1, "skipped again while the new one waits")
}

// With two consumer groups, both must finish the tick's message: one
// acking it is not enough.
func TestSchedule_OverlapTwoGroups(t *testing.T) {
	t.Parallel()
	e := setupOverlap(t)
	fast := subscribe(t, e.subscriber("fast"), e.topic)
	slow := subscribe(t, e.subscriber("slow"), e.topic)
	e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip})
	e.manager()

	receive(t, fast, ovWithin).Ack()
	held := receive(t, slow, ovWithin)
	require.Eventually(t, func() bool { return e.group("fast").Pending == 0 }, ovWithin, 10*time.Millisecond, "acked by fast")
	skipped := e.listed("s").Skipped
	e.awaitSkipped("s", skipped+3)
	assert.EqualValues(t, 0, e.group("fast").Ready, "nothing new for the group that finished")
	assert.EqualValues(t, 1, e.group("slow").Pending)

	held.Ack()
	next, also := receive(t, fast, ovWithin), receive(t, slow, ovWithin)
	next.Ack()
	also.Ack()
	assert.Equal(t, next.UUID, also.UUID, "the next tick, to both groups")
	assert.NotEqual(t, held.UUID, next.UUID)
}

// A consumer that crashed holding the tick's message: it is reclaimed
// after the visibility timeout and delivered again, in flight throughout;
// the next tick comes after its Ack.
func TestSchedule_OverlapConsumerCrash(t *testing.T) {
	t.Parallel()
	e := setupOverlap(t)
	sub := e.subscriber("g", func(c *redisdelay.SubscriberConfig) {
		c.VisibilityTimeout = time.Second
		c.RetryDelay = func(int) time.Duration { return 500 * time.Millisecond }
	})
	e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip})
	e.manager()

	crashed := e.crashedRead("g")
	skipped := e.listed("s").Skipped
	e.awaitSkipped("s", skipped+3)

	ch := subscribe(t, sub, e.topic)
	again := receive(t, ch, ovWithin)
	assert.Equal(t, "2", again.Metadata.Get(redisdelay.AttemptKey), "the crashed consumer's message, reclaimed")
	body, _ := crashed.Values["m"].(string)
	was, err := store.Decode([]byte(body))
	require.NoError(t, err)
	require.Equal(t, was.UUID, again.UUID, "no other tick before it")
	e.awaitSkipped("s", e.listed("s").Skipped+2)
	again.Ack()
	next := receive(t, ch, ovWithin)
	assert.True(t, tickOf(t, next.Metadata).After(tickOf(t, again.Metadata)))
	next.Ack()
}

// Nothing stale keeps a schedule skipping: the check reads what holds the
// previous tick's message, not marks left along the way, so a message
// gone by any path (lost with its keys, its group deleted, a record naming
// a message that never existed) lets the next tick through.
func TestSchedule_OverlapSelfHealing(t *testing.T) {
	t.Parallel()
	t.Run("waiting message lost", func(t *testing.T) {
		t.Parallel()
		e := setupOverlap(t)
		e.subscriber("g")
		e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip,
			Metadata: map[string]string{delay.DelayedForKey: "1m"}})
		e.manager()
		var w []redisdelay.WaitingMessage
		require.Eventually(t, func() bool { w = e.waitingTicks(); return len(w) == 1 }, ovWithin, 10*time.Millisecond)
		e.awaitSkipped("s", 2)
		// Lost as after a failover: no script saw it go. (Out of the far
		// tier first, where a message due this far ahead waits.)
		sh := store.Keys{Prefix: e.prefix}.Shard(e.topic, 0)
		_, _, _, err := store.FarPull(e.ctx, e.client, sh, w[0].Message.UUID, false)
		require.NoError(t, err)
		require.NoError(t, e.client.Del(e.ctx, sh.Waiting(), sh.Bodies()).Err())
		require.Eventually(t, func() bool {
			now := e.waitingTicks()
			return len(now) == 1 && now[0].Message.UUID != w[0].Message.UUID
		}, ovWithin, 10*time.Millisecond)
	})
	t.Run("ready stream lost", func(t *testing.T) {
		t.Parallel()
		e := setupOverlap(t)
		e.subscriber("g") // a group that reads nothing: the tick stays in the stream
		e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip})
		e.manager()
		require.Eventually(t, func() bool { return e.stats().Stream == 1 }, ovWithin, 10*time.Millisecond)
		e.awaitSkipped("s", 2)
		require.EqualValues(t, 1, e.stats().Stream, "skipped while unread")
		require.NoError(t, e.client.Del(e.ctx, store.Keys{Prefix: e.prefix}.Shard(e.topic, 0).Stream()).Err())
		require.Eventually(t, func() bool { return e.stats().Stream >= 2 }, ovWithin, 10*time.Millisecond,
			"ticks published once the stream holding the message is gone")
	})
	t.Run("group deleted while holding it", func(t *testing.T) {
		t.Parallel()
		e := setupOverlap(t)
		e.subscriber("g")
		e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip})
		e.manager()
		e.crashedRead("g")
		e.awaitSkipped("s", e.listed("s").Skipped+2)
		deleted, err := e.insp.DeleteGroup(e.ctx, e.topic, "g")
		require.NoError(t, err)
		require.True(t, deleted)
		require.Eventually(t, func() bool { return e.stats().Stream >= 2 }, ovWithin, 10*time.Millisecond,
			"ticks published once no group holds the message")
	})
	t.Run("record of a message never stored", func(t *testing.T) {
		t.Parallel()
		e := setupOverlap(t)
		ch := subscribe(t, e.subscriber("g"), e.topic)
		// What a tick let through and then refused by Publish, or lost
		// with Redis's last writes, leaves: a record naming a message
		// that is nowhere.
		sh := store.Keys{Prefix: e.prefix}.Shard(e.topic, 0)
		ghost := watermill.NewUUID()
		since := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
		require.NoError(t, e.client.HSet(e.ctx, sh.Overlap(), "s", ghost+" "+since+" "+since+" ? -").Err())
		e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip})
		e.manager()
		receive(t, ch, ovWithin).Ack()
		assert.Zero(t, e.listed("s").Skipped, "not skipped for a message that is nowhere")
	})
}

// OverlapAllow (the default) publishes every tick while earlier ones are
// unacked, and counts no skip.
func TestSchedule_OverlapAllowUnchanged(t *testing.T) {
	t.Parallel()
	e := setupOverlap(t)
	ch := subscribe(t, e.subscriber("g"), e.topic)
	e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms"})
	e.manager()
	held := receive(t, ch, ovWithin)
	assert.Empty(t, held.Metadata.Get(redisdelay.PartitionKey), "no partition key of its own")
	require.Eventually(t, func() bool { return e.group("g").Ready >= 3 }, ovWithin, 10*time.Millisecond, "ticks published behind the unacked one")
	s := e.listed("s")
	assert.Zero(t, s.Skipped)
	assert.True(t, s.LastSkipped.IsZero())
	assert.Equal(t, redisdelay.OverlapAllow, s.Overlap)
	held.Ack()
}

// In a topic of several partitions every tick of an OverlapSkip schedule
// goes to one partition (its ID's), where the check finds the previous one.
func TestSchedule_OverlapPartitionedTopic(t *testing.T) {
	t.Parallel()
	e := setupOverlap(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: e.client, KeyPrefix: e.prefix, Partitions: 4}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	e.pub = pub
	ch := subscribe(t, e.subscriber("g", func(c *redisdelay.SubscriberConfig) { c.Partitions = 4 }), e.topic)
	e.schedule(redisdelay.Schedule{ID: "s", Spec: "@every 200ms", Overlap: redisdelay.OverlapSkip})
	e.manager()
	held := receive(t, ch, ovWithin)
	e.awaitSkipped("s", e.listed("s").Skipped+3)
	assert.EqualValues(t, 1, e.stats().Stream, "one tick published while it is unacked")
	held.Ack()
	next := receive(t, ch, ovWithin)
	assert.NotEqual(t, held.UUID, next.UUID)
	next.Ack()
}

// An Overlap that is not a policy is refused with what to use.
func TestSchedule_OverlapInvalid(t *testing.T) {
	t.Parallel()
	e := setupOverlap(t)
	err := e.pub.Schedule(e.ctx, redisdelay.Schedule{ID: "s", Spec: "@every 1s", Topic: e.topic, Overlap: "sometimes"})
	require.ErrorIs(t, err, redisdelay.ErrInvalidSchedule)
	assert.Contains(t, err.Error(), `schedule "s": Overlap is "sometimes": use OverlapAllow ("", the default: publish every tick) or OverlapSkip ("skip"`)
	all, err := e.insp.Schedules(e.ctx)
	require.NoError(t, err)
	assert.Empty(t, all, "nothing stored")

	// Under OverlapSkip a tick never finds its business key held by the
	// previous one (it is skipped instead), so the business-key check
	// does not refuse a delay longer than the ticks' gap.
	md := map[string]string{redisdelay.BusinessKey: "report", delay.DelayedForKey: "3s"}
	require.ErrorIs(t, e.pub.Schedule(e.ctx, redisdelay.Schedule{ID: "s", Spec: "@every 1s", Topic: e.topic, Metadata: md}),
		redisdelay.ErrInvalidSchedule)
	require.NoError(t, e.pub.Schedule(e.ctx, redisdelay.Schedule{ID: "s", Spec: "@every 1s", Topic: e.topic, Metadata: md,
		Overlap: redisdelay.OverlapSkip}))

	// Grouped ticks wait in their groups' queues, where the overlap check
	// does not look: refused, naming the policy that does the job.
	for _, md := range []map[string]string{
		{redisdelay.GroupKey: "tenant"},
		{redisdelay.BusinessKey: "report", redisdelay.BusinessKeyPolicyKey: string(redisdelay.KeepLastIfActive)},
	} {
		err := e.pub.Schedule(e.ctx, redisdelay.Schedule{ID: "g", Spec: "@every 1s", Topic: e.topic, Metadata: md, Overlap: redisdelay.OverlapSkip})
		require.ErrorIs(t, err, redisdelay.ErrInvalidSchedule)
		assert.Contains(t, err.Error(), `does not combine with grouped ticks`)
	}
}
