package redisdelay_test

// The Inspector: dead-letter operations, argument checks, stats and the
// waiting list, against the real test server. Every test uses a fresh topic
// and runs in parallel.

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

func TestLifecycle_InspectorDeadLetterOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 1})
	ch := subscribe(t, sub, env.topic)

	var msgs []*message.Message
	for i := 0; i < 5; i++ {
		msgs = append(msgs, newMessage(strconv.Itoa(i)))
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	for i := range msgs {
		got := receive(t, ch, 2*time.Second)
		require.Equal(t, msgs[i].UUID, got.UUID, "delivery order")
		got.Nack()
	}
	all := awaitDeadLetters(t, env.insp, env.topic, "g", 5, 2*time.Second)
	for i, d := range all {
		assert.Equal(t, msgs[i].UUID, d.Message.UUID, "dead letters oldest first")
	}

	// Paging: after the last ID of a page comes the next page.
	page, err := env.insp.DeadLetters(ctx, env.topic, "g", "", 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	assert.Equal(t, []string{all[0].ID, all[1].ID}, []string{page[0].ID, page[1].ID})
	page, err = env.insp.DeadLetters(ctx, env.topic, "g", page[1].ID, 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	assert.Equal(t, []string{all[2].ID, all[3].ID}, []string{page[0].ID, page[1].ID})
	page, err = env.insp.DeadLetters(ctx, env.topic, "g", page[1].ID, 2)
	require.NoError(t, err)
	require.Len(t, page, 1)
	assert.Equal(t, all[4].ID, page[0].ID)
	page, err = env.insp.DeadLetters(ctx, env.topic, "g", all[4].ID, 2)
	require.NoError(t, err)
	assert.Empty(t, page)

	// Requeue one: delivered again as attempt 1, gone from the dead letters.
	ok, err := env.insp.RequeueDeadLetter(ctx, env.topic, "g", all[0].ID)
	require.NoError(t, err)
	assert.True(t, ok)
	got := receive(t, ch, 2*time.Second)
	assert.Equal(t, msgs[0].UUID, got.UUID)
	assert.Equal(t, "1", got.Metadata.Get(redisdelay.AttemptKey))
	assert.Equal(t, "0", string(got.Payload))
	got.Ack()
	ok, err = env.insp.RequeueDeadLetter(ctx, env.topic, "g", all[0].ID)
	require.NoError(t, err)
	assert.False(t, ok, "already requeued")
	ok, err = env.insp.RequeueDeadLetter(ctx, env.topic, "g", "1-1")
	require.NoError(t, err)
	assert.False(t, ok, "unknown id")

	// Delete one.
	ok, err = env.insp.DeleteDeadLetter(ctx, env.topic, "g", all[1].ID)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = env.insp.DeleteDeadLetter(ctx, env.topic, "g", all[1].ID)
	require.NoError(t, err)
	assert.False(t, ok, "already deleted")
	rest := awaitDeadLetters(t, env.insp, env.topic, "g", 3, time.Second)
	assert.Equal(t, []string{all[2].ID, all[3].ID, all[4].ID}, []string{rest[0].ID, rest[1].ID, rest[2].ID})

	// Requeue all: each delivered once more as attempt 1; nacked, they die again.
	n, err := env.insp.RequeueDeadLetters(ctx, env.topic, "g")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	var again []string
	for i := 0; i < 3; i++ {
		got := receive(t, ch, 2*time.Second)
		assert.Equal(t, "1", got.Metadata.Get(redisdelay.AttemptKey))
		again = append(again, got.UUID)
		got.Nack()
	}
	assert.ElementsMatch(t, []string{msgs[2].UUID, msgs[3].UUID, msgs[4].UUID}, again)
	awaitDeadLetters(t, env.insp, env.topic, "g", 3, 2*time.Second)
	n, err = env.insp.RequeueDeadLetters(ctx, env.topic, "g")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for i := 0; i < 3; i++ {
		receive(t, ch, 2*time.Second).Nack()
	}
	awaitDeadLetters(t, env.insp, env.topic, "g", 3, 2*time.Second)

	// Purge.
	purged, err := env.insp.PurgeDeadLetters(ctx, env.topic, "g")
	require.NoError(t, err)
	assert.EqualValues(t, 3, purged)
	purged, err = env.insp.PurgeDeadLetters(ctx, env.topic, "g")
	require.NoError(t, err)
	assert.Zero(t, purged)
	g := groupStats(t, env.insp, env.topic, "g")
	assert.Zero(t, g.Dead)
	assert.EqualValues(t, 11, g.DeadTotal, "5 + 3 + 3 burials")
	nothing(t, ch, 200*time.Millisecond)

	// Delete the group (its subscriber gone first).
	require.NoError(t, sub.Close())
	ok, err = env.insp.DeleteGroup(ctx, env.topic, "g")
	require.NoError(t, err)
	assert.True(t, ok)
	st := topicStats(t, env.insp, env.topic)
	assert.Empty(t, st.Groups)
	groups, err := env.client.XInfoGroups(ctx, shardOf(env.topic, 0).Stream()).Result()
	require.NoError(t, err)
	assert.Empty(t, groups, "group destroyed on the ready stream")
	left, err := env.client.Exists(ctx, shardOf(env.topic, 0).Dead("g"), shardOf(env.topic, 0).Meta("g"), shardOf(env.topic, 0).Redelivery("g")).Result()
	require.NoError(t, err)
	assert.Zero(t, left, "the group's keys are deleted")
	ok, err = env.insp.DeleteGroup(ctx, env.topic, "g")
	require.NoError(t, err)
	assert.False(t, ok, "already deleted")
	topics, err := env.insp.Topics(ctx)
	require.NoError(t, err)
	assert.Contains(t, topics, env.topic, "the topic itself stays")
}

func TestLifecycle_InspectorRejectsBadArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	errOf := func(_ any, err error) error { return err }
	for name, c := range map[string]struct {
		err   error
		is    error
		says  []string
		noSay string
	}{
		"DeadLetters topic with space":  {err: errOf(env.insp.DeadLetters(ctx, "a b", "g", "", 10)), is: redisdelay.ErrInvalidTopic, says: []string{`topic "a b"`, `contains " "`}},
		"DeadLetters empty group":       {err: errOf(env.insp.DeadLetters(ctx, env.topic, "", "", 10)), says: []string{"consumer group is empty"}},
		"DeadLetters group with brace":  {err: errOf(env.insp.DeadLetters(ctx, env.topic, "g{1}", "", 10)), says: []string{`consumer group "g{1}"`, `contains "{"`}},
		"DeadLetters limit 0":           {err: errOf(env.insp.DeadLetters(ctx, env.topic, "g", "", 0)), says: []string{"limit is 0", "use 1 to 10000"}},
		"DeadLetters limit 10001":       {err: errOf(env.insp.DeadLetters(ctx, env.topic, "g", "", 10001)), says: []string{"limit is 10001", "use 1 to 10000"}},
		"Waiting negative offset":       {err: errOf(env.insp.Waiting(ctx, env.topic, -1, 10)), says: []string{"offset is -1", "use 0 or more"}},
		"Waiting limit 0":               {err: errOf(env.insp.Waiting(ctx, env.topic, 0, 0)), says: []string{"limit is 0"}},
		"Waiting limit 10001":           {err: errOf(env.insp.Waiting(ctx, env.topic, 0, 10001)), says: []string{"limit is 10001"}},
		"Waiting empty topic":           {err: errOf(env.insp.Waiting(ctx, "", 0, 10)), is: redisdelay.ErrInvalidTopic, says: []string{"topic is empty"}},
		"Stats control character":       {err: errOf(env.insp.Stats(ctx, "a\nb")), is: redisdelay.ErrInvalidTopic, says: []string{"control characters"}},
		"RequeueDeadLetter bad group":   {err: errOf(env.insp.RequeueDeadLetter(ctx, env.topic, "a b", "1-1")), says: []string{`consumer group "a b"`}},
		"RequeueDeadLetters bad topic":  {err: errOf(env.insp.RequeueDeadLetters(ctx, "{x}", "g")), is: redisdelay.ErrInvalidTopic, says: []string{`contains "{"`}},
		"DeleteDeadLetter bad group":    {err: errOf(env.insp.DeleteDeadLetter(ctx, env.topic, "}", "1-1")), says: []string{`consumer group "}"`}},
		"PurgeDeadLetters bad topic":    {err: errOf(env.insp.PurgeDeadLetters(ctx, "", "g")), is: redisdelay.ErrInvalidTopic, says: []string{"topic is empty"}},
		"DeleteGroup empty group":       {err: errOf(env.insp.DeleteGroup(ctx, env.topic, "")), says: []string{"consumer group is empty"}},
		"DeleteGroup topic with tab":    {err: errOf(env.insp.DeleteGroup(ctx, "a\tb", "g")), is: redisdelay.ErrInvalidTopic},
		"NewInspector without a client": {err: errOf(redisdelay.NewInspector(redisdelay.InspectorConfig{})), says: []string{"InspectorConfig.Client is nil"}},
	} {
		t.Run(name, func(t *testing.T) {
			require.Error(t, c.err)
			if c.is != nil {
				assert.ErrorIs(t, c.err, c.is)
			}
			for _, s := range c.says {
				assert.ErrorContains(t, c.err, s)
			}
		})
	}
}

// Stats counts each state a message can be in, and Waiting lists delayed
// messages in due order with their due times.
func TestLifecycle_StatsAndWaitingShowWhereMessagesAre(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 2, BatchSize: 1})
	idle := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "h"})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	require.NoError(t, idle.SubscribeInitialize(env.topic)) // a group that reads nothing
	ch := subscribe(t, sub, env.topic)

	// Waiting: published out of due order.
	type published struct {
		uuid          string
		before, after time.Time
		delay         time.Duration
	}
	var waiting []published
	for _, h := range []int{3, 1, 2} {
		d := time.Duration(h) * time.Hour
		m := delayed(delay.For(d), "in "+strconv.Itoa(h)+"h")
		before := time.Now()
		require.NoError(t, env.pub.Publish(env.topic, m))
		waiting = append(waiting, published{m.UUID, before, time.Now(), d})
	}
	sort.Slice(waiting, func(i, j int) bool { return waiting[i].delay < waiting[j].delay })

	// Dead: nacked on both attempts.
	require.NoError(t, env.pub.Publish(env.topic, newMessage("dead")))
	for i := 0; i < 2; i++ {
		m := receive(t, ch, 2*time.Second)
		require.Equal(t, "dead", string(m.Payload))
		m.Nack()
	}
	awaitDeadLetters(t, env.insp, env.topic, "g", 1, 2*time.Second)
	// Retry: the handler asks for a redelivery in an hour.
	require.NoError(t, env.pub.Publish(env.topic, newMessage("retry")))
	m := receive(t, ch, 2*time.Second)
	require.Equal(t, "retry", string(m.Payload))
	delay.Message(m, delay.For(time.Hour))
	m.Nack()
	require.Eventually(t, func() bool { return groupStats(t, env.insp, env.topic, "g").Retry == 1 }, 2*time.Second, 20*time.Millisecond)
	// Pending: held by the handler; ready: not fetched (BatchSize 1).
	require.NoError(t, env.pub.Publish(env.topic, newMessage("held"), newMessage("ready 1"), newMessage("ready 2")))
	held := receive(t, ch, 2*time.Second)
	require.Equal(t, "held", string(held.Payload))

	st := topicStats(t, env.insp, env.topic)
	assert.Equal(t, env.topic, st.Topic)
	assert.EqualValues(t, 3, st.Waiting)
	assert.EqualValues(t, 5, st.Stream, "dead, retry, held, ready 1, ready 2")
	byGroup := map[string]redisdelay.GroupStats{}
	for _, g := range st.Groups {
		byGroup[g.Group] = g
	}
	require.Len(t, byGroup, 2)
	assert.Equal(t, redisdelay.GroupStats{Group: "g", Ready: 2, Pending: 1, Retry: 1, Dead: 1, DeadTotal: 1, Consumers: 1}, byGroup["g"])
	assert.Equal(t, redisdelay.GroupStats{Group: "h", Ready: 5}, byGroup["h"])

	// Waiting, in due order, with due times and paging.
	list, err := env.insp.Waiting(ctx, env.topic, 0, 10)
	require.NoError(t, err)
	require.Len(t, list, 3)
	for i, w := range list {
		p := waiting[i]
		assert.Equal(t, p.uuid, w.Message.UUID, "due order")
		assert.Equal(t, "in "+strconv.Itoa(int(p.delay/time.Hour))+"h", string(w.Message.Payload))
		lo, hi := p.before.Add(p.delay).Add(-5*time.Millisecond), p.after.Add(p.delay).Add(5*time.Millisecond)
		assert.True(t, !w.Due.Before(lo) && !w.Due.After(hi), "due %s not in [%s, %s]", w.Due, lo, hi)
	}
	list, err = env.insp.Waiting(ctx, env.topic, 1, 1)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, waiting[1].uuid, list[0].Message.UUID)
	list, err = env.insp.Waiting(ctx, env.topic, 3, 10)
	require.NoError(t, err)
	assert.Empty(t, list)

	topics, err := env.insp.Topics(ctx)
	require.NoError(t, err)
	assert.Contains(t, topics, env.topic)

	// Acked, the held message leaves the pending count.
	held.Ack()
	for i := 1; i <= 2; i++ {
		m := receive(t, ch, 2*time.Second)
		assert.Equal(t, "ready "+strconv.Itoa(i), string(m.Payload))
		m.Ack()
	}
	require.Eventually(t, func() bool {
		g := groupStats(t, env.insp, env.topic, "g")
		return g.Ready == 0 && g.Pending == 0
	}, 2*time.Second, 20*time.Millisecond)
}

// TopicStats.Leased tells whether a scheduler runs for a topic: none
// without one (subscribers with DisableScheduler only), every partition
// with waiting messages while a Manager runs, none once it stopped.
func TestInspector_StatsLeased(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, 2)
	// Near and far (the far tier) messages in both partitions (placed by
	// PartitionKey: left to their UUIDs, all 8 land in one partition once in
	// 128 runs, and a scheduler lets the lease of a partition with nothing
	// waiting lapse).
	keys := map[int]string{}
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprint("p", i)
		keys[redisdelay.PartitionOf(k, 2)] = k
	}
	for n := range 8 {
		d := 30 * time.Second
		if n/2%2 == 1 {
			d = time.Hour
		}
		msg := delayed(delay.For(d), "x")
		msg.Metadata.Set(redisdelay.PartitionKey, keys[n%2])
		require.NoError(t, pub.Publish(env.topic, msg))
	}
	st := topicStats(t, env.insp, env.topic)
	require.Equal(t, 2, st.Partitions)
	require.EqualValues(t, 8, st.Waiting)
	assert.Equal(t, 0, st.Leased, "no scheduler runs")

	mgr := runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}, CheckInterval: 100 * time.Millisecond})
	require.Eventually(t, func() bool { return topicStats(t, env.insp, env.topic).Leased == 2 }, 5*time.Second, 20*time.Millisecond)
	// Held all along while messages wait, not only right after a tick.
	for range 15 {
		time.Sleep(30 * time.Millisecond)
		require.Equal(t, 2, topicStats(t, env.insp, env.topic).Leased)
	}

	require.NoError(t, mgr.Close())
	assert.Equal(t, 0, topicStats(t, env.insp, env.topic).Leased, "a stopping scheduler releases its leases")
	overdue, err := env.insp.Overdue(context.Background(), env.topic)
	require.NoError(t, err)
	assert.Zero(t, overdue)
}

// Grouped messages due while a topic has no consumer group wait for the
// first group, not for a scheduler: a running scheduler lets the lease of
// such a partition lapse (nothing for it to do), and the stats tell them
// apart from waiting messages no scheduler moves.
func TestInspector_StatsWaitingForGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	runManagerWithLogger(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}}, logger)

	msg := newMessage("grouped")
	redisdelay.SetGroup(msg, "tenant-1")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	var st redisdelay.TopicStats
	require.Eventually(t, func() bool {
		var err error
		st, err = env.insp.Stats(ctx, env.topic)
		require.NoError(t, err)
		return st.WaitingForGroup == 1 && st.Leased == 0
	}, 20*time.Second, 20*time.Millisecond, "moved aside for a group to come; the scheduler lets the lease of the idle partition lapse")
	assert.Equal(t, int64(1), st.Waiting)
}

// TestInspector_Counters: the growing counters of a topic of two partitions
// count messages made ready (published immediate, and delayed ones when
// due), first deliveries per group and dead letters, and do not shrink
// when the messages are acknowledged.
func TestInspector_Counters(t *testing.T) {
	env := setup(t)
	ctx := context.Background()

	c, err := env.insp.Counters(ctx, env.topic)
	require.NoError(t, err, "a topic nothing used yet")
	assert.Zero(t, c.Ready)
	assert.Empty(t, c.Groups)
	assert.WithinDuration(t, time.Now(), c.Time, 5*time.Second, "Redis's clock")

	_, err = env.insp.Counters(ctx, "bad topic\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "topic")

	pub := newPartitionedPublisher(t, env.client, 2)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 1, Partitions: 2})
	ch := subscribe(t, sub, env.topic)
	for n := range 5 {
		require.NoError(t, pub.Publish(env.topic, newMessage("now "+string(rune('a'+n)))))
	}
	require.NoError(t, pub.Publish(env.topic, delayed(delay.For(300*time.Millisecond), "soon")))
	for n := range 6 {
		m := receive(t, ch, 5*time.Second)
		if n == 0 {
			m.Nack()
		} else {
			m.Ack()
		}
	}
	awaitDeadLetters(t, env.insp, env.topic, "g", 1, 5*time.Second)

	c, err = env.insp.Counters(ctx, env.topic)
	require.NoError(t, err)
	assert.Equal(t, env.topic, c.Topic)
	assert.EqualValues(t, 6, c.Ready, "5 immediate + 1 delayed made ready, over both partitions")
	require.Len(t, c.Groups, 1)
	assert.Equal(t, redisdelay.GroupCounters{Group: "g", Delivered: 6, DeadTotal: 1}, c.Groups[0])
	st := topicStats(t, env.insp, env.topic)
	assert.Less(t, st.Stream, int64(7), "the stream itself may be trimmed; the counter is not")
}

// A page far past the end of a partitioned topic is empty: offset + limit
// overflowed and panicked.
func TestInspector_WaitingOffsetNearMaxInt(t *testing.T) {
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, 3)
	for range 3 {
		require.NoError(t, pub.Publish(env.topic, delayed(delay.For(time.Hour), "x")))
	}
	for _, offset := range []int{math.MaxInt, math.MaxInt - 5, math.MaxInt / 2} {
		page, err := env.insp.Waiting(context.Background(), env.topic, offset, 10)
		require.NoError(t, err)
		assert.Empty(t, page)
	}
	page, err := env.insp.Waiting(context.Background(), env.topic, 1, 10_000)
	require.NoError(t, err)
	assert.Len(t, page, 2)
}

// A waiting body that cannot be decoded is listed as corrupt instead of
// failing the page.
func TestInspector_WaitingCorruptBody(t *testing.T) {
	env := setup(t)
	var ids []string
	for i := range 3 {
		// due within a second: in the waiting set, not the far tier
		msg := delayed(delay.For(time.Duration(i+1)*300*time.Millisecond), "x")
		ids = append(ids, msg.UUID)
		require.NoError(t, env.pub.Publish(env.topic, msg))
	}
	require.NoError(t, env.client.HSet(context.Background(), shardOf(env.topic, 0).Bodies(), ids[1], "garbage").Err())
	page, err := newInspector(t, env.client).Waiting(context.Background(), env.topic, 0, 10)
	require.NoError(t, err)
	require.Len(t, page, 3)
	for i, w := range page {
		assert.Equal(t, ids[i], w.Message.UUID)
	}
	assert.Empty(t, page[0].Corrupt)
	assert.Contains(t, page[1].Corrupt, "corrupt")
	assert.Empty(t, page[1].Message.Payload)
	assert.WithinDuration(t, time.Now().Add(600*time.Millisecond), page[1].Due, time.Second)
}

// Registry entries that are not valid topic names are left out of Topics
// (and so of Health and the Collector) and listed by InvalidTopics.
func TestInspector_InvalidRegistryEntries(t *testing.T) {
	needSingle(t, "reads the whole registry of the default prefix")
	env := setup(t)
	require.NoError(t, newPublisher(t, env.client).Publish(env.topic, newMessage("x")))
	reg := defaultKeys.Topics()
	require.NoError(t, env.client.SAdd(context.Background(), reg, "bad{name}", "").Err())
	t.Cleanup(func() { env.client.SRem(context.Background(), reg, "bad{name}", "") })

	topics, err := env.insp.Topics(context.Background())
	require.NoError(t, err)
	assert.Contains(t, topics, env.topic)
	assert.NotContains(t, topics, "bad{name}")
	assert.NotContains(t, topics, "")
	bad, err := env.insp.InvalidTopics(context.Background())
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"bad{name}", ""}, bad)
	_, err = env.insp.Health(context.Background(), redisdelay.HealthConfig{})
	require.NoError(t, err)
}
