package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
	"github.com/stretchr/testify/require"
)

// The environment of the fair queues' tests (fair_test.go): a consumer
// group of one partition, driven script by script, with fair.lua's
// invariants checked after every step (check).

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
		call.Msgs = append(call.Msgs, PubMessage{UUID: m.uuid, Delay: m.delay.Milliseconds(), Body: Encode(msg), Key: keyArg,
			Prio: m.high, Group: m.fairGroup(), Far: FarArgOf(m.uuid, m.delay, !m.high && keyArg == "")})
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
		r, err := Promote(e.ctx, e.c, e.sh, PromoteArgs{Groups: []string{e.cg}, Batch: 256, Owner: "owner", Lease: time.Minute, MayTake: true, Extend: true})
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
