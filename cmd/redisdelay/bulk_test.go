package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// killTenants publishes n messages to tp, tenant "acme" for even i and
// "globex" for odd, which group nacks into its dead letters.
func (s sample) killTenants(t *testing.T, tp string, n int) {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: s.client, KeyPrefix: s.prefix}, nil)
	require.NoError(t, err)
	defer pub.Close()
	for i := range n {
		msg := message.NewMessage(watermill.NewUUID(), []byte("charge"))
		msg.Metadata.Set("tenant", map[bool]string{true: "acme", false: "globex"}[i%2 == 0])
		require.NoError(t, pub.Publish(tp, msg))
	}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client: s.client, KeyPrefix: s.prefix, ConsumerGroup: group, Consumer: "worker",
		MaxAttempts: 1, BatchSize: 1, CheckInterval: 100 * time.Millisecond,
	}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, tp)
	require.NoError(t, err)
	for range n {
		select {
		case m := <-msgs:
			m.Nack()
		case <-time.After(10 * time.Second):
			t.Fatal("the subscriber received no message in 10s")
		}
	}
	require.Eventually(t, func() bool {
		st := s.stats(t, tp)
		return len(st.Groups) == 1 && st.Groups[0].Dead == int64(n) && st.Groups[0].Pending == 0
	}, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, sub.Close())
}

// Cancel by metadata, business key prefix and due time, in a topic of 4
// partitions; a dry run changes nothing.
func TestBulk_Cancel(t *testing.T) {
	s := setupSample(t)
	m := s.publishTenants(t, tenantTopic, 4, 10)

	assert.Equal(t, "would cancel 5 waiting messages of topic \"orders.tenants\" (read 10); nothing changed: --dry-run\n",
		s.ok(t, "cancel", tenantTopic, "--meta", "tenant=acme", "--dry-run"))
	assert.EqualValues(t, 10, s.stats(t, tenantTopic).Waiting)
	assert.Equal(t, bulkJSON{Topic: tenantTopic, Scanned: 10, Matched: 5, DryRun: true},
		decode[bulkJSON](t, s.ok(t, "--json", "cancel", tenantTopic, "--meta", "tenant=acme", "--dry-run")))
	assert.EqualValues(t, 10, s.stats(t, tenantTopic).Waiting)

	assert.Equal(t, "cancelled 5 waiting messages of topic \"orders.tenants\" (read 10, matched 5)\n",
		s.ok(t, "cancel", tenantTopic, "--meta", "tenant=acme"))
	left := decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic))
	assert.ElementsMatch(t, m.globex, uuidsOf(left.Matches))

	// Keyed: order-3 and order-9 are left (order-0 and order-6 were acme).
	assert.Equal(t, bulkJSON{Topic: tenantTopic, Scanned: 5, Matched: 2, Done: 2},
		decode[bulkJSON](t, s.ok(t, "--json", "cancel", tenantTopic, "--key-prefix", "order-")))
	// Due within 150 s: message 1 (due in 2 minutes).
	assert.Equal(t, "cancelled 1 waiting message of topic \"orders.tenants\" (read 1, matched 1)\n",
		s.ok(t, "cancel", tenantTopic, "--to", "+150s"))
	left = decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic))
	assert.ElementsMatch(t, []string{m.all[5], m.all[7]}, uuidsOf(left.Matches))
}

// Reschedule by filter to an instant (--at) or from now (--in): messages
// already at the new due time are left alone.
func TestBulk_Reschedule(t *testing.T) {
	s := setupSample(t)
	m := s.publishTenants(t, tenantTopic, 4, 6)
	at := time.Now().Add(5 * time.Hour).UTC().Truncate(time.Millisecond)

	assert.Equal(t, fmt.Sprintf("would reschedule 3 waiting messages of topic %q to %s (read 6); nothing changed: --dry-run\n", tenantTopic, at.Format(dueLayout)),
		s.ok(t, "reschedule", tenantTopic, "--meta", "tenant=globex", "--at", at.Format(time.RFC3339Nano), "--dry-run"))
	assert.Equal(t, fmt.Sprintf("rescheduled 3 waiting messages of topic %q to %s (read 6, matched 3)\n", tenantTopic, at.Format(dueLayout)),
		s.ok(t, "reschedule", tenantTopic, "--meta", "tenant=globex", "--at", at.Format(time.RFC3339Nano)))
	due := map[string]time.Time{}
	for _, w := range decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic)).Matches {
		due[w.UUID] = w.Due
	}
	for _, id := range m.globex {
		assert.True(t, at.Equal(due[id]), "%s due %s", id, due[id])
	}
	for _, id := range m.acme {
		assert.WithinDuration(t, time.Now(), due[id], 10*time.Minute, "acme left alone")
	}
	assert.Equal(t, fmt.Sprintf("rescheduled 0 waiting messages of topic %q to %s (read 6, matched 0)\n", tenantTopic, at.Format(dueLayout)),
		s.ok(t, "reschedule", tenantTopic, "--meta", "tenant=globex", "--at", at.Format(time.RFC3339Nano)), "already there")

	out := decode[bulkJSON](t, s.ok(t, "--json", "reschedule", tenantTopic, "--key-prefix", "order-", "--in", "2h"))
	require.NotNil(t, out.Due)
	assert.WithinDuration(t, time.Now().Add(2*time.Hour), *out.Due, 10*time.Second)
	assert.Equal(t, bulkJSON{Topic: tenantTopic, Due: out.Due, Scanned: 6, Matched: 2, Done: 2}, out)
	for _, w := range decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic, "--key-prefix", "order-")).Matches {
		assert.True(t, out.Due.Equal(w.Due), "%s due %s", w.UUID, w.Due)
	}
}

// Requeue and delete dead letters by metadata and by the time they died.
func TestBulk_DeadLetters(t *testing.T) {
	s := setupSample(t)
	const tp = "orders.charge"
	s.killTenants(t, tp, 6)

	assert.Equal(t, fmt.Sprintf("would requeue 3 dead letters to group %q of topic %q (read 6); nothing changed: --dry-run\n", group, tp),
		s.ok(t, "requeue", tp, group, "--meta", "tenant=acme", "--dry-run"))
	assert.EqualValues(t, 6, s.stats(t, tp).Groups[0].Dead)
	assert.Equal(t, fmt.Sprintf("requeued 3 dead letters to group %q of topic %q (read 6, matched 3)\n", group, tp),
		s.ok(t, "requeue", tp, group, "--meta", "tenant=acme"))
	g := s.stats(t, tp).Groups[0]
	assert.EqualValues(t, 3, g.Dead)
	assert.EqualValues(t, 3, g.Ready)
	for _, d := range decode[searchJSON[deadJSON]](t, s.ok(t, "--json", "search", tp, "--group", group)).Matches {
		assert.Equal(t, "globex", d.Metadata["tenant"])
	}

	assert.Equal(t, bulkJSON{Topic: tp, Group: group, Scanned: 3, Matched: 3, DryRun: true},
		decode[bulkJSON](t, s.ok(t, "--json", "delete-dead", tp, group, "--meta", "tenant=globex", "--dry-run")))
	assert.Equal(t, fmt.Sprintf("deleted 0 dead letters of group %q in topic %q (read 0, matched 0)\n", group, tp),
		s.ok(t, "delete-dead", tp, group, "--to", "-1h"), "none died an hour ago")
	assert.Equal(t, bulkJSON{Topic: tp, Group: group, Scanned: 3, Matched: 3, Done: 3},
		decode[bulkJSON](t, s.ok(t, "--json", "delete-dead", tp, group, "--from", "-1h")))
	g = s.stats(t, tp).Groups[0]
	assert.EqualValues(t, 0, g.Dead)
	assert.EqualValues(t, 6, g.DeadTotal)

	// --all counts with --dry-run; alone it keeps its output.
	assert.Equal(t, bulkJSON{Topic: topic, Group: group, Scanned: 2, Matched: 2, DryRun: true},
		decode[bulkJSON](t, s.ok(t, "--json", "requeue", topic, group, "--all", "--dry-run")))
	assert.Equal(t, requeueJSON{Topic: topic, Group: group, Requeued: 2, Missing: []string{}},
		decode[requeueJSON](t, s.ok(t, "--json", "requeue", topic, group, "--all")))
}

// --all acts on every waiting message only with --yes; without it, it
// says what it would do and does nothing, as purge does.
func TestBulk_AllGuard(t *testing.T) {
	s := setupSample(t)
	s.publishTenants(t, tenantTopic, 4, 4)
	for _, args := range [][]string{
		{"cancel", tenantTopic, "--all"},
		{"reschedule", tenantTopic, "--all", "--in", "1h"},
	} {
		r := s.cli(t, args...)
		assert.Equal(t, 2, r.code, args)
		assert.Empty(t, r.stdout)
		assert.Contains(t, r.stderr, fmt.Sprintf(`%s: --all would %s every waiting message of topic %q, 4 waiting messages now (see "redisdelay waiting %s"); nothing changed: add --yes to go ahead, or --dry-run to count them`,
			args[0], args[0], tenantTopic, tenantTopic))
		assert.Contains(t, r.stderr, "usage: redisdelay [flags] "+args[0]+" <topic>")
	}
	assert.EqualValues(t, 4, s.stats(t, tenantTopic).Waiting)

	assert.Equal(t, "would cancel 4 waiting messages of topic \"orders.tenants\" (read 4); nothing changed: --dry-run\n",
		s.ok(t, "cancel", tenantTopic, "--all", "--dry-run"))
	assert.EqualValues(t, 4, decode[bulkJSON](t, s.ok(t, "--json", "reschedule", tenantTopic, "--all", "--yes", "--in", "3h")).Done)
	assert.Equal(t, "cancelled 4 waiting messages of topic \"orders.tenants\" (read 4, matched 4)\n",
		s.ok(t, "cancel", tenantTopic, "--all", "--yes"))
	assert.EqualValues(t, 0, s.stats(t, tenantTopic).Waiting)
}

// Mixed forms, missing criteria and malformed filters or cursors are
// usage errors (exit 2) before Redis is asked; a cursor the topic cannot
// have is the Inspector's error (exit 1), and changes nothing.
func TestBulk_UsageErrors(t *testing.T) {
	s := setupSample(t)
	const waitingForms = "a filter (--meta K=V, --key-prefix P, --from T, --to T) or --all"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cancel", topic}, "cancel: give the UUID of the message to cancel, --key K, " + waitingForms},
		{[]string{"cancel", topic, "id", "--meta", "tenant=acme"}, "give a UUID or a filter, not both"},
		{[]string{"cancel", topic, "--key", "k", "--key-prefix", "k"}, "give --key or a filter, not both (--key-prefix selects messages by the start of their business key)"},
		{[]string{"cancel", topic, "--all", "--from", "now"}, "give --all or a filter, not both: --all cancels every waiting message, a filter those it selects"},
		{[]string{"cancel", topic, "id", "--all"}, "--all cancels every waiting message: give it without a UUID or --key"},
		{[]string{"cancel", topic, "id", "--dry-run"}, "--dry-run goes with " + waitingForms + ", not with a UUID or --key"},
		{[]string{"cancel", topic, "--key", "k", "--resume", "0:n:1:x"}, "--resume goes with " + waitingForms + ", not with a UUID or --key"},
		{[]string{"cancel", topic, "id", "--yes"}, "--yes goes with"},
		{[]string{"cancel", topic, "--meta", "tenant"}, `invalid value "tenant" for flag -meta: no '=' in "tenant"`},
		{[]string{"cancel", topic, "--from", "yesterday"}, `--from "yesterday" is not a time`},
		{[]string{"cancel", topic, "--meta", "a=b", "--resume", "nope"}, `--resume "nope" is not a cursor of a bulk action as redisdelay prints them ("bulk:0:near:1382")`},
		{[]string{"cancel", topic, "--meta", "a=b", "--resume", "bulk:0:near:x"}, `--resume "bulk:0:near:x" is not a cursor of a bulk action`},
		{[]string{"cancel", topic, "--meta", "a=b", "--resume", "bulk:0:far:1"}, `--resume "bulk:0:far:1" is not a cursor of a bulk action`},
		{[]string{"reschedule", topic, "--in", "1m"}, "reschedule: give the UUID of the message to reschedule, --key K, " + waitingForms},
		{[]string{"reschedule", topic, "--meta", "a=b"}, "give the new due time: --in D (from now; 0s: now) or --at T (RFC 3339, or now)"},
		{[]string{"reschedule", topic, "--all", "--key-prefix", "o", "--in", "1m"}, "give --all or a filter, not both: --all reschedules every waiting message"},
		{[]string{"requeue", topic, group}, "give the IDs of the dead letters to requeue, " + waitingForms},
		{[]string{"requeue", topic, group, "1-0", "--meta", "a=b"}, "give dead letter IDs or a filter, not both"},
		{[]string{"requeue", topic, group, "--all", "--meta", "a=b"}, "give --all or a filter, not both: --all requeues every dead letter, a filter those it selects"},
		{[]string{"requeue", topic, group, "1-0", "--dry-run"}, "--dry-run goes with " + waitingForms + ", not with dead letter IDs"},
		{[]string{"requeue", topic, group, "--meta", "a=b", "--resume", "0:n:1:x"}, `--resume "0:n:1:x" is not a cursor over dead letters`},
		{[]string{"delete-dead", topic, group, "1-0", "--meta", "a=b"}, "give a dead letter ID or a filter, not both"},
		{[]string{"delete-dead", topic, group, "1-0", "--dry-run"}, "--dry-run goes with a filter (--meta K=V, --key-prefix P, --from T, --to T), not with a dead letter ID"},
		{[]string{"delete-dead", topic, group, "--all"}, "delete-dead has no --all: to delete every dead letter of the group, redisdelay purge <topic> <group> --yes"},
		{[]string{"delete-dead", topic, group, "--to", "+1h", "--from", "+2h"}, "--to +1h is not after --from +2h"},
	} {
		r := s.cli(t, c.args...)
		assert.Equal(t, 2, r.code, c.args)
		assert.Contains(t, r.stderr, c.want, c.args)
		assert.Contains(t, r.stderr, "usage: redisdelay [flags] "+c.args[0]+" <topic>", c.args)
		usageLines(t, r, c.args)
		assert.Empty(t, r.stdout, c.args)
	}

	r := s.cli(t, "cancel", topic, "--meta", "order_id=1001", "--resume", "7:n:1:x")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, `redisdelay: cursor "7:n:1:x" names partition 7, but topic "orders.close-unpaid" has 1: pass the cursor of the previous call unchanged, or "" to start`+"\n", r.stderr)
	r = s.cli(t, "delete-dead", topic, group, "--meta", "fail=yes", "--resume", "4/1-0")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `cursor "4/1-0" is not one a search or bulk action returned`)
	assert.EqualValues(t, 3, s.stats(t, topic).Waiting)
	assert.Len(t, s.deadIDs(t), 2)
}

// cancelOnProgress is the stderr of a run that is interrupted, as SIGINT
// would, once it printed its first progress line.
type cancelOnProgress struct {
	bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnProgress) Write(p []byte) (int, error) {
	if bytes.HasSuffix(p, []byte(" so far\n")) {
		w.cancel()
	}
	return w.Buffer.Write(p)
}

// interrupted runs the command line, with a progress line per batch,
// and interrupts it after the first batch.
func (s sample) interrupted(t *testing.T, args ...string) result {
	t.Helper()
	old := progressInterval
	progressInterval = 0
	defer func() { progressInterval = old }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	errOut := &cancelOnProgress{cancel: cancel}
	args = append([]string{"--addr", redisAddr, "--prefix", s.prefix}, args...)
	code := run(ctx, args, &out, errOut)
	r := result{code, out.String(), errOut.String()}
	t.Logf("redisdelay %s → exit %d\n%s%s", strings.Join(args, " "), code, r.stdout, r.stderr)
	return r
}

// publishMany publishes n messages of tenant "acme" to tp, due in a
// minute and then a millisecond apart, and 10 of tenant "globex".
func (s sample) publishMany(t *testing.T, tp string, n int) {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: s.client, KeyPrefix: s.prefix}, nil)
	require.NoError(t, err)
	defer pub.Close()
	var msgs []*message.Message
	for i := range n + 10 {
		msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
		msg.Metadata.Set("tenant", map[bool]string{true: "acme", false: "globex"}[i < n])
		delay.Message(msg, delay.For(time.Minute+time.Duration(i)*time.Millisecond))
		if msgs = append(msgs, msg); len(msgs) == 1000 || i == n+9 {
			require.NoError(t, pub.Publish(tp, msgs...))
			msgs = nil
		}
	}
}

// An interrupted run prints its counts and the cursor to go on from, and
// exits with status 1; going on from there acts on the rest, and on none
// twice.
func TestBulk_Resume(t *testing.T) {
	s := setupSample(t)
	const tp = "orders.many"
	s.publishMany(t, tp, 2500)

	// Progress lines at most once a second by default: none in a short run.
	r := s.cli(t, "cancel", tp, "--meta", "tenant=acme", "--dry-run")
	assert.Equal(t, 0, r.code)
	assert.Empty(t, r.stderr)

	r = s.interrupted(t, "cancel", tp, "--meta", "tenant=acme", "--json")
	assert.Equal(t, 1, r.code)
	first := decode[bulkJSON](t, r.stdout)
	require.NotEmpty(t, first.Cursor)
	// One batch: the waiting set's ZSCAN takes about 1,000.
	assert.InDelta(t, 1000, first.Scanned, 200, "one batch")
	assert.Equal(t, first.Matched, first.Done)
	assert.Positive(t, first.Done)
	assert.Equal(t, fmt.Sprintf("redisdelay: cancel: read %d, matched %d, cancelled %d so far\n"+
		"redisdelay: cancel stopped (interrupted): read %d, matched %d, cancelled %d; to go on, run the same command with --resume %s\n",
		first.Scanned, first.Matched, first.Done, first.Scanned, first.Matched, first.Done, first.Cursor), r.stderr)
	assert.EqualValues(t, 2510-first.Done, s.stats(t, tp).Waiting)

	rest := decode[bulkJSON](t, s.ok(t, "cancel", tp, "--meta", "tenant=acme", "--resume", first.Cursor, "--json"))
	assert.Empty(t, rest.Cursor)
	assert.EqualValues(t, 2500, first.Done+rest.Done)
	assert.EqualValues(t, 10, s.stats(t, tp).Waiting, "the other tenant's are left")

	// reschedule --in goes on with the instant of the first run, so the
	// messages it moved past the cursor are not moved again.
	const later = "orders.later"
	s.publishMany(t, later, 2500)
	r = s.interrupted(t, "reschedule", later, "--meta", "tenant=acme", "--in", "10m")
	assert.Equal(t, 1, r.code)
	assert.Empty(t, r.stdout)
	m := regexp.MustCompile(`--resume (\S+) and --at (\S+) in place of --in 10m0s\n$`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r.stderr)
	moved := regexp.MustCompile(`rescheduled (\d+); to go on`).FindStringSubmatch(r.stderr)
	require.NotNil(t, moved, r.stderr)
	at, err := time.Parse(time.RFC3339Nano, m[2])
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(10*time.Minute), at, 10*time.Second)
	rest = decode[bulkJSON](t, s.ok(t, "reschedule", later, "--meta", "tenant=acme", "--at", m[2], "--resume", m[1], "--json"))
	assert.Empty(t, rest.Cursor)
	assert.Equal(t, fmt.Sprint(2500-rest.Done), moved[1], "each moved once")
	assert.Equal(t, rest.Matched, rest.Done)
	all := decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", later, "--meta", "tenant=acme", "--limit", "10000"))
	require.Len(t, all.Matches, 2500)
	for _, w := range all.Matches {
		require.True(t, at.Equal(w.Due), "%s due %s", w.UUID, w.Due)
	}
}
