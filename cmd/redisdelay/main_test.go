package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// The tests run the commands end to end against a real redis-server: the
// one at REDISDELAY_TEST_ADDR (loopback only; held while the package runs,
// as the root package's tests FLUSHALL it: see redistest.External), or one
// TestMain starts on a free loopback port. Each test uses a key prefix of
// its own.
var redisAddr string

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	// Actions warn when no scheduler took the topic's lease within this:
	// the tests without one would wait 3 s each; those with one run it
	// already, holding the lease.
	schedulerWait = 300 * time.Millisecond
	stop, err := setupRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisdelay CLI tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func setupRedis() (stop func(), err error) {
	if redisAddr, stop, err = redistest.ForPackage(); err != nil {
		return nil, err
	}
	return stop, waitPing()
}

func waitPing() error {
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	var err error
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("redis at %s: %w", redisAddr, err)
}

const (
	topic     = "orders.close-unpaid"
	partTopic = "reminders" // 4 partitions
	group     = "billing"
)

// sample is what setupSample stored under its prefix.
type sample struct {
	prefix  string
	client  redis.UniversalClient
	delayed []string // UUIDs of the delayed messages of topic, in due order
	parted  []string // UUIDs of the delayed messages of partTopic
	failed  []string // UUIDs of the messages the group nacked into its dead letters
}

// setupSample publishes to topic 3 delayed messages (due in 1h, 2h, 3h)
// and 4 immediate ones; the group consumes them with MaxAttempts 1 and
// nacks 2 into its dead letters ("card declined"), then stops. It also
// publishes 3 delayed messages to partTopic, of 4 partitions.
func setupSample(t *testing.T) sample {
	t.Helper()
	s := sample{prefix: "cli-" + strings.ReplaceAll(t.Name(), "/", "-"), client: redis.NewClient(&redis.Options{Addr: redisAddr})}
	t.Cleanup(func() { _ = s.client.Close() })
	ctx := context.Background()
	keys, err := s.client.Keys(ctx, s.prefix+":*").Result()
	require.NoError(t, err)
	if len(keys) > 0 {
		require.NoError(t, s.client.Del(ctx, keys...).Err())
	}

	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
		Client: s.client, KeyPrefix: s.prefix, TopicPartitions: map[string]int{partTopic: 4},
	}, nil)
	require.NoError(t, err)
	defer pub.Close()
	for i := 1; i <= 3; i++ {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"order":%d}`, 1000+i)))
		msg.Metadata.Set("order_id", strconv.Itoa(1000+i))
		delay.Message(msg, delay.For(time.Duration(i)*time.Hour))
		require.NoError(t, pub.Publish(topic, msg))
		s.delayed = append(s.delayed, msg.UUID)

		rem := message.NewMessage(watermill.NewUUID(), []byte("remind"))
		delay.Message(rem, delay.For(time.Duration(i)*time.Minute))
		require.NoError(t, pub.Publish(partTopic, rem))
		s.parted = append(s.parted, rem.UUID)
	}
	fail := map[string]bool{}
	for i := 1; i <= 4; i++ {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"order":%d}`, 2000+i)))
		if i%2 == 0 {
			msg.Metadata.Set("fail", "yes")
			fail[msg.UUID] = true
			s.failed = append(s.failed, msg.UUID)
		}
		require.NoError(t, pub.Publish(topic, msg))
	}

	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client: s.client, KeyPrefix: s.prefix, ConsumerGroup: group, Consumer: "worker",
		MaxAttempts: 1, BatchSize: 1, CheckInterval: 100 * time.Millisecond,
	}, nil)
	require.NoError(t, err)
	subCtx, cancel := context.WithCancel(ctx)
	msgs, err := sub.Subscribe(subCtx, topic)
	require.NoError(t, err)
	for range 4 {
		select {
		case m := <-msgs:
			if fail[m.UUID] {
				m.Metadata.Set(redisdelay.ErrorKey, "card declined")
				m.Nack()
			} else {
				m.Ack()
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the sample subscriber received no message in 10s")
		}
	}
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: s.client, KeyPrefix: s.prefix})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := insp.Stats(ctx, topic)
		return err == nil && len(st.Groups) == 1 && st.Groups[0].Dead == 2 && st.Groups[0].Pending == 0 && st.Groups[0].Ready == 0
	}, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, sub.Close())
	return s
}

type result struct {
	code           int
	stdout, stderr string
}

// cli runs the command line in process with the test server and the
// sample's prefix in front.
func (s sample) cli(t *testing.T, args ...string) result {
	t.Helper()
	return runCLI(t, append([]string{"--addr", redisAddr, "--prefix", s.prefix}, args...)...)
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	r := result{code, out.String(), errOut.String()}
	t.Logf("redisdelay %s → exit %d\n%s%s", strings.Join(args, " "), code, r.stdout, r.stderr)
	return r
}

// ok runs a command that must succeed and returns its stdout.
// notFound runs the CLI, requires exit status 3 (not found), and returns
// its stdout.
func (s sample) notFound(t *testing.T, args ...string) string {
	t.Helper()
	r := s.cli(t, args...)
	require.Equal(t, exitNotFound, r.code, "stdout %q, stderr %q", r.stdout, r.stderr)
	assert.Empty(t, r.stderr, "the report is on stdout")
	return r.stdout
}

func (s sample) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := s.cli(t, args...)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	return r.stdout
}

// usageLines checks that a usage error is one line and a hint: where the
// command's usage (or the global one) is, not all of it.
func usageLines(t *testing.T, r result, args []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.Len(t, lines, 2, "a usage error is an error line and a hint: %q (%v)", r.stderr, args)
	assert.True(t, strings.HasPrefix(lines[0], "redisdelay: "), lines[0])
	assert.Regexp(t, `^(usage: redisdelay \[flags\] \S+ .*\(run "redisdelay help \S+" for its flags\)|run "redisdelay -h" for the commands and global flags)$`, lines[1], args)
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(s), &v), "output: %s", s)
	return v
}

// rows returns the table lines split into fields.
func rows(out string) [][]string {
	var r [][]string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		r = append(r, strings.Fields(l))
	}
	return r
}

func (s sample) stats(t *testing.T, tp string) statsJSON {
	t.Helper()
	all := decode[[]statsJSON](t, s.ok(t, "--json", "stats", tp))
	require.Len(t, all, 1)
	return all[0]
}

func (s sample) deadIDs(t *testing.T) []string {
	t.Helper()
	var ids []string
	for _, d := range decode[[]deadJSON](t, s.ok(t, "dead", topic, group, "--json")) {
		ids = append(ids, d.ID)
	}
	return ids
}

func TestTopics_List(t *testing.T) {
	s := setupSample(t)
	assert.Equal(t, topic+"\n"+partTopic+"\n", s.ok(t, "topics"))
	assert.Equal(t, []string{topic, partTopic}, decode[[]string](t, s.ok(t, "--json", "topics")))

	empty := runCLI(t, "--addr", redisAddr, "--prefix", "cli-nothing-here", "topics")
	assert.Equal(t, 0, empty.code)
	assert.Equal(t, "no topics under prefix \"cli-nothing-here\"\n", empty.stdout)
	assert.Equal(t, "[]\n", runCLI(t, "--addr", redisAddr, "--prefix", "cli-nothing-here", "--json", "topics").stdout)
}

func TestStats_PerGroup(t *testing.T) {
	s := setupSample(t)
	out := s.ok(t, "stats")
	r := rows(out)
	require.GreaterOrEqual(t, len(r), 6, out)
	assert.Equal(t, []string{"TOPIC", "PARTITIONS", "WAITING", "STREAM", "GROUPS", "SCHEDULER", "OVERDUE"}, r[0])
	assert.Equal(t, []string{topic, "1", "3"}, r[1][:3]) // the stream may be trimmed already
	assert.Equal(t, []string{"1", "no", "-"}, r[1][4:], "the sample's subscriber stopped: no scheduler, nothing due yet")
	assert.Equal(t, []string{partTopic, "4", "3", "0", "0", "no", "-"}, r[2])
	assert.Empty(t, r[3])
	assert.Equal(t, []string{"TOPIC", "GROUP", "READY", "PENDING", "RETRY", "DEAD", "DEAD", "TOTAL", "EVICTED", "CONSUMERS", "GROUPED", "ACTIVE", "GROUPS", "PAUSED"}, r[4])
	assert.Equal(t, []string{topic, group, "0", "0", "0", "2", "2", "0", "0", "0", "0", "no"}, r[5]) // the consumer left on Close

	// One topic, as JSON.
	st := s.stats(t, topic)
	assert.Equal(t, topic, st.Topic)
	assert.Equal(t, 1, st.Partitions)
	assert.EqualValues(t, 3, st.Waiting)
	assert.Equal(t, 0, st.Leased)
	assert.Equal(t, "no", st.Scheduler)
	assert.Equal(t, []groupJSON{{Group: group, Ready: 0, Pending: 0, Retry: 0, Dead: 2, DeadTotal: 2, DeadEvicted: 0, Consumers: 0}}, st.Groups)
	all := decode[[]statsJSON](t, s.ok(t, "stats", "--json"))
	require.Len(t, all, 2)
	assert.Equal(t, partTopic, all[1].Topic)
	assert.Equal(t, 4, all[1].Partitions)
	assert.Equal(t, []groupJSON{}, all[1].Groups)

	// A topic nobody used is an error, not a row of zeros.
	r2 := s.cli(t, "stats", topic, "orders.typo")
	assert.Equal(t, 1, r2.code)
	assert.Contains(t, r2.stderr, `topic "orders.typo" is not known under prefix "`+s.prefix+`"`)
	assert.Empty(t, r2.stdout)
}

// Grouped messages (SetGroup) a Manager queued in their groups for a
// consumer group nobody consumes yet: the GROUPED and ACTIVE GROUPS
// columns, "grouped" and "active_groups" in JSON, and not in READY.
func TestStats_Grouped(t *testing.T) {
	const tp = "tenant.jobs"
	prefix := "cli-" + t.Name()
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	keys, err := client.Keys(ctx, prefix+":*").Result()
	require.NoError(t, err)
	if len(keys) > 0 {
		require.NoError(t, client.Del(ctx, keys...).Err())
	}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client: client, KeyPrefix: prefix, ConsumerGroup: group, DisableScheduler: true,
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	require.NoError(t, sub.SubscribeInitialize(tp))
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: client, KeyPrefix: prefix, Topics: []string{tp}}, nil)
	require.NoError(t, err)
	go func() { _ = mgr.Run(ctx) }()
	t.Cleanup(func() { _ = mgr.Close() })
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix}, nil)
	require.NoError(t, err)
	defer pub.Close()
	var msgs []*message.Message
	for i, tenant := range []string{"tenant-1", "tenant-1", "tenant-1", "tenant-2"} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		redisdelay.SetGroup(msg, tenant)
		msgs = append(msgs, msg)
	}
	msgs = append(msgs, message.NewMessage(watermill.NewUUID(), []byte("no group")))
	require.NoError(t, pub.Publish(tp, msgs...))

	s := sample{prefix: prefix, client: client}
	require.Eventually(t, func() bool {
		st := s.stats(t, tp)
		return st.Waiting == 0 && len(st.Groups) == 1 && st.Groups[0].Grouped == 4
	}, 10*time.Second, 20*time.Millisecond)
	st := s.stats(t, tp)
	assert.Equal(t, []groupJSON{{Group: group, Ready: 1, Grouped: 4, ActiveGroups: 2}}, st.Groups)
	out := s.ok(t, "--json", "stats", tp)
	assert.Contains(t, out, `"grouped": 4`)
	assert.Contains(t, out, `"active_groups": 2`)

	r := rows(s.ok(t, "stats", tp))
	require.Len(t, r, 5)
	assert.Equal(t, []string{"TOPIC", "GROUP", "READY", "PENDING", "RETRY", "DEAD", "DEAD", "TOTAL", "EVICTED", "CONSUMERS", "GROUPED", "ACTIVE", "GROUPS", "PAUSED"}, r[3])
	assert.Equal(t, []string{tp, group, "1", "0", "0", "0", "0", "0", "0", "4", "2", "no"}, r[4])
}

func TestWaiting_List(t *testing.T) {
	s := setupSample(t)
	out := s.ok(t, "waiting", topic)
	r := rows(out)
	require.Len(t, r, 4, out)
	assert.Equal(t, []string{"UUID", "DUE", "IN", "KEY", "SIZE", "METADATA"}, r[0])
	for i, row := range r[1:] {
		assert.Equal(t, s.delayed[i], row[0])
		due, err := time.Parse(time.RFC3339, row[1])
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now().Add(time.Duration(i+1)*time.Hour), due, time.Minute)
		assert.Equal(t, "in", row[2])
		assert.Regexp(t, `^\d+h\d+m\d+s$|^59m\d+s$`, row[3])
		assert.Equal(t, "-", row[4], "no business key")
		assert.Equal(t, "14", row[5]) // {"order":1001}
		assert.Equal(t, fmt.Sprintf("order_id=%d", 1001+i), row[6])
	}

	// A page, as JSON.
	page := decode[[]waitingJSON](t, s.ok(t, "--json", "waiting", "--offset", "1", "--limit", "1", topic))
	require.Len(t, page, 1)
	w := page[0]
	assert.Equal(t, s.delayed[1], w.UUID)
	assert.InDelta(t, (2 * time.Hour).Milliseconds(), w.DueInMs, float64(time.Minute.Milliseconds()))
	assert.Equal(t, 14, w.PayloadBytes)
	assert.Equal(t, "1002", w.Metadata["order_id"])
	assert.Equal(t, "2h0m0s", w.Metadata[delay.DelayedForKey])
	assert.Equal(t, time.UTC, w.Due.Location())

	// Partitioned: merged in due order.
	parted := decode[[]waitingJSON](t, s.ok(t, "waiting", partTopic, "--json"))
	require.Len(t, parted, 3)
	for i, m := range parted {
		assert.Equal(t, s.parted[i], m.UUID)
	}

	// The paging hint goes to stderr, so stdout stays a table.
	r2 := s.cli(t, "waiting", topic, "--limit", "2")
	assert.Equal(t, 0, r2.code)
	assert.Len(t, rows(r2.stdout), 3)
	assert.Equal(t, "(first 2 shown; next page: --offset 2)\n", r2.stderr)

	assert.Equal(t, "no waiting messages in topic \""+topic+"\" after offset 5\n", s.ok(t, "waiting", topic, "--offset", "5"))
	assert.Equal(t, "[]\n", s.ok(t, "waiting", topic, "--offset", "5", "--json"))
}

func TestDead_List(t *testing.T) {
	s := setupSample(t)
	out := s.ok(t, "dead", topic, group)
	r := rows(out)
	require.Len(t, r, 3, out)
	assert.Equal(t, []string{"ID", "TIME", "ATTEMPTS", "UUID", "REASON", "METADATA"}, r[0])
	for i, row := range r[1:] {
		assert.Regexp(t, `^\d+-\d+$`, row[0])
		tm, err := time.Parse(time.RFC3339, row[1])
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now(), tm, time.Minute)
		assert.Equal(t, []string{"1", s.failed[i], "card", "declined", "fail=yes"}, row[2:], "metadata as in waiting, the error (in REASON) left out")
	}

	dead := decode[[]deadJSON](t, s.ok(t, "--json", "dead", topic, group))
	require.Len(t, dead, 2)
	for i, d := range dead {
		assert.Equal(t, r[i+1][0], d.ID)
		assert.Equal(t, s.failed[i], d.UUID)
		assert.Equal(t, 1, d.Attempts)
		assert.Equal(t, "card declined", d.Reason)
		assert.Equal(t, "yes", d.Metadata["fail"])
		assert.Equal(t, "card declined", d.Metadata[redisdelay.ErrorKey])
		assert.Equal(t, 14, d.PayloadBytes)
		assert.Zero(t, d.UndecodableBytes)
	}

	// Paging.
	r2 := s.cli(t, "dead", topic, group, "--limit", "1")
	assert.Equal(t, 0, r2.code)
	assert.Equal(t, "(first 1 shown; next page: --after "+dead[0].ID+")\n", r2.stderr)
	next := decode[[]deadJSON](t, s.ok(t, "dead", topic, group, "--after", dead[0].ID, "--json"))
	require.Len(t, next, 1)
	assert.Equal(t, dead[1].ID, next[0].ID)
	assert.Equal(t, fmt.Sprintf("no dead letters in group %q of topic %q after %s\n", group, topic, dead[1].ID),
		s.ok(t, "dead", topic, group, "--after", dead[1].ID))

	// An unknown group names the known ones.
	r3 := s.cli(t, "dead", topic, "biling")
	assert.Equal(t, 1, r3.code)
	assert.Equal(t, `redisdelay: topic "orders.close-unpaid" has no consumer group "biling" (its groups: billing)`+"\n", r3.stderr)
}

// Cancel by business key, in a topic of 4 partitions.
func TestCancel_ByKey(t *testing.T) {
	s := setupSample(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
		Client: s.client, KeyPrefix: s.prefix, TopicPartitions: map[string]int{"orders.keyed": 4},
	}, nil)
	require.NoError(t, err)
	defer pub.Close()
	for i := range 3 {
		msg := message.NewMessage(watermill.NewUUID(), []byte("close"))
		msg.Metadata.Set(redisdelay.BusinessKey, "order-"+strconv.Itoa(i))
		delay.Message(msg, delay.For(time.Hour))
		require.NoError(t, pub.Publish("orders.keyed", msg))
	}
	var keys []string
	for _, row := range rows(s.ok(t, "waiting", "orders.keyed"))[1:] {
		keys = append(keys, row[4])
		assert.NotContains(t, row[len(row)-1], redisdelay.BusinessKey, "the key has its own column")
	}
	assert.ElementsMatch(t, []string{"order-0", "order-1", "order-2"}, keys, "the KEY column")
	assert.Equal(t, "cancelled the message holding business key \"order-1\" in topic \"orders.keyed\"\n", s.ok(t, "cancel", "orders.keyed", "--key", "order-1"))
	assert.Equal(t, "not cancelled: no waiting message holds business key \"order-1\" in topic \"orders.keyed\" (unknown, already cancelled, or already due)\n",
		s.notFound(t, "cancel", "orders.keyed", "--key", "order-1"))
	assert.Equal(t, cancelJSON{Topic: "orders.keyed", Key: "order-2", Cancelled: true},
		decode[cancelJSON](t, s.ok(t, "--json", "cancel", "orders.keyed", "--key", "order-2")))
	assert.EqualValues(t, 1, s.stats(t, "orders.keyed").Waiting)
}

func TestCancel_ByUUID(t *testing.T) {
	s := setupSample(t)
	assert.Equal(t, fmt.Sprintf("cancelled message %s in topic %q\n", s.delayed[0], topic), s.ok(t, "cancel", topic, s.delayed[0]))
	assert.Equal(t, fmt.Sprintf("not cancelled: no message %s is waiting in topic %q (unknown, already cancelled, or already due)\n", s.delayed[0], topic),
		s.notFound(t, "cancel", topic, s.delayed[0]))
	assert.Equal(t, cancelJSON{Topic: topic, UUID: s.delayed[1], Cancelled: true}, decode[cancelJSON](t, s.ok(t, "--json", "cancel", topic, s.delayed[1])))
	assert.Equal(t, cancelJSON{Topic: topic, UUID: "nope", Cancelled: false}, decode[cancelJSON](t, s.notFound(t, "--json", "cancel", topic, "nope")))
	assert.EqualValues(t, 1, s.stats(t, topic).Waiting)

	// In a topic of 4 partitions, every message is found, wherever it is.
	for _, id := range s.parted {
		assert.True(t, decode[cancelJSON](t, s.ok(t, "cancel", partTopic, id, "--json")).Cancelled, id)
	}
	assert.EqualValues(t, 0, s.stats(t, partTopic).Waiting)
}

// Reschedule by UUID (--at) and by business key (--in), in topics of 1
// and 4 partitions; the message keeps its UUID and moves, as FindWaiting
// shows.
func TestReschedule_OneMessage(t *testing.T) {
	s := setupSample(t)
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: s.client, KeyPrefix: s.prefix})
	require.NoError(t, err)
	ctx := context.Background()
	dueOf := func(tp, id string) time.Time {
		w, found, err := insp.FindWaiting(ctx, tp, id)
		require.NoError(t, err)
		require.True(t, found, id)
		return w.Due
	}

	at := time.Now().Add(5 * time.Hour).UTC().Truncate(time.Millisecond)
	printed := s.ok(t, "reschedule", topic, s.delayed[0], "--at", at.Format(time.RFC3339Nano))
	// The due time as stored, which Redis's clock sets (a ms or so after
	// the one asked for), not the one asked for.
	assert.Equal(t, fmt.Sprintf("rescheduled message %s in topic %q to %s\n", s.delayed[0], topic,
		dueOf(topic, s.delayed[0]).UTC().Format("2006-01-02T15:04:05.000Z07:00")), printed)
	// never early; late by the time the command took to reach Redis
	assert.False(t, dueOf(topic, s.delayed[0]).Before(at), "due %s, want %s", dueOf(topic, s.delayed[0]), at)
	assert.WithinDuration(t, at, dueOf(topic, s.delayed[0]), time.Second)
	assert.Equal(t, fmt.Sprintf("not rescheduled: no message %s is waiting in topic %q (unknown, cancelled, or already due)\n", "nope", topic),
		s.notFound(t, "reschedule", topic, "nope", "--in", "1m"))
	assert.False(t, decode[rescheduleJSON](t, s.notFound(t, "--json", "reschedule", topic, "nope", "--in", "1m")).Rescheduled)
	out := decode[rescheduleJSON](t, s.ok(t, "--json", "reschedule", topic, s.delayed[1], "--in", "90m"))
	assert.True(t, out.Rescheduled)
	assert.Equal(t, s.delayed[1], out.UUID)
	assert.WithinDuration(t, time.Now().Add(90*time.Minute), dueOf(topic, s.delayed[1]), 5*time.Second)
	for _, id := range s.parted {
		assert.True(t, decode[rescheduleJSON](t, s.ok(t, "reschedule", partTopic, id, "--in", "4h", "--json")).Rescheduled, id)
		assert.WithinDuration(t, time.Now().Add(4*time.Hour), dueOf(partTopic, id), 5*time.Second)
	}

	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
		Client: s.client, KeyPrefix: s.prefix, TopicPartitions: map[string]int{"orders.keyed": 4},
	}, nil)
	require.NoError(t, err)
	defer pub.Close()
	msg := message.NewMessage(watermill.NewUUID(), []byte("close"))
	msg.Metadata.Set(redisdelay.BusinessKey, "order-1")
	delay.Message(msg, delay.For(time.Hour))
	require.NoError(t, pub.Publish("orders.keyed", msg))
	assert.Contains(t, s.ok(t, "reschedule", "orders.keyed", "--key", "order-1", "--in", "10m"),
		`rescheduled the message holding business key "order-1" in topic "orders.keyed" to `)
	assert.WithinDuration(t, time.Now().Add(10*time.Minute), dueOf("orders.keyed", msg.UUID), 5*time.Second)
	assert.Equal(t, "not rescheduled: no waiting message holds business key \"order-2\" in topic \"orders.keyed\" (unknown, cancelled, or already due)\n",
		s.notFound(t, "reschedule", "orders.keyed", "--key", "order-2", "--in", "10m"))
}

func TestDead_Requeue(t *testing.T) {
	s := setupSample(t)
	ids := s.deadIDs(t)
	require.Len(t, ids, 2)

	assert.Equal(t, fmt.Sprintf("requeued 1 dead letter to group %q of topic %q\nnot found (already requeued or deleted?): 99-0\n", group, topic),
		s.ok(t, "requeue", topic, group, ids[0], "99-0"))
	g := s.stats(t, topic).Groups[0]
	assert.EqualValues(t, 1, g.Dead)
	assert.EqualValues(t, 1, g.Ready) // in the group's redelivery stream, no subscriber running

	assert.Equal(t, requeueJSON{Topic: topic, Group: group, Requeued: 0, Missing: []string{ids[0]}},
		decode[requeueJSON](t, s.ok(t, "--json", "requeue", topic, group, ids[0])))
	assert.Equal(t, requeueJSON{Topic: topic, Group: group, Requeued: 1, Missing: []string{}},
		decode[requeueJSON](t, s.ok(t, "--json", "requeue", topic, group, "--all")))
	g = s.stats(t, topic).Groups[0]
	assert.EqualValues(t, 0, g.Dead)
	assert.EqualValues(t, 2, g.Ready)

	for _, bad := range [][]string{
		{"requeue", topic, group},
		{"requeue", topic, group, ids[0], "--all"},
	} {
		r := s.cli(t, bad...)
		assert.Equal(t, 2, r.code, bad)
		assert.Contains(t, r.stderr, "usage: redisdelay [flags] requeue <topic> <group> (<id>... | --all | filter)")
		usageLines(t, r, nil)
	}
}

func TestDead_Purge(t *testing.T) {
	s := setupSample(t)
	r := s.cli(t, "purge", topic, group)
	assert.Equal(t, 2, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, `purge: would delete 2 dead letters of group "billing" in topic "orders.close-unpaid" for good`)
	assert.Contains(t, r.stderr, "add --yes")
	assert.EqualValues(t, 2, s.stats(t, topic).Groups[0].Dead)

	assert.Equal(t, purgeJSON{Topic: topic, Group: group, Purged: 2}, decode[purgeJSON](t, s.ok(t, "purge", topic, group, "--yes", "--json")))
	g := s.stats(t, topic).Groups[0]
	assert.EqualValues(t, 0, g.Dead)
	assert.EqualValues(t, 2, g.DeadTotal)
	assert.Equal(t, fmt.Sprintf("purged 0 dead letters of group %q in topic %q\n", group, topic), s.ok(t, "purge", "--yes", topic, group))
}

func TestDead_Delete(t *testing.T) {
	s := setupSample(t)
	ids := s.deadIDs(t)
	assert.Equal(t, fmt.Sprintf("deleted dead letter %s of group %q in topic %q\n", ids[0], group, topic), s.ok(t, "delete-dead", topic, group, ids[0]))
	assert.Equal(t, fmt.Sprintf("not deleted: no dead letter %s in group %q of topic %q\n", ids[0], group, topic), s.ok(t, "delete-dead", topic, group, ids[0]))
	assert.Equal(t, deleteJSON{Topic: topic, Group: group, ID: ids[1], Deleted: true}, decode[deleteJSON](t, s.ok(t, "--json", "delete-dead", topic, group, ids[1])))
	assert.Equal(t, []string(nil), s.deadIDs(t))

	// A library error is printed as is.
	r := s.cli(t, "delete-dead", topic, group, "7/1-0")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, `redisdelay: dead letter ID "7/1-0" names partition "7", but the topic has 1: pass an ID from DeadLetters`+"\n", r.stderr)
}

func TestUsage_Errors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "redisdelay: no command given"},
		{[]string{"frobnicate"}, `redisdelay: unknown command "frobnicate"`},
		{[]string{"--bogus", "topics"}, "flag provided but not defined: -bogus"},
		{[]string{"topics", "extra"}, "topics: wrong number of arguments (1)"},
		{[]string{"waiting"}, "waiting: wrong number of arguments (0)"},
		{[]string{"waiting", topic, "--limit", "many"}, `invalid value "many" for flag -limit`},
		{[]string{"dead", topic}, "dead: wrong number of arguments (1)"},
		{[]string{"cancel", topic}, "give the UUID of the message to cancel, --key K, a filter (--meta K=V, --key-prefix P, --from T, --to T) or --all"},
		{[]string{"cancel", topic, "id", "--key", "k"}, "give a UUID or --key, not both"},
		{[]string{"reschedule", topic, "--in", "1m"}, "give the UUID of the message to reschedule, --key K, a filter (--meta K=V, --key-prefix P, --from T, --to T) or --all"},
		{[]string{"reschedule", topic, "id", "--key", "k", "--in", "1m"}, "give a UUID or --key, not both"},
		{[]string{"reschedule", topic, "id"}, "give the new due time: --in D (from now; 0s: now) or --at T (RFC 3339, or now)"},
		{[]string{"reschedule", topic, "id", "--in", "1m", "--at", "2030-01-02T15:04:05Z"}, "give --in or --at, not both"},
		{[]string{"reschedule", topic, "id", "--in", "-1m"}, "--in is -1m0s: give a duration from now, 0s or more (0s: due now), or --at for a time"},
		{[]string{"reschedule", topic, "id", "--at", "tomorrow"}, `--at "tomorrow" is not a time: give RFC 3339 (2030-01-02T15:04:05Z) or now`},
		{[]string{"reschedule", topic, "id", "--in", "soon"}, `invalid value "soon" for flag -in: parse error: give a duration such as 90s, 10m or 2h (0s: now)`},
		{[]string{"run-now", topic}, "give the UUID of the message to run now, --key K, a filter"},
		{[]string{"run-now", topic, "id", "--all"}, "--all makes due now every waiting message: give it without a UUID or --key"},
		{[]string{"delete-group", topic}, "delete-group: wrong number of arguments (1)"},
		{[]string{"ready", topic, group, "--limit", "0"}, "--limit is 0: use 1 to 10000"},
		{[]string{"throughput", "--over", "1h"}, "--over is 1h0m0s: give 100ms to 10m"},
		{[]string{"health", "--max-overdue", "-1s"}, "--max-overdue, --stuck-after and --consumer-idle take positive durations"},
		{[]string{"delete-dead", topic, group}, "give the ID of the dead letter to delete or a filter (--meta K=V, --key-prefix P, --from T, --to T); to delete every dead letter of the group: redisdelay purge <topic> <group> --yes"},
		{[]string{"delete-dead", topic, group, "1-0", "2-0"}, "delete-dead: wrong number of arguments (4)"},
		{[]string{"--cluster", "127.0.0.1:7000", "--addr", "127.0.0.1:7001", "topics"}, "--cluster and --addr exclude each other"},
		{[]string{"--timeout", "0s", "topics"}, "--timeout is 0s"},
	} {
		r := runCLI(t, c.args...)
		assert.Equal(t, 2, r.code, c.args)
		assert.Contains(t, r.stderr, c.want, c.args)
		usageLines(t, r, c.args)
		assert.Empty(t, r.stdout, c.args)
	}

	// Help is not an error.
	for _, args := range [][]string{{"-h"}, {"help"}, {"help", "dead"}, {"dead", "--help"}} {
		r := runCLI(t, args...)
		assert.Equal(t, 0, r.code, args)
		assert.Contains(t, r.stdout, "usage: redisdelay [flags] ", args)
	}
	assert.Contains(t, runCLI(t, "help", "dead").stdout, "-after ID")
}

func TestConnection_Unreachable(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(redistest.RefusedPort(t))
	start := time.Now()
	r := runCLI(t, "--addr", addr, "--timeout", "3s", "stats")
	assert.Equal(t, 1, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "redisdelay: cannot reach Redis at "+addr+": ")
	assert.Less(t, time.Since(start), 3*time.Second)

	// A server that never answers: --timeout bounds the wait.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start = time.Now()
	r = runCLI(t, "--addr", l.Addr().String(), "--timeout", "500ms", "topics")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "redisdelay: cannot reach Redis at "+l.Addr().String()+": context deadline exceeded (gave up after --timeout 500ms)\n", r.stderr)
	assert.Less(t, time.Since(start), 3*time.Second)

	r = runCLI(t, "--cluster", addr, "--timeout", "2s", "topics")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "redisdelay: cannot reach Redis Cluster (seeds "+addr+"): ")
}

// TestUsage_Binary builds the command and runs it, to prove main's wiring (exit
// statuses, streams, $REDIS_PASSWORD).
func TestUsage_Binary(t *testing.T) {
	s := setupSample(t)
	bin := filepath.Join(t.TempDir(), "redisdelay")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	exe := func(env []string, args ...string) result {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		t.Logf("%s → exit %d\n%s%s", strings.Join(args, " "), code, o.String(), e.String())
		return result{code, o.String(), e.String()}
	}
	r := exe(nil, "--addr", redisAddr, "--prefix", s.prefix, "--json", "stats", topic)
	require.Equal(t, 0, r.code)
	assert.EqualValues(t, 2, decode[[]statsJSON](t, r.stdout)[0].Groups[0].Dead)

	r = exe(nil, "--prefix", s.prefix, "--addr", redisAddr, "waiting", topic)
	assert.Equal(t, 0, r.code)
	assert.Regexp(t, regexp.MustCompile(`(?m)^`+s.delayed[0]+` +\S+ +in `), r.stdout)

	r = exe(nil)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "no command given")

	port := redistest.RefusedPort(t)
	r = exe(nil, "--addr", "127.0.0.1:"+strconv.Itoa(port), "topics")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "redisdelay: cannot reach Redis at 127.0.0.1:"+strconv.Itoa(port)+": dial tcp 127.0.0.1:"+strconv.Itoa(port)+": connect: connection refused\n", r.stderr)

	// $REDIS_PASSWORD reaches the server: a fake one records what it is sent.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	got := make(chan string, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 4096)
			n, _ := c.Read(buf)
			got <- string(buf[:n])
			_ = c.Close()
		}
	}()
	r = exe([]string{"REDIS_PASSWORD=s3cret"}, "--addr", l.Addr().String(), "--timeout", "3s", "topics")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "redisdelay: cannot reach Redis at "+l.Addr().String()+": ")
	select {
	case first := <-got:
		assert.Contains(t, first, "s3cret")
	case <-time.After(5 * time.Second):
		t.Fatal("the binary did not connect")
	}
}

// TestConnection_Cluster runs the commands with --cluster against the Redis Cluster of
// REDISDELAY_TEST_CLUSTER (comma-separated loopback seeds, see
// .ci/cluster.sh), with a topic's partitions on different nodes.
func TestConnection_Cluster(t *testing.T) {
	seeds := os.Getenv("REDISDELAY_TEST_CLUSTER")
	if seeds == "" {
		t.Skip("set REDISDELAY_TEST_CLUSTER (see .ci/cluster.sh)")
	}
	for _, a := range strings.Split(seeds, ",") {
		require.NoError(t, redistest.CheckLoopback("REDISDELAY_TEST_CLUSTER", strings.TrimSpace(a)))
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(seeds, ",")})
	defer client.Close()
	prefix := "cli-cluster-" + watermill.NewShortUUID()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix, TopicPartitions: map[string]int{partTopic: 8}}, nil)
	require.NoError(t, err)
	defer pub.Close()
	var ids []string
	for i := range 8 {
		msg := message.NewMessage(watermill.NewUUID(), []byte("remind"))
		delay.Message(msg, delay.For(time.Duration(i+1)*time.Minute))
		require.NoError(t, pub.Publish(partTopic, msg))
		ids = append(ids, msg.UUID)
	}
	cli := func(args ...string) string {
		t.Helper()
		r := runCLI(t, append([]string{"--cluster", seeds, "--prefix", prefix}, args...)...)
		require.Equal(t, 0, r.code, r.stderr)
		return r.stdout
	}
	assert.Equal(t, partTopic+"\n", cli("topics"))
	st := decode[[]statsJSON](t, cli("stats", "--json"))
	require.Len(t, st, 1)
	assert.Equal(t, 8, st[0].Partitions)
	assert.EqualValues(t, 8, st[0].Waiting)
	waiting := decode[[]waitingJSON](t, cli("waiting", partTopic, "--json"))
	require.Len(t, waiting, 8)
	for i, w := range waiting {
		assert.Equal(t, ids[i], w.UUID)
	}
	for _, id := range ids {
		assert.True(t, decode[cancelJSON](t, cli("cancel", partTopic, id, "--json")).Cancelled, id)
	}
	assert.EqualValues(t, 0, decode[[]statsJSON](t, cli("stats", partTopic, "--json"))[0].Waiting)
}

// pause and resume a group; the stats show it; an unknown group is an
// error naming the known ones.
func TestGroups_PauseResume(t *testing.T) {
	s := setupSample(t)
	assert.Contains(t, s.ok(t, "pause", topic, group), "paused group")
	assert.Equal(t, fmt.Sprintf("group %q of topic %q was already paused\n", group, topic), s.ok(t, "pause", topic, group))
	assert.Equal(t, pauseJSON{Topic: topic, Group: group, Paused: true, WasPaused: true}, decode[pauseJSON](t, s.ok(t, "--json", "pause", topic, group)))
	assert.True(t, s.stats(t, topic).Groups[0].Paused)
	r := rows(s.ok(t, "stats", topic))
	assert.Equal(t, "yes", r[len(r)-1][len(r[len(r)-1])-1])
	assert.Equal(t, pauseJSON{Topic: topic, Group: group, WasPaused: true}, decode[pauseJSON](t, s.ok(t, "--json", "resume", topic, group)))
	assert.False(t, s.stats(t, topic).Groups[0].Paused)
	assert.Contains(t, s.ok(t, "resume", topic, group), "was not paused")

	// An unknown group (a typo?) is refused with exit status 3, and
	// nothing is paused.
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: s.client, KeyPrefix: s.prefix})
	require.NoError(t, err)
	typo := s.cli(t, "pause", topic, "reporting")
	assert.Equal(t, exitNotFound, typo.code)
	assert.Empty(t, typo.stdout)
	assert.Contains(t, typo.stderr, `redisdelay: topic "orders.close-unpaid" has no consumer group "reporting" (its groups: `+group+"): give --create to pause it before its first subscriber starts")
	paused, err := insp.Paused(context.Background(), topic, "reporting")
	require.NoError(t, err)
	assert.False(t, paused)

	// Before its first subscriber, as Inspector.Pause, when asked.
	for _, flag := range []string{"--create", "--force"} {
		early := s.cli(t, "pause", topic, "reporting", flag)
		assert.Equal(t, 0, early.code)
		assert.Contains(t, early.stdout, `paused group "reporting"`)
		assert.Contains(t, early.stderr, `redisdelay: note: topic "orders.close-unpaid" has no consumer group "reporting" (its groups: `+group+"); it is paused all the same (--create), before its first subscriber starts")
		paused, err = insp.Paused(context.Background(), topic, "reporting")
		require.NoError(t, err)
		assert.True(t, paused)
		assert.Contains(t, s.ok(t, "resume", topic, "reporting"), "resumed")
	}
	usage := s.cli(t, "pause", topic)
	assert.Equal(t, 2, usage.code)
}
