package store

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// The scripts of groups (fair.lua and those including it) driven directly
// on a real server: after every step, fairEnv.check reads the consumer
// group's fair queues, its redelivery stream and its retry set and checks
// fair.lua's invariants (see its header, and check).

// fairMsg is a message published by the tests: in group (SetGroup's
// group), or with the keep-last-if-active business key key (its group is
// then "\x01" + key), high-priority or not.
type fairMsg struct {
	payload string
	group   string
	key     string
	high    bool
	delay   time.Duration
	uuid    string // set by publish
}

// fairGroup is the group fair.lua queues the message in.
func (m fairMsg) fairGroup() string {
	if m.key != "" {
		return "\x01" + m.key
	}
	return m.group
}

// fairPolicy is a consumer group's policy as init.lua stores it.
type fairPolicy struct {
	cap     int    // gcap
	rate    string // grate, "<n>/<per ms>"
	vis     int64  // ms
	max     int    // attempts
	backoff string // ms per attempt, comma-separated
}

// group is the policy as InitGroup stores it.
func (p fairPolicy) group() GroupPolicy {
	g := GroupPolicy{MaxAttempts: p.max, Visibility: time.Duration(p.vis) * time.Millisecond, IdleTimeout: time.Hour, Concurrency: p.cap}
	if n, per, ok := strings.Cut(p.rate, "/"); ok {
		g.RateMessages, _ = strconv.Atoi(n)
		ms, _ := strconv.Atoi(per)
		g.RatePer = time.Duration(ms) * time.Millisecond
	}
	for _, d := range strings.Split(p.backoff, ",") {
		if ms, err := strconv.Atoi(d); err == nil {
			g.RetryDelays = append(g.RetryDelays, time.Duration(ms)*time.Millisecond)
		}
	}
	return g
}

// fairEnv is one consumer group ("cg") of one partition on a server of its own.
type fairEnv struct {
	t      *testing.T
	ctx    context.Context
	c      *redis.Client
	sh     Shard
	cg     string
	policy fairPolicy
	before int64             // Redis's ms clock before the last step (see check)
	prev   map[string]string // the groups' states as the last check read them
}

func newFairEnv(t *testing.T, p fairPolicy) *fairEnv {
	t.Helper()
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	e := &fairEnv{t: t, ctx: context.Background(), c: c, sh: Keys{Prefix: "fair"}.Shard("t", 0), cg: "cg", policy: p}
	loadScripts(t, c)
	e.init()
	return e
}

func (e *fairEnv) init() {
	e.t.Helper()
	if e.policy.vis == 0 {
		e.policy.vis = 60_000
	}
	_, err := InitGroup(e.ctx, e.c, e.sh, e.cg, e.policy.group())
	require.NoError(e.t, err)
}

// nowMs is Redis's clock in ms.
func (e *fairEnv) nowMs() int64 {
	e.t.Helper()
	now, err := e.c.Time(e.ctx).Result()
	require.NoError(e.t, err)
	return now.UnixMilli()
}

// step notes Redis's clock before a step (see checkFair's limiter check).
func (e *fairEnv) step() { e.before = e.nowMs() }

// publish publishes msgs in one call, setting their UUIDs.
func (e *fairEnv) publish(msgs ...*fairMsg) {
	e.t.Helper()
	e.step()
	call := &fairCall{}
	for _, m := range msgs {
		m.uuid = watermill.NewUUID()
		msg := message.NewMessage(m.uuid, []byte(m.payload))
		keyArg := ""
		if m.key != "" {
			keyArg = "l" + m.key
		} else {
			msg.Metadata.Set("_redisdelay_group", m.group)
		}
		prio := "0"
		if m.high {
			prio = "1"
		}
		call.Args = append(call.Args, m.uuid, m.delay.Milliseconds(), Encode(msg), keyArg, prio, m.fairGroup())
		call.Far = append(call.Far, FarArgOf(m.uuid, m.delay, !m.high && keyArg == ""))
		call.N++
	}
	r, err := Publish(e.ctx, e.c, e.sh, PublishOpts{}, []*fairCall{call})
	require.NoError(e.t, err)
	require.EqualValues(e.t, 0, r.Statuses[0], "publish")
}

// promote runs promote.lua until nothing more is due within a few ms (a
// message published due now is due at the next ms: publish rounds its
// clock up).
func (e *fairEnv) promote() {
	e.t.Helper()
	for range 1000 {
		e.step()
		r, err := Promote(e.ctx, e.c, e.sh, []string{e.cg}, 256, "owner", time.Minute, true, true)
		require.NoError(e.t, err)
		require.True(e.t, r.Held)
		e.check("promote")
		if r.Wait < 0 || r.Wait > 5000 {
			return
		}
		time.Sleep(time.Duration(r.Wait) * time.Microsecond)
	}
	e.t.Fatal("promote: always more due")
}

// fairGot is a redelivery entry a consumer read.
type fairGot struct {
	id, payload, group, body string
	attempt                  int
}

func (e *fairEnv) entries(streams []Batch) []fairGot {
	e.t.Helper()
	var got []fairGot
	for _, s := range streams {
		for _, m := range s.Entries {
			require.Equal(e.t, e.sh.Redelivery(e.cg), s.Stream, "grouped messages come from the redelivery stream")
			body, _ := m.Values["m"].(string)
			msg, err := Decode([]byte(body))
			require.NoError(e.t, err)
			a, _ := strconv.Atoi(fmt.Sprint(m.Values["a"]))
			k, _ := m.Values["k"].(string)
			got = append(got, fairGot{id: m.ID, payload: string(msg.Payload), group: k, body: body, attempt: a})
		}
	}
	return got
}

// pick picks up to count messages and reads them as consumer (pick.lua
// and XREADGROUP in one pipeline, as a grouped subscription does).
func (e *fairEnv) pick(consumer string, count int) ([]fairGot, PickReply) {
	e.t.Helper()
	e.step()
	r, err := ReadNew(e.ctx, e.c, e.sh, ReadArgs{Group: e.cg, Consumer: consumer, Count: count, Pick: true})
	require.NoError(e.t, err)
	e.check("pick")
	return e.entries(r.Streams), r.Pick
}

// read reads as consumer as an idle subscription does: it arms the bell,
// picks and reads.
func (e *fairEnv) read(consumer string, count int) ([]fairGot, ReadReply) {
	e.t.Helper()
	r, err := e.tryRead(consumer, count)
	require.NoError(e.t, err)
	return e.entries(r.Streams), r
}

func (e *fairEnv) tryRead(consumer string, count int) (ReadReply, error) {
	e.t.Helper()
	e.step()
	r, err := ReadNew(e.ctx, e.c, e.sh, ReadArgs{Group: e.cg, Consumer: consumer, Count: count, Pick: true, Arm: true})
	e.check("read")
	return r, err
}

// pendingOf is what consumer holds in the redelivery stream.
func (e *fairEnv) pendingOf(consumer string) []string {
	e.t.Helper()
	p, err := e.c.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: e.sh.Redelivery(e.cg), Group: e.cg, Start: "-", End: "+", Count: 100_000, Consumer: consumer}).Result()
	require.NoError(e.t, err)
	ids := make([]string, len(p))
	for i, x := range p {
		ids[i] = x.ID
	}
	return ids
}

func (e *fairEnv) ack(got ...fairGot) {
	e.t.Helper()
	e.step()
	ids := make([]string, len(got))
	for i, g := range got {
		ids[i] = g.id
	}
	r := Ack(e.ctx, e.c, e.sh, e.cg, nil, ids)
	require.NoError(e.t, r.RedoErr)
	require.EqualValues(e.t, len(got), r.Redo, "acked")
	e.check("ack")
}

// nack nacks a message read: requeued after delay, or buried when reason
// is set. It returns nack.lua's status.
func (e *fairEnv) nack(g fairGot, delay time.Duration, reason string) NackStatus {
	e.t.Helper()
	e.step()
	r, err := Nack(e.ctx, e.c, e.sh, NackArgs{Group: e.cg, Stream: e.sh.Redelivery(e.cg), Id: g.id, Redo: true,
		Attempt: g.attempt, Delay: delay, Body: []byte(g.body), Reason: reason})
	require.NoError(e.t, err)
	e.check("nack")
	return r.Status
}

// release hands back what consumer holds, batch entries a call.
func (e *fairEnv) release(consumer string, batch int) int64 {
	e.t.Helper()
	var n int64
	for range 1000 {
		e.step()
		r, err := Release(e.ctx, e.c, e.sh, e.cg, consumer, batch, "", "")
		require.NoError(e.t, err)
		e.check("release")
		n += r.Released
		if r.Done {
			return n
		}
	}
	e.t.Fatal("release never done")
	return n
}

// reclaim runs a reclaim sweep, batch entries a call.
func (e *fairEnv) reclaim(batch int) ReclaimReply {
	e.t.Helper()
	var sum ReclaimReply
	pos := ReclaimStart
	for range 1000 {
		e.step()
		r, err := Reclaim(e.ctx, e.c, e.sh, e.cg, batch, false, pos)
		require.NoError(e.t, err)
		e.check("reclaim")
		sum.Requeued += r.Requeued
		sum.Buried += r.Buried
		sum.Missing += r.Missing
		if r.Next.Stream == 0 {
			return sum
		}
		pos = r.Next
	}
	e.t.Fatal("reclaim never done")
	return sum
}

func (e *fairEnv) requeue(limit int) int {
	e.t.Helper()
	e.step()
	n, err := Requeue(e.ctx, e.c, e.sh, e.cg, limit, nil)
	require.NoError(e.t, err)
	e.check("requeue")
	return n
}

// fairState is a group's state in the fq hash (see fair.lua).
type fairState struct {
	f, r, h, t, ph, pt, d, P int64
	tat                      float64
}

func (s fairState) queued() int64 { return s.t - s.h + s.pt - s.ph }

// fairView is what checkFair reads of a consumer group's fair queues.
type fairView struct {
	states map[string]fairState
	fields map[string][]string // group -> the suffixes of its queue fields ("3", "p0", ...)
	bodies map[string]string   // queue field -> attempt and message
	n      int64               // the "\x00n" field; -1 when absent
	ring   []string
	prio   []string
	wait   map[string]float64
	raw    map[string]string // group -> its state as stored
	exists bool
}

func (e *fairEnv) view() fairView {
	e.t.Helper()
	v := fairView{states: map[string]fairState{}, raw: map[string]string{}, fields: map[string][]string{}, bodies: map[string]string{}, n: -1, wait: map[string]float64{}}
	all, err := e.c.HGetAll(e.ctx, e.sh.Fair(e.cg)).Result()
	require.NoError(e.t, err)
	v.exists = len(all) > 0
	for k, val := range all {
		if k == fairQueued {
			v.n, err = strconv.ParseInt(val, 10, 64)
			require.NoError(e.t, err, "the queued count %q", val)
			continue
		}
		g, suffix, isField := strings.Cut(k, "\x00")
		if isField {
			v.fields[g] = append(v.fields[g], suffix)
			v.bodies[k] = val
			continue
		}
		v.raw[g] = val
		parts := strings.Split(val, ",")
		require.Len(e.t, parts, 9, "state of group %q: %q", g, val)
		var s fairState
		ints := []*int64{&s.f, &s.r, &s.h, &s.t, &s.ph, &s.pt, &s.d, &s.P}
		for i, p := range ints {
			*p, err = strconv.ParseInt(parts[i], 10, 64)
			require.NoError(e.t, err, "state of group %q: %q", g, val)
		}
		s.tat, err = strconv.ParseFloat(parts[8], 64)
		require.NoError(e.t, err, "state of group %q: %q", g, val)
		v.states[g] = s
	}
	v.ring, err = e.c.LRange(e.ctx, e.sh.fairRing(e.cg), 0, -1).Result()
	require.NoError(e.t, err)
	v.prio, err = e.c.LRange(e.ctx, e.sh.fairPrio(e.cg), 0, -1).Result()
	require.NoError(e.t, err)
	zs, err := e.c.ZRangeWithScores(e.ctx, e.sh.fairWait(e.cg), 0, -1).Result()
	require.NoError(e.t, err)
	for _, z := range zs {
		v.wait[z.Member.(string)] = z.Score
	}
	return v
}

// inFlight counts, per group, the grouped messages in the redelivery
// stream (picked: unread or pending; settled entries are deleted) and in
// the retry set (members "<attempt>:g<entry id>:<group>").
func (e *fairEnv) inFlight() map[string]int64 {
	e.t.Helper()
	n := map[string]int64{}
	entries, err := e.c.XRange(e.ctx, e.sh.Redelivery(e.cg), "-", "+").Result()
	require.NoError(e.t, err)
	for _, m := range entries {
		if k, ok := m.Values["k"].(string); ok {
			n[k]++
		}
	}
	members, err := e.c.ZRange(e.ctx, e.sh.Retry(e.cg), 0, -1).Result()
	require.NoError(e.t, err)
	for _, m := range members {
		_, rest, _ := strings.Cut(m, ":")
		if !strings.HasPrefix(rest, "g") {
			continue
		}
		_, g, ok := strings.Cut(rest, ":")
		require.True(e.t, ok, "grouped retry member %q", m)
		n[g]++
	}
	return n
}

// capOf is the most messages of group g in flight (0: no cap).
func (e *fairEnv) capOf(g string) int64 {
	if strings.HasPrefix(g, "\x01") {
		return 1
	}
	return int64(e.policy.cap)
}

// check checks fair.lua's invariants after step:
//   - a group's queue fields are exactly <g>\0<h> .. <g>\0<t-1> and
//     <g>\0p<ph> .. <g>\0p<pt-1>, and "\0n" counts the fields of all groups
//     (absent at 0); every field belongs to a group with a state;
//   - each group at most once in the ring and in fprio; the ring holds
//     exactly the groups with r = 1, fprio those with P = 1, fwait those
//     with r = 2;
//   - f is the group's entries in the redelivery stream (unread or
//     pending) plus its grouped retries; at most its cap;
//   - a group holding nothing (f, r, P, nothing queued) whose state the
//     step wrote had a rate limiter that had not caught up when the step
//     began (else fair_close deletes the state);
//   - a group with messages queued and a free slot is in the ring or asleep
//     (else nothing would ever serve it);
//   - d is -1 but for a keep-last-if-active group, whose d is -1 or in its
//     queue.
func (e *fairEnv) check(step string) {
	e.t.Helper()
	v := e.view()
	fail := func(format string, args ...any) {
		e.t.Helper()
		e.t.Fatalf("after %s: "+format, append([]any{step}, args...)...)
	}
	var total int64
	for g, suffixes := range v.fields {
		s, ok := v.states[g]
		if !ok {
			fail("queue fields %q of group %q, which has no state", suffixes, g)
		}
		var want []string
		for i := s.h; i < s.t; i++ {
			want = append(want, strconv.FormatInt(i, 10))
		}
		for i := s.ph; i < s.pt; i++ {
			want = append(want, "p"+strconv.FormatInt(i, 10))
		}
		got := slices.Clone(suffixes)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			fail("group %q (state %+v) has queue fields %q, want %q", g, s, got, want)
		}
		total += int64(len(suffixes))
	}
	for g, s := range v.states {
		if _, ok := v.fields[g]; !ok && s.queued() != 0 {
			fail("group %q (state %+v) queues %d messages but has no queue field", g, s, s.queued())
		}
	}
	switch {
	case total == 0 && v.n != -1:
		fail("\\0n is %d with no message queued", v.n)
	case total > 0 && v.n != total:
		fail("\\0n is %d, the groups' queue fields %d", v.n, total)
	}

	member := func(list []string, what string) map[string]bool {
		seen := map[string]bool{}
		for _, g := range list {
			if seen[g] {
				fail("group %q twice in %s %q", g, what, list)
			}
			seen[g] = true
			if _, ok := v.states[g]; !ok {
				fail("group %q in %s has no state", g, what)
			}
		}
		return seen
	}
	inRing, inPrio := member(v.ring, "the ring"), member(v.prio, "fprio")
	for g := range v.wait {
		if _, ok := v.states[g]; !ok {
			fail("group %q in fwait has no state", g)
		}
	}
	flight := e.inFlight()
	for g, n := range flight {
		if _, ok := v.states[g]; !ok {
			fail("group %q has %d messages in flight and no state", g, n)
		}
	}
	for g, s := range v.states {
		if s.r < 0 || s.r > 2 || s.P < 0 || s.P > 1 || s.h > s.t || s.ph > s.pt || s.f < 0 {
			fail("group %q: bad state %+v", g, s)
		}
		if (s.r == 1) != inRing[g] {
			fail("group %q: r = %d, in the ring: %v (ring %q)", g, s.r, inRing[g], v.ring)
		}
		if (s.P == 1) != inPrio[g] {
			fail("group %q: P = %d, in fprio: %v (fprio %q)", g, s.P, inPrio[g], v.prio)
		}
		// In fwait: asleep over its rate (r = 2), or holding nothing until
		// its limiter catches up (then fair_close deletes it), by then.
		idle := s.f == 0 && s.r == 0 && s.P == 0 && s.queued() == 0
		if at, inWait := v.wait[g]; s.r == 2 && !inWait || s.r != 2 && inWait && !(idle && at == math.Ceil(s.tat)) {
			fail("group %q: r = %d, in fwait: %v (at %.0f, state %+v)", g, s.r, inWait, at, s)
		}
		if idle && s.tat > float64(e.nowMs()) {
			if _, inWait := v.wait[g]; !inWait {
				fail("group %q holds nothing, its limiter catches up at %.3f, but it is not in fwait to be deleted then", g, s.tat)
			}
		}
		if s.f != flight[g] {
			fail("group %q: f = %d, but %d of its messages are in the redelivery stream or the retry set", g, s.f, flight[g])
		}
		limit := e.capOf(g)
		if limit > 0 && s.f > limit {
			fail("group %q: %d in flight over its cap %d", g, s.f, limit)
		}
		// (a state the step did not write is left to
		// TestFair_RateLimitedStateGoesOnceCaughtUp)
		if s.f == 0 && s.r == 0 && s.P == 0 && s.queued() == 0 && s.tat <= float64(e.before) && e.prev[g] != v.raw[g] {
			fail("group %q holds nothing and its limiter caught up (tat %.3f, step began at %d), yet its state %+v was written", g, s.tat, e.before, s)
		}
		if s.queued() > 0 && s.r == 0 && (limit == 0 || s.f < limit) {
			fail("group %q queues %d messages with a free slot (f = %d) but is neither in the ring nor asleep: %+v", g, s.queued(), s.f, s)
		}
		if strings.HasPrefix(g, "\x01") {
			if s.d != -1 && (s.d < s.h || s.d >= s.t) {
				fail("keep-last-if-active group %q: d = %d outside its queue [%d, %d)", g, s.d, s.h, s.t)
			}
			if s.pt != s.ph {
				fail("keep-last-if-active group %q has high-priority messages queued", g)
			}
		} else if s.d != -1 {
			fail("group %q: d = %d, want -1 (not keep-last-if-active)", g, s.d)
		}
	}
	e.prev = v.raw
}

// settled checks that nothing of the fair queues is left.
func (e *fairEnv) settled() {
	e.t.Helper()
	n, err := e.c.Exists(e.ctx, e.sh.Fair(e.cg), e.sh.fairRing(e.cg), e.sh.fairPrio(e.cg), e.sh.fairWait(e.cg)).Result()
	require.NoError(e.t, err)
	if n != 0 {
		v := e.view()
		e.t.Fatalf("settled, yet %d fair queue keys are left: states %+v, ring %q, fprio %q, fwait %v", n, v.states, v.ring, v.prio, v.wait)
	}
}

func payloads(got []fairGot) []string {
	p := make([]string, len(got))
	for i, g := range got {
		p[i] = g.payload
	}
	return p
}

// msgs makes n messages of group g, payloads g1 .. gn.
func msgs(g string, n int) []*fairMsg {
	var m []*fairMsg
	for i := 1; i <= n; i++ {
		m = append(m, &fairMsg{payload: g + strconv.Itoa(i), group: g})
	}
	return m
}

// Round robin: one message per group per turn of the ring, in the order
// the groups' first messages fell due, whatever each group's backlog; a
// group leaves the ring when its queue is empty.
func TestFair_RoundRobin(t *testing.T) {
	for _, count := range []int{1, 9} {
		t.Run("count "+strconv.Itoa(count), func(t *testing.T) {
			e := newFairEnv(t, fairPolicy{})
			e.publish(slices.Concat(msgs("A", 4), msgs("B", 2), msgs("C", 3))...)
			e.promote()
			v := e.view()
			require.Equal(t, []string{"A", "B", "C"}, v.ring)
			require.EqualValues(t, 9, v.n)
			var order []string
			for range 20 {
				got, r := e.pick("c", count)
				order = append(order, payloads(got)...)
				if !r.More {
					break
				}
			}
			require.Equal(t, []string{"A1", "B1", "C1", "A2", "B2", "C2", "A3", "C3", "A4"}, order)
			v = e.view()
			require.Empty(t, v.ring)
			require.EqualValues(t, -1, v.n, "nothing queued: no count")
			for _, g := range []string{"A", "B", "C"} {
				require.EqualValues(t, map[string]int64{"A": 4, "B": 2, "C": 3}[g], v.states[g].f, g)
			}
			got, _ := e.read("c", 10)
			require.Empty(t, got)
			for _, id := range e.pendingOf("c") {
				e.ack(fairGot{id: id})
			}
			e.settled()
		})
	}
}

// A group joining while the ring turns goes to the back of the ring; a
// group that was emptied and gets messages again joins at the back.
func TestFair_RingJoinsAtTheBack(t *testing.T) {
	e := newFairEnv(t, fairPolicy{})
	e.publish(slices.Concat(msgs("A", 3), msgs("B", 1))...)
	e.promote()
	got, _ := e.pick("c", 2)
	require.Equal(t, []string{"A1", "B1"}, payloads(got))
	e.publish(&fairMsg{payload: "C1", group: "C"}, &fairMsg{payload: "B2", group: "B"})
	e.promote()
	require.Equal(t, []string{"A", "C", "B"}, e.view().ring)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A2", "C1", "B2", "A3"}, payloads(got))
	e.ack(got...)
	for _, id := range e.pendingOf("c") {
		e.ack(fairGot{id: id})
	}
	e.settled()
}

// A grouped message waits in the waiting set until due, then goes to the
// back of its group; a consumer group whose subscribers do not read groups
// (no gv in its meta hash: an older version) gets it in its redelivery
// stream instead, as an ungrouped redelivery (no field k).
func TestFair_DueOrderAndOlderSubscribers(t *testing.T) {
	e := newFairEnv(t, fairPolicy{})
	old := "old"
	_, err := e.c.SAdd(e.ctx, e.sh.Groups(), old).Result()
	require.NoError(t, err)
	for _, key := range []string{e.sh.Stream(), e.sh.Redelivery(old)} {
		require.NoError(t, e.c.XGroupCreateMkStream(e.ctx, key, old, "0").Err())
	}
	require.NoError(t, e.c.HSet(e.ctx, e.sh.Meta(old), "vis", 60_000).Err())
	e.publish(&fairMsg{payload: "A1", group: "A", delay: 300 * time.Millisecond}, &fairMsg{payload: "A2", group: "A"})
	promote := func() {
		r, err := Promote(e.ctx, e.c, e.sh, []string{e.cg, old}, 256, "owner", time.Minute, true, true)
		require.NoError(t, err)
		e.check("promote")
		if r.Wait > 0 && r.Wait < 5000 {
			time.Sleep(time.Duration(r.Wait) * time.Microsecond)
			_, err = Promote(e.ctx, e.c, e.sh, []string{e.cg, old}, 256, "owner", time.Minute, true, true)
			require.NoError(t, err)
			e.check("promote")
		}
	}
	promote()
	require.EqualValues(t, 1, e.view().n, "A1 is not due yet")
	time.Sleep(320 * time.Millisecond)
	promote()
	got, _ := e.pick("c", 10)
	require.Equal(t, []string{"A2", "A1"}, payloads(got), "in due order")
	entries, err := e.c.XRange(e.ctx, e.sh.Redelivery(old), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 2)
	for _, m := range entries {
		require.NotContains(t, m.Values, "k")
		require.Equal(t, "1", m.Values["a"])
	}
	require.Zero(t, e.c.Exists(e.ctx, e.sh.Fair(old)).Val())
	e.ack(got...)
	e.settled()
}

// Where a message handed back goes in its group: nacked without delay,
// released (Close) or reclaimed, to the front (next in its group); nacked
// with a delay, to the retry set keeping its slot, then to the front when
// due; buried, nowhere (slot given back); requeued from the dead letters,
// to the back.
func TestFair_FrontAndBack(t *testing.T) {
	e := newFairEnv(t, fairPolicy{cap: 1, vis: 100, max: 3})
	e.publish(slices.Concat(msgs("A", 3), msgs("B", 2))...)
	e.promote()

	got, _ := e.pick("c", 10)
	require.Equal(t, []string{"A1", "B1"}, payloads(got))
	a1 := got[0]

	// nack without delay: front of A, slot given back
	require.EqualValues(t, 1, e.nack(a1, 0, ""))
	require.Equal(t, []string{"A"}, e.view().ring)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A1"}, payloads(got))
	require.Equal(t, 2, got[0].attempt)
	a1 = got[0]

	// nack with a delay: retry set, the slot kept; front once due
	require.EqualValues(t, 1, e.nack(a1, 40*time.Millisecond, ""))
	v := e.view()
	require.EqualValues(t, 1, v.states["A"].f, "a retry keeps its group's slot")
	require.Empty(t, v.ring)
	got, _ = e.pick("c", 10)
	require.Empty(t, got, "A's slot is taken by its retry, B's by B1")
	time.Sleep(60 * time.Millisecond)
	e.promote()
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A1"}, payloads(got), "the retry is next in its group")
	require.Equal(t, 3, got[0].attempt)
	a1 = got[0]

	// buried: slot given back, A2 next; requeued: to the back of A
	require.EqualValues(t, 2, e.nack(a1, 0, "failed"))
	dead, err := e.c.XRange(e.ctx, e.sh.Dead(e.cg), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "A", dead[0].Values["k"], "a dead letter names its group")
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A2"}, payloads(got))
	a2 := got[0]
	require.Equal(t, 1, e.requeue(10))
	e.ack(a2)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A3"}, payloads(got), "a requeued dead letter goes to the back of its group")
	e.ack(got...)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A1"}, payloads(got))
	require.Equal(t, 1, got[0].attempt, "requeued as attempt 1")
	a1 = got[0]

	// released (Close): to the front, slots given back; the consumer goes
	require.EqualValues(t, 2, e.release("c", 1))
	require.ElementsMatch(t, []string{"A", "B"}, e.view().ring)
	got, _ = e.pick("d", 10)
	require.ElementsMatch(t, []string{"A1", "B1"}, payloads(got), "released messages are next in their groups")
	for _, g := range got {
		require.Equal(t, map[string]int{"A1": 1, "B1": 1}[g.payload], g.attempt, "a released message keeps its attempt")
	}

	// reclaimed (visibility timeout 100 ms, no backoff): to the front
	time.Sleep(150 * time.Millisecond)
	r := e.reclaim(1)
	require.EqualValues(t, 2, r.Requeued)
	got, _ = e.pick("c", 10)
	require.ElementsMatch(t, []string{"A1", "B1"}, payloads(got))
	for _, g := range got {
		require.Equal(t, 2, g.attempt)
	}
	// reclaimed out of attempts (max 3): buried, slot given back
	time.Sleep(150 * time.Millisecond)
	e.reclaim(1000)
	got, _ = e.pick("c", 10)
	require.ElementsMatch(t, []string{"A1", "B1"}, payloads(got))
	time.Sleep(150 * time.Millisecond)
	r = e.reclaim(1000)
	require.EqualValues(t, 2, r.Buried)
	got, _ = e.pick("c", 10)
	require.ElementsMatch(t, []string{"B2"}, payloads(got))
	e.ack(got...)
	require.Equal(t, 2, e.requeue(10))
	for range 10 {
		got, r := e.pick("c", 10)
		e.ack(got...)
		if !r.More && len(got) == 0 {
			break
		}
	}
	e.settled()
}

// Keep last if active: the business key is the group "\x01<key>", cap 1
// whatever the consumer group's cap, and at most one fresh message queued,
// replaced by each newer one; a retry of the active one goes in front of
// it.
func TestFair_KeepLastIfActive(t *testing.T) {
	e := newFairEnv(t, fairPolicy{})
	k := func(p string) *fairMsg { return &fairMsg{payload: p, key: "order-7"} }
	g := "\x01order-7"
	// while waiting, a newer message replaces the waiting one
	e.publish(k("k1"))
	e.publish(k("k2"))
	n, err := e.c.ZCard(e.ctx, e.sh.Waiting()).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	e.promote()
	v := e.view()
	require.EqualValues(t, 1, v.n)
	require.Equal(t, []string{g}, v.ring)

	got, _ := e.pick("c", 10)
	require.Equal(t, []string{"k2"}, payloads(got))
	k2 := got[0]
	require.Equal(t, g, k2.group)

	// active: one fresh message queued, replaced by newer ones
	e.publish(k("k3"))
	e.promote()
	v = e.view()
	require.EqualValues(t, 1, v.n)
	require.Equal(t, v.states[g].h, v.states[g].d, "d names the fresh message")
	require.Empty(t, v.ring, "cap 1: not served while k2 is active")
	e.publish(k("k4"))
	e.promote()
	e.publish(k("k5"))
	e.promote()
	v = e.view()
	require.EqualValues(t, 1, v.n, "each newer message replaces the queued one")
	got, _ = e.pick("c", 10)
	require.Empty(t, got)

	// a retry of the active message goes in front of the fresh one
	require.EqualValues(t, 1, e.nack(k2, 0, ""))
	v = e.view()
	require.EqualValues(t, 2, v.n)
	e.publish(k("k6"))
	e.promote()
	require.EqualValues(t, 2, e.view().n, "the fresh one is replaced, the retry kept")
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"k2"}, payloads(got))
	require.Equal(t, 2, got[0].attempt)
	e.ack(got...)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"k6"}, payloads(got))
	v = e.view()
	require.EqualValues(t, -1, v.states[g].d, "no fresh message queued")
	e.publish(k("k7"))
	e.promote()
	e.ack(got...)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"k7"}, payloads(got))
	e.ack(got...)
	e.settled()
}

// Caps: a capped group gets at most one message per pick call, leaves the
// ring once its slots are taken and rejoins (at the back) when one is
// given back.
func TestFair_Caps(t *testing.T) {
	t.Run("cap 1", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{cap: 1})
		e.publish(slices.Concat(msgs("A", 3), msgs("B", 3), msgs("C", 3))...)
		e.promote()
		got, r := e.pick("c", 10)
		require.Equal(t, []string{"A1", "B1", "C1"}, payloads(got))
		require.False(t, r.More, "every group's slot is taken")
		require.Empty(t, e.view().ring)
		first := got
		got, _ = e.pick("c", 10)
		require.Empty(t, got)
		e.ack(first[1])
		require.Equal(t, []string{"B"}, e.view().ring)
		got, _ = e.pick("c", 10)
		require.Equal(t, []string{"B2"}, payloads(got))
		e.ack(first[2])
		e.ack(first[0])
		require.Equal(t, []string{"C", "A"}, e.view().ring)
		got, _ = e.pick("c", 10)
		require.Equal(t, []string{"C2", "A2"}, payloads(got))
	})
	t.Run("cap 2", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{cap: 2})
		e.publish(slices.Concat(msgs("A", 3), msgs("B", 3), msgs("C", 1))...)
		e.promote()
		got, r := e.pick("c", 10)
		require.Equal(t, []string{"A1", "B1", "C1"}, payloads(got), "one message per capped group per call")
		require.True(t, r.More)
		// The lap ended at A, moved to the back of the ring: B goes first.
		got, r = e.pick("c", 10)
		require.Equal(t, []string{"B2", "A2"}, payloads(got))
		require.False(t, r.More)
		require.Empty(t, e.view().ring)
		e.ack(got[1])
		got, _ = e.pick("c", 10)
		require.Equal(t, []string{"A3"}, payloads(got))
		require.Empty(t, e.view().ring, "A emptied")
	})
}

// The rate limiter (GCRA, n messages per period): a group takes a burst of
// n, then one every period/n; over its rate it sleeps in fwait, and the
// pick tells when the first sleeper wakes.
func TestFair_RateLimit(t *testing.T) {
	e := newFairEnv(t, fairPolicy{rate: "2/600"}) // emission interval 300 ms
	e.publish(slices.Concat(msgs("A", 5), msgs("B", 1))...)
	e.promote()
	start := e.nowMs()
	got, r := e.pick("c", 10)
	end := e.nowMs()
	require.Equal(t, []string{"A1", "B1", "A2"}, payloads(got), "a burst of 2")
	v := e.view()
	require.Contains(t, v.wait, "A")
	require.Empty(t, v.ring)
	require.False(t, r.More)
	wake := r.Wake.UnixMilli()
	require.GreaterOrEqual(t, wake, start+300, "A may take its next message 300 ms after its first")
	require.LessOrEqual(t, wake, end+300)
	require.EqualValues(t, wake, v.wait["A"])
	got, r = e.pick("c", 10)
	require.Empty(t, got, "asleep")
	require.Equal(t, wake, r.Wake.UnixMilli())

	// Then one message every 300 ms: each pick after the wake-up takes
	// one, and A sleeps 300 ms more.
	for round := range 3 {
		for e.nowMs() < wake {
			time.Sleep(time.Until(time.UnixMilli(wake)) + time.Millisecond)
		}
		got, r = e.pick("c", 10)
		require.Len(t, got, 1, "one message per emission interval")
		if round == 2 {
			break // A emptied
		}
		require.InDelta(t, wake+300, r.Wake.UnixMilli(), 1, "the next 300 ms later")
		wake = r.Wake.UnixMilli()
		if e.nowMs() < wake {
			got, _ = e.pick("c", 10)
			require.Empty(t, got, "asleep until then")
		}
	}
	got, r = e.pick("c", 10)
	require.Empty(t, got)
	require.True(t, r.Wake.IsZero(), "nothing asleep: A emptied")
	for _, id := range e.pendingOf("c") {
		e.ack(fairGot{id: id})
	}
}

// A rate-limited group holding nothing keeps its state only while its
// limiter has not caught up: once everything is settled and the period
// has passed, the consumer group's fair queues are gone (fair.lua's header:
// "the hash holds only active groups"; Inspector's ActiveGroups counts the
// states).
func TestFair_RateLimitedStateGoesOnceCaughtUp(t *testing.T) {
	e := newFairEnv(t, fairPolicy{rate: "1/1000"})
	e.publish(msgs("A", 1)...)
	e.promote()
	got, _ := e.pick("c", 10)
	require.Len(t, got, 1)
	e.ack(got...)
	require.Contains(t, e.view().states, "A", "acknowledged within A's emission interval: its state is kept for the limiter")
	time.Sleep(1100 * time.Millisecond)
	// What a subscription does next: its reads pick (nothing to pick).
	_, r := e.read("c", 10)
	_, _ = e.pick("c", 10)
	st, err := PartitionStats(e.ctx, e.c, e.sh)
	require.NoError(t, err)
	t.Logf("the read's pick says more = %v, wake = %v; ActiveGroups %d, Grouped %d", r.Pick.More, r.Pick.Wake, st.Groups[0].Active, st.Groups[0].Grouped)
	e.settled()
}

// A read whose pick moves nothing while groups are left in the ring (here
// rate-limited groups: the pick puts at most 4 × count of them to sleep
// per call) and that finds nothing to read: no error, nothing read, and
// the pick says to pick again.
func TestFair_ReadWhenThePickMovesNothing(t *testing.T) {
	e := newFairEnv(t, fairPolicy{rate: "1/60000"})
	var all []*fairMsg
	for _, g := range []string{"A", "B", "C", "D", "E"} {
		all = append(all, msgs(g, 2)...)
	}
	e.publish(all...)
	e.promote()
	got, _ := e.pick("c", 5)
	require.Equal(t, []string{"A1", "B1", "C1", "D1", "E1"}, payloads(got))
	require.Equal(t, []string{"A", "B", "C", "D", "E"}, e.view().ring, "each over its rate, not yet found so")
	r, err := e.tryRead("c", 1)
	require.NoError(t, err, "4 groups put to sleep, E left in the ring, nothing to read")
	require.Empty(t, r.Streams)
	require.True(t, r.Pick.More)
}

// High priority: a group's high-priority messages go before its others,
// and the groups with some (fprio) are served before the ring; a capped
// group joins fprio when its slot is given back.
func TestFair_HighPriority(t *testing.T) {
	t.Run("before the ring", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{})
		e.publish(slices.Concat(msgs("A", 3), msgs("B", 1))...)
		e.publish(&fairMsg{payload: "Bh", group: "B", high: true})
		e.publish(&fairMsg{payload: "Ah1", group: "A", high: true}, &fairMsg{payload: "Ah2", group: "A", high: true})
		e.promote()
		v := e.view()
		require.Equal(t, []string{"B", "A"}, v.prio)
		require.Equal(t, []string{"A", "B"}, v.ring)
		var order []string
		for range 10 {
			got, r := e.pick("c", 1)
			order = append(order, payloads(got)...)
			if !r.More {
				break
			}
		}
		require.Equal(t, []string{"Bh", "Ah1", "Ah2", "A1", "B1", "A2", "A3"}, order)
		for _, id := range e.pendingOf("c") {
			e.ack(fairGot{id: id})
		}
		e.settled()
	})
	t.Run("capped", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{cap: 1})
		e.publish(msgs("A", 2)...)
		e.promote()
		got, _ := e.pick("c", 10)
		require.Equal(t, []string{"A1"}, payloads(got))
		e.publish(&fairMsg{payload: "Ah", group: "A", high: true})
		e.promote()
		v := e.view()
		require.Empty(t, v.prio, "A's slot is taken")
		e.ack(got...)
		v = e.view()
		require.Equal(t, []string{"A"}, v.prio)
		got, _ = e.pick("c", 10)
		require.Equal(t, []string{"Ah"}, payloads(got))
		e.ack(got...)
		got, _ = e.pick("c", 10)
		require.Equal(t, []string{"A2"}, payloads(got))
		e.ack(got...)
		e.settled()
	})
	// fair_pick ends its ring loop at the first capped group it served in
	// the call ("a full lap"), but a group served from fprio was not served
	// by the ring: meeting it at the head of the ring is no full lap, and B
	// and C, free to serve, wait for the next call.
	t.Run("a capped group served first does not end the lap", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{cap: 1})
		e.publish(slices.Concat(msgs("A", 2), msgs("B", 2), msgs("C", 2))...)
		e.publish(&fairMsg{payload: "Ah", group: "A", high: true})
		e.promote()
		v := e.view()
		require.Equal(t, []string{"A", "B", "C"}, v.ring)
		require.Equal(t, []string{"A"}, v.prio)
		got, _ := e.pick("c", 10)
		require.Equal(t, []string{"Ah", "B1", "C1"}, payloads(got), "count 10, three groups free to serve")
	})
	t.Run("keep last if active ignores priority", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{})
		e.publish(&fairMsg{payload: "k1", key: "k", high: true})
		e.promote()
		v := e.view()
		require.Empty(t, v.prio)
		require.Equal(t, []string{"\x01k"}, v.ring)
		got, _ := e.pick("c", 10)
		require.Equal(t, []string{"k1"}, payloads(got))
		e.ack(got...)
		e.settled()
	})
}

// Random steps on small numbers of groups, for each combination of cap and
// rate limit, the invariants checked after each; then everything is
// settled. Every message is delivered; within a group and priority class
// the first deliveries follow the publish order; the keep-last-if-active
// groups deliver their last message.
func TestFair_RandomSteps(t *testing.T) {
	steps := 400
	if testing.Short() {
		steps = 80
	}
	for _, p := range []fairPolicy{
		{}, {cap: 1}, {cap: 3},
		{rate: "3/100"}, {cap: 1, rate: "2/60"},
	} {
		p.vis, p.max, p.backoff = 80, 4, "0,20"
		t.Run(fmt.Sprintf("cap %d rate %q", p.cap, p.rate), func(t *testing.T) {
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewSource(seed))
			e := newFairEnv(t, p)
			groups := []string{"a", "b", "c", "d", "e"}
			keys := []string{"k1", "k2"}
			consumers := []string{"c1", "c2"}

			published := map[string]*fairMsg{} // UUID -> message
			var order []*fairMsg               // publish order
			lastOfKey := map[string]string{}   // key -> UUID of the last published
			delivered := map[string]bool{}     // UUIDs delivered at least once
			acked := map[string]bool{}
			var firstDeliveries []string // UUIDs in order of first delivery
			byPayload := map[string]string{}

			note := func(got []fairGot) {
				for _, g := range got {
					id := byPayload[g.payload]
					require.NotEmpty(t, id, "unknown message %q", g.payload)
					m := published[id]
					require.Equal(t, m.fairGroup(), g.group, "message %q comes with its group", g.payload)
					if !delivered[id] {
						delivered[id] = true
						firstDeliveries = append(firstDeliveries, id)
					}
				}
			}
			held := func(consumer string) []fairGot {
				var got []fairGot
				for _, id := range e.pendingOf(consumer) {
					es, err := e.c.XRange(e.ctx, e.sh.Redelivery(e.cg), id, id).Result()
					require.NoError(t, err)
					got = append(got, e.entries([]Batch{{Stream: e.sh.Redelivery(e.cg), Entries: batches([]redis.XStream{{Messages: es}})[0].Entries}})...)
				}
				return got
			}
			n := 0
			did := map[string]int{} // steps that changed something, by kind
			for range steps {
				switch op := rng.Intn(100); {
				case op < 20:
					var batch []*fairMsg
					inCall := map[string]bool{} // a Publish call's messages never share a business key
					for range 1 + rng.Intn(3) {
						n++
						m := &fairMsg{payload: "m" + strconv.Itoa(n), high: rng.Intn(5) == 0}
						if k := keys[rng.Intn(len(keys))]; rng.Intn(8) == 0 && !inCall[k] {
							m.key = k
							inCall[k] = true
						} else {
							m.group = groups[rng.Intn(len(groups))]
						}
						batch = append(batch, m)
					}
					e.publish(batch...)
					did["publish"]++
					for _, m := range batch {
						published[m.uuid] = m
						byPayload[m.payload] = m.uuid
						order = append(order, m)
						if m.key != "" {
							lastOfKey[m.key] = m.uuid
						}
					}
				case op < 32:
					e.promote()
				case op < 47:
					got, r := e.pick(consumers[rng.Intn(2)], 1+rng.Intn(4))
					note(got)
					if len(got) > 0 {
						did["pick"]++
					}
					if !r.Wake.IsZero() {
						did["asleep"]++
					}
				case op < 55:
					r, err := e.tryRead(consumers[rng.Intn(2)], 1+rng.Intn(4))
					require.NoError(t, err)
					note(e.entries(r.Streams))
					if len(r.Streams) > 0 {
						did["read"]++
					}
				case op < 70:
					got := held(consumers[rng.Intn(2)])
					rng.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
					if len(got) > 0 {
						got = got[:1+rng.Intn(len(got))]
						e.ack(got...)
						did["ack"]++
						for _, g := range got {
							acked[byPayload[g.payload]] = true
						}
					}
				case op < 82:
					got := held(consumers[rng.Intn(2)])
					if len(got) > 0 {
						g := got[rng.Intn(len(got))]
						switch rng.Intn(3) {
						case 0:
							e.nack(g, 0, "")
							did["nack"]++
						case 1:
							e.nack(g, time.Duration(10+rng.Intn(30))*time.Millisecond, "")
							did["nack later"]++
						default:
							e.nack(g, 0, "failed")
							did["bury"]++
						}
					}
				case op < 86:
					if e.release(consumers[rng.Intn(2)], 1+rng.Intn(3)) > 0 {
						did["release"]++
					}
				case op < 90:
					if r := e.reclaim(1 + rng.Intn(4)); r.Requeued+r.Buried > 0 {
						did["reclaim"]++
					}
				case op < 94:
					if e.requeue(1+rng.Intn(3)) > 0 {
						did["requeue"]++
					}
				default:
					time.Sleep(time.Duration(5+rng.Intn(40)) * time.Millisecond)
				}
			}

			t.Logf("steps that changed something: %v", did)

			// Settle: deliver and acknowledge everything, the dead letters too.
			deadline := time.Now().Add(20 * time.Second)
			for {
				require.True(t, time.Now().Before(deadline), "not settled after 20 s")
				e.promote()
				for n := 1; n > 0; {
					n = e.requeue(100)
				}
				got, r := e.pick("c1", 50)
				note(got)
				for _, c := range consumers {
					if h := held(c); len(h) > 0 {
						e.ack(h...)
						for _, g := range h {
							acked[byPayload[g.payload]] = true
						}
					}
				}
				left, err := e.c.Exists(e.ctx, e.sh.Waiting(), e.sh.Retry(e.cg), e.sh.fairRing(e.cg), e.sh.fairPrio(e.cg), e.sh.fairWait(e.cg)).Result()
				require.NoError(t, err)
				entries, err := e.c.XLen(e.ctx, e.sh.Redelivery(e.cg)).Result()
				require.NoError(t, err)
				dead, err := e.c.XLen(e.ctx, e.sh.Dead(e.cg)).Result()
				require.NoError(t, err)
				if left == 0 && entries == 0 && dead == 0 && len(got) == 0 && !r.More {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if p.rate == "" {
				e.settled()
			} else if v := e.view(); v.exists {
				for g, s := range v.states {
					require.Zero(t, s.f+s.queued(), "group %q still holds messages", g)
				}
			}

			for _, m := range order {
				if m.key == "" || lastOfKey[m.key] == m.uuid {
					require.True(t, acked[m.uuid], "message %s (group %q) was never delivered and acknowledged", m.payload, m.fairGroup())
				}
			}
			// first deliveries in publish order within a group and class
			pos := map[string]int{}
			for i, m := range order {
				pos[m.uuid] = i
			}
			lastPos := map[string]int{}
			for _, id := range firstDeliveries {
				m := published[id]
				if m.key != "" {
					continue
				}
				class := m.group + strconv.FormatBool(m.high)
				if p, ok := lastPos[class]; ok {
					require.Greater(t, pos[id], p, "group %q: %s delivered first after a message published later", m.group, m.payload)
				}
				lastPos[class] = pos[id]
			}
		})
	}
}
