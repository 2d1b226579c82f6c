package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
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

func (s sample) publisher(t *testing.T) *redisdelay.Publisher {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: s.client, KeyPrefix: s.prefix}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// manager runs a Manager for the topics until the test ends.
func (s sample) manager(t *testing.T, topics ...string) {
	t.Helper()
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: s.client, KeyPrefix: s.prefix, Topics: topics}, nil)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
}

func TestStates_GroupListings(t *testing.T) {
	s := setupSample(t)
	ctx := context.Background()
	pub := s.publisher(t)
	var ready []string
	for n := range 3 {
		msg := message.NewMessage(watermill.NewUUID(), []byte("new"))
		msg.Metadata.Set("n", fmt.Sprint(n))
		require.NoError(t, pub.Publish(topic, msg))
		ready = append(ready, msg.UUID)
	}
	// A consumer that read one and died: it stays pending.
	stream := store.Keys{Prefix: s.prefix}.Shard(topic, 0).Stream()
	res, err := s.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "worker-9", Streams: []string{stream, ">"}, Count: 1, Block: -1}).Result()
	require.NoError(t, err)
	pendingID := res[0].Messages[0].ID

	// ready: the two not fetched, paged.
	out := s.ok(t, "ready", topic, group)
	r := rows(out)
	require.Len(t, r, 3, out)
	assert.Equal(t, []string{"ID", "QUEUED", "ATTEMPT", "UUID", "SIZE", "METADATA"}, r[0])
	assert.Equal(t, []string{"1", ready[1], "3", "n=1"}, r[1][2:])
	first := s.cli(t, "ready", topic, group, "--limit", "1")
	require.Equal(t, 0, first.code)
	cursor := regexp.MustCompile(`next page: --cursor (\S+)\)`).FindStringSubmatch(first.stderr)
	require.NotNil(t, cursor, first.stderr)
	assert.Equal(t, "0:m:", cursor[1][:4])
	page := decode[pageJSON[groupMessageJSON]](t, s.ok(t, "--json", "ready", topic, group, "--cursor", cursor[1]))
	require.Len(t, page.Messages, 1)
	assert.Equal(t, ready[2], page.Messages[0].UUID)
	assert.Empty(t, page.Cursor)
	assert.Contains(t, s.ok(t, "ready", topic, group, "--payload", "--limit", "1"), "payload:  3 bytes, text\n  new\n")

	// pending: the dead consumer's, its lease running out.
	out = s.ok(t, "pending", topic, group)
	r = rows(out)
	require.Len(t, r, 2, out)
	assert.Equal(t, []string{"ID", "CONSUMER", "HANDLER", "RENEWED", "LEASE", "ATTEMPT", "UUID", "SIZE", "METADATA"}, r[0])
	assert.Equal(t, "0:m:"+pendingID, r[1][0])
	assert.Equal(t, "worker-9", r[1][1])
	assert.Equal(t, "unreported", r[1][2], "a raw read reports nothing")
	assert.Contains(t, out, "expires in ")
	pj := decode[pageJSON[pendingJSON]](t, s.ok(t, "--json", "pending", topic, group))
	require.Len(t, pj.Messages, 1)
	assert.Equal(t, ready[0], pj.Messages[0].UUID)
	require.NotNil(t, pj.Messages[0].LeaseExpires)
	assert.Equal(t, 30*time.Second, pj.Messages[0].LeaseExpires.Sub(pj.Messages[0].Renewed))
	assert.Equal(t, "unreported", pj.Messages[0].Handler)
	assert.Nil(t, pj.Messages[0].HandedAt)

	// consumers: the dead one, holding one message.
	out = s.ok(t, "consumers", topic)
	r = rows(out)
	require.Len(t, r, 2, out)
	assert.Equal(t, []string{"GROUP", "CONSUMER", "PENDING", "IDLE", "LAST", "SEEN", "STUCK"}, r[0])
	assert.Equal(t, []string{group, "worker-9", "1"}, r[1][:3])
	assert.Equal(t, "no", r[1][len(r[1])-1], "its lease is new")
	cj := decode[[]consumerJSON](t, s.ok(t, "--json", "consumers", topic, group))
	require.Len(t, cj, 1)
	assert.Equal(t, int64(1), cj[0].Pending)
	assert.False(t, cj[0].Stuck)
	// Stuck past twice the group's stored visibility timeout, shortened
	// here so that it passes within the test (put back for what follows).
	meta := store.Keys{Prefix: s.prefix}.Shard(topic, 0).Meta(group)
	vis, err := s.client.HGet(context.Background(), meta, "vis").Result()
	require.NoError(t, err)
	require.NoError(t, s.client.HSet(context.Background(), meta, "vis", 50).Err())
	require.Eventually(t, func() bool {
		return decode[[]consumerJSON](t, s.ok(t, "--json", "consumers", topic, group))[0].Stuck
	}, 10*time.Second, 20*time.Millisecond)
	r = rows(s.ok(t, "consumers", topic))
	assert.Equal(t, "yes", r[1][len(r[1])-1])
	require.NoError(t, s.client.HSet(context.Background(), meta, "vis", vis).Err())

	// retrying: a message nacked with an hour of backoff.
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: s.client, KeyPrefix: s.prefix, ConsumerGroup: "jobs",
		RetryDelay: func(int) time.Duration { return time.Hour }}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	ch, err := sub.Subscribe(ctx, "flaky")
	require.NoError(t, err)
	require.NoError(t, pub.Publish("flaky", message.NewMessage(watermill.NewUUID(), []byte("x"))))
	select {
	case m := <-ch:
		m.Metadata.Set(redisdelay.ErrorKey, "upstream_503")
		m.Nack()
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	require.Eventually(t, func() bool { return s.stats(t, "flaky").Groups[0].Retry == 1 }, 10*time.Second, 10*time.Millisecond)
	out = s.ok(t, "retrying", "flaky", "jobs")
	r = rows(out)
	require.Len(t, r, 2, out)
	assert.Equal(t, []string{"DUE", "IN", "ATTEMPT", "UUID", "SIZE", "REASON", "METADATA"}, r[0])
	assert.Equal(t, "upstream_503", r[1][6], "the error recorded, in REASON")
	assert.NotContains(t, out, redisdelay.ErrorKey, "not among the metadata")
	assert.Regexp(t, `^in 59m5\ds$|^in 1h0m0s$`, r[1][1]+" "+r[1][2])
	assert.Equal(t, "2", r[1][3])
	assert.Contains(t, s.ok(t, "retrying", topic, group), "no messages of group")

	// Unknown group: an error naming the groups.
	bad := s.cli(t, "ready", topic, "nope")
	assert.Equal(t, 1, bad.code)
	assert.Contains(t, bad.stderr, `has no consumer group "nope"`)
}

func TestStates_ServerThroughputHealth(t *testing.T) {
	s := setupSample(t)
	out := s.ok(t, "server")
	assert.Regexp(t, `(?m)^version: +(redis|valkey) \d+\.\d+`, out)
	assert.Contains(t, out, "maxmemory-policy:  noeviction (ok)")
	servers := decode[[]serverJSON](t, s.ok(t, "--json", "server"))
	require.Len(t, servers, 1)
	assert.Positive(t, servers[0].UsedMemory)

	out = s.ok(t, "throughput", "--over", "200ms", topic)
	assert.Equal(t, []string{"TOPIC", "GROUP", "MADE", "READY/S", "DELIVERED/S", "DEAD-LETTERED/S"}, rows(out)[0])
	assert.Equal(t, []string{topic, group, "0.0", "0.0", "0.0"}, rows(out)[1])
	rates := decode[[]throughputJSON](t, s.ok(t, "--json", "throughput", "--over", "200ms"))
	require.Len(t, rates, 2)
	assert.GreaterOrEqual(t, rates[0].OverMs, int64(150))

	// No scheduler runs: a message made due stays overdue, which health
	// reports.
	require.Equal(t, 0, s.cli(t, "run-now", topic, s.delayed[0]).code)
	require.Eventually(t, func() bool {
		r := s.cli(t, "health", topic, "--max-overdue", "1ms")
		return r.code == 1 && strings.Contains(r.stdout, "scheduler_behind")
	}, 10*time.Second, 50*time.Millisecond)
	report := decode[redisdelay.HealthReport](t, s.cli(t, "--json", "health", topic, "--max-overdue", "1ms").stdout)
	assert.False(t, report.Healthy)
	assert.Equal(t, 0, s.cli(t, "health", partTopic).code, "nothing wrong there")
	assert.Contains(t, s.ok(t, "health", partTopic), "healthy: 1 topic(s) checked")
}

func TestStates_RunNowAndOverdue(t *testing.T) {
	s := setupSample(t)
	pub := s.publisher(t)
	keyed := message.NewMessage(watermill.NewUUID(), []byte("keyed"))
	keyed.Metadata.Set(redisdelay.BusinessKey, "order-7")
	delay.Message(keyed, delay.For(time.Hour))
	require.NoError(t, pub.Publish(topic, keyed))

	// No scheduler: made due, it stays, overdue, with warnings.
	r := s.cli(t, "run-now", topic, s.delayed[0])
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, fmt.Sprintf("message %s of topic %q is due now: the scheduler moves it to the consumer groups\n", s.delayed[0], topic), r.stdout)
	assert.Contains(t, r.stderr, `redisdelay: warning: no scheduler holds topic "orders.close-unpaid" (4 messages waiting)`)
	require.Eventually(t, func() bool {
		return strings.Contains(s.ok(t, "waiting", topic), "overdue by 1s")
	}, 10*time.Second, 50*time.Millisecond, "never \"due now\" for a past due time")
	st := s.cli(t, "stats", topic)
	r2 := rows(st.stdout)
	assert.Equal(t, "no", r2[1][5])
	assert.Regexp(t, `^\d+s$`, r2[1][6])
	assert.Contains(t, st.stderr, "the earliest is overdue by")
	js := s.stats(t, topic)
	assert.GreaterOrEqual(t, js.OverdueMs, int64(1000))

	ran := decode[runNowJSON](t, s.ok(t, "--json", "run-now", topic, "--key", "order-7"))
	assert.Equal(t, runNowJSON{Topic: topic, Key: "order-7", Ran: true}, ran)

	// Bulk: the guards of the bulk actions.
	r = s.cli(t, "run-now", topic, "--all")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "run-now: --all would run now every waiting message of topic")
	assert.Contains(t, s.ok(t, "run-now", topic, "--meta", "order_id=1002", "--dry-run"), "would run now 1 waiting message of topic")

	// A scheduler runs: delivered, no warning; reschedule --in 0s and
	// --at now are run-now too.
	s.manager(t, topic)
	r = s.cli(t, "run-now", topic, "--meta", "order_id=1002")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "made due now 1 waiting message of topic")
	assert.NotContains(t, r.stderr, "warning")
	require.Eventually(t, func() bool { return s.stats(t, topic).Waiting == 1 }, 10*time.Second, 20*time.Millisecond)
	r = s.cli(t, "reschedule", topic, s.delayed[2], "--in", "0s")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "rescheduled message")
	assert.NotContains(t, r.stderr, "warning")
	require.Eventually(t, func() bool { return s.stats(t, topic).Waiting == 0 }, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, "yes", s.stats(t, topic).Scheduler)
	assert.Contains(t, s.notFound(t, "reschedule", topic, s.delayed[2], "--at", "now"), "not rescheduled", "--at now is accepted")
	assert.Contains(t, s.notFound(t, "run-now", topic, s.delayed[0]), "not run: message "+s.delayed[0]+" is not waiting")
}

func TestStates_DeleteGroup(t *testing.T) {
	s := setupSample(t)
	r := s.cli(t, "delete-group", topic, group)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `delete-group: would delete consumer group "billing" of topic "orders.close-unpaid" with its 0 pending, 0 retrying and 2 dead messages`)
	assert.Len(t, s.stats(t, topic).Groups, 1, "nothing deleted")
	assert.Equal(t, deleteGroupJSON{Topic: topic, Group: group, Deleted: true}, decode[deleteGroupJSON](t, s.ok(t, "--json", "delete-group", topic, group, "--yes")))
	assert.Empty(t, s.stats(t, topic).Groups)
	r = s.cli(t, "delete-group", topic, group, "--yes")
	assert.Equal(t, 1, r.code, "an unknown group is an error")
}

// Search cursors print as plain digits, as the usage's example does.
func TestSearch_CursorDigits(t *testing.T) {
	s := setupSample(t)
	pub := s.publisher(t)
	for range 2 {
		msg := message.NewMessage(watermill.NewUUID(), []byte("soon"))
		delay.Message(msg, delay.For(30*time.Second)) // in the waiting set, not the far tier
		require.NoError(t, pub.Publish("soon", msg))
	}
	r := s.cli(t, "search", "soon", "--limit", "1")
	require.Equal(t, 0, r.code)
	assert.Regexp(t, `next page: --cursor 0:n:\d{16}:[0-9a-f-]{36}\)`, r.stderr)
	bad := s.cli(t, "search", "soon", "--cursor", "x")
	assert.Contains(t, bad.stderr, `("0:n:1838490454556672:<uuid>")`)
}

func TestUsage_HelpAligned(t *testing.T) {
	out := runCLI(t, "-h").stdout
	_, list, _ := strings.Cut(out, "commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	col := -1
	for _, line := range strings.Split(list, "\n") {
		name := strings.Fields(line)[0]
		at := strings.Index(line[2+len(name):], strings.Fields(line)[1]) + 2 + len(name)
		if col < 0 {
			col = at
		}
		assert.Equal(t, col, at, "summary of %s", name)
	}
}

// Grouped messages waiting for a topic's first consumer group need no
// scheduler: stats do not warn of one missing, while a scheduler runs and
// has let the idle partition's lease lapse.
func TestStats_WaitingForGroupNoWarning(t *testing.T) {
	s := setupSample(t)
	const tp = "tenants.no-group-yet"
	s.manager(t, tp)
	msg := message.NewMessage(watermill.NewUUID(), []byte("grouped"))
	redisdelay.SetGroup(msg, "tenant-1")
	require.NoError(t, s.publisher(t).Publish(tp, msg))
	require.Eventually(t, func() bool {
		st := s.stats(t, tp)
		return st.Waiting == 1 && st.WaitingForGroup == 1 && st.Leased == 0
	}, 20*time.Second, 20*time.Millisecond)
	r := s.cli(t, "stats", tp)
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stderr, "warning", "no scheduler is missing")
	assert.Equal(t, "idle", rows(r.stdout)[1][5])
}

// pending says that of several messages a consumer holds in a partition,
// one at most is with its handler, the others prefetched; a consumer that
// does not report what its handler has (a raw read here, as a release
// before 0.2.0) is "unreported", and the note says why.
func TestPending_PrefetchNote(t *testing.T) {
	s := setupSample(t)
	ctx := context.Background()
	pub := s.publisher(t)
	for range 3 {
		require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("new"))))
	}
	stream := store.Keys{Prefix: s.prefix}.Shard(topic, 0).Stream()
	read := func(n int64) {
		_, err := s.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "worker-9", Streams: []string{stream, ">"}, Count: n, Block: -1}).Result()
		require.NoError(t, err)
	}
	read(1)
	r := s.cli(t, "pending", topic, group)
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stderr, "note:", "one held: nothing to tell")
	read(2)
	r = s.cli(t, "pending", topic, group)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "note: consumer worker-9 in partition 0 holds 3: a subscription hands its messages to its handler one at a time")
	assert.Contains(t, r.stderr, `note: "unreported": a consumer reports what its handler has at each lease renewal`)
	table := rows(r.stdout)
	require.Len(t, table, 4)
	assert.Equal(t, "HANDLER", table[0][2])
	for _, row := range table[1:] {
		assert.Equal(t, "unreported", row[2])
	}
}
