package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// groupsScriptTarget is issue 27's target: no script call over 10 ms of
// Redis time. SLOWLOG counts wall time, including the time Redis waited
// for a core on this shared machine (and a server built with glibc's
// malloc, as CI built Valkey before, shows outliers of 30-120 ms there even
// on the plain paths), so a call over it is logged, and the test fails only
// when a call's CPU time (redistest.ScriptCPU, which waiting for a core does
// not inflate) reaches redistest.ScriptCPUGuard, far below the unbounded
// calls it guards against (a pick of 10,000 was 167 ms; work proportional
// to the groups would be seconds at 100,000), as in the root package's
// script-bound tests. The figures are in bench/README.md.
const groupsScriptTarget = 10 * time.Millisecond

// scriptTimes times script calls with the server's slow log, which logs
// every command while a phase runs (and none between phases), and measures
// their CPU time (redistest.ScriptCPU).
type scriptTimes struct {
	t      *testing.T
	c      *redis.Client
	cpu    *redistest.ScriptCPU
	names  map[string]string // SHA1 -> script name
	worst  map[string]time.Duration
	worstP map[string]string        // script -> the phase of its longest call
	wcpu   map[string]time.Duration // script -> its call of the most CPU time
	calls  map[string]int
}

func newScriptTimes(t *testing.T, c *redis.Client) *scriptTimes {
	st := &scriptTimes{t: t, c: c, cpu: redistest.NewScriptCPU(c), names: map[string]string{}, worst: map[string]time.Duration{}, worstP: map[string]string{}, wcpu: map[string]time.Duration{}, calls: map[string]int{}}
	t.Cleanup(func() { _ = st.cpu.Close() })
	for _, name := range scriptNames(t) {
		sum := sha1.Sum([]byte(scriptSource(name)))
		st.names[hex.EncodeToString(sum[:])] = name
	}
	require.NoError(t, c.ConfigSet(context.Background(), "slowlog-max-len", "1000000").Err())
	st.record(false)
	return st
}

// record turns the slow log on (every command) or off, and the CPU
// figures.
func (st *scriptTimes) record(on bool) {
	st.t.Helper()
	v := "-1"
	if on {
		v = "0"
	}
	require.NoError(st.t, st.c.ConfigSet(context.Background(), "slowlog-log-slower-than", v).Err())
	st.cpu.Record(on)
}

// phase runs fn with the slow log on, folds its script calls into the
// figures, logs the longest of each script and returns them: by the slow
// log (wall time) and by CPU time (a pipeline's counts for each script in
// it).
func (st *scriptTimes) phase(name string, fn func()) (wall, cpu map[string]time.Duration) {
	st.t.Helper()
	ctx := context.Background()
	// The Go side's garbage collection (slow under -race) running beside
	// Redis on a small machine shows in the slow log's wall-clock times:
	// none while measuring.
	runtime.GC()
	gc := debug.SetGCPercent(-1)
	require.NoError(st.t, st.c.SlowLogReset(ctx).Err())
	st.cpu.Take()
	st.record(true)
	fn()
	st.record(false)
	debug.SetGCPercent(gc)
	logs, err := st.c.SlowLogGet(ctx, -1).Result()
	require.NoError(st.t, err)
	wall = map[string]time.Duration{}
	n := 0
	for _, l := range logs {
		if len(l.Args) < 2 || !strings.EqualFold(l.Args[0], "evalsha") {
			continue
		}
		script := st.names[strings.ToLower(l.Args[1])]
		if script == "" {
			continue // the test's own
		}
		n++
		st.calls[script]++
		wall[script] = max(wall[script], l.Duration)
		if l.Duration > st.worst[script] {
			st.worst[script], st.worstP[script] = l.Duration, name
		}
	}
	cpu = map[string]time.Duration{}
	for _, call := range st.cpu.Take() {
		for _, sha := range call.Scripts {
			if script := st.names[sha]; script != "" {
				cpu[script] = max(cpu[script], call.CPU)
				st.wcpu[script] = max(st.wcpu[script], call.CPU)
			}
		}
	}
	var parts []string
	for s, d := range wall {
		parts = append(parts, fmt.Sprintf("%s %s (CPU %s)", s, d, cpu[s]))
	}
	sort.Strings(parts)
	st.t.Logf("%-50s %5d calls; longest: %s", name, n, strings.Join(parts, ", "))
	return wall, cpu
}

// bound runs prepare (not timed) then the phase fn, logs each script call
// of fn over the 10 ms target, and asserts that each took under
// redistest.ScriptCPUGuard of CPU time. A machine shared with other work
// delays Redis now and then (a 33 ms promote call once, 5 ms in every
// other run): over the target, the phase runs again, prepare included, up
// to three times in all, for the figure.
func (st *scriptTimes) bound(name string, prepare, fn func()) {
	st.t.Helper()
	var over []string
	for attempt := 1; attempt <= 3; attempt++ {
		if prepare != nil {
			prepare()
		}
		over = over[:0]
		label := name
		if attempt > 1 {
			label = fmt.Sprintf("%s (again, %d)", name, attempt)
		}
		wall, cpu := st.phase(label, fn)
		for script, d := range cpu {
			if d >= redistest.ScriptCPUGuard {
				st.t.Errorf("%s: a %s.lua call of %s of CPU, over the %s guard: work that grows with the groups or the batch", name, script, d, redistest.ScriptCPUGuard)
			}
		}
		for script, d := range wall {
			if d >= groupsScriptTarget {
				over = append(over, fmt.Sprintf("%s.lua %s (CPU %s)", script, d, cpu[script]))
			}
		}
		if len(over) == 0 || st.t.Failed() {
			return
		}
	}
	sort.Strings(over)
	st.t.Logf("%s: over the %s target at each of 3 runs, the last: %s", name, groupsScriptTarget, strings.Join(over, ", "))
}

// Issue 27: "Bounded script work per call at any number of groups (100,000
// groups), no script over 10 ms". 1,000,000 grouped messages in 100,000
// groups, queued for two consumer groups: "fair" without per-group bounds,
// "capped" with cap 1 and a rate limit of 1 message per 30 s a group. Then
// every script of the grouped paths is called at the sizes the library
// calls it with (Publish parts of 512, promote batches of 256, reads of
// BatchSize 32, and the fixed release, reclaim and requeue batches of
// 1,000), each call timed by the server's slow log. Calls at the largest
// sizes a user may configure (ManagerConfig.BatchSize 4096,
// SubscriberConfig.BatchSize 10000, so acks of as many) are logged, not
// bounded, as are the batch paths with 10 groups and with no group, for
// comparison.
func TestScriptBound_Groups(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100,000 groups of 1,000,000 messages")
	}
	const groups, msgs = 100_000, 1_000_000
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	loadScripts(t, c)
	st := newScriptTimes(t, c)
	sh := Keys{Prefix: "bound"}.Shard("t", 0)
	const fair, capped = "fair", "capped"
	// fair: 3 attempts, visibility timeout 200 ms, no retry delay
	_, err := InitGroup(ctx, c, sh, fair, GroupPolicy{MaxAttempts: 3, Visibility: 200 * time.Millisecond, IdleTimeout: time.Hour})
	require.NoError(t, err)
	_, err = InitGroup(ctx, c, sh, capped, GroupPolicy{MaxAttempts: 16, Visibility: time.Minute, IdleTimeout: time.Hour,
		RetryDelays: []time.Duration{50 * time.Millisecond}, Concurrency: 1, RateMessages: 1, RatePer: 30 * time.Second}) // 30 s: the capped picks and acks below take 10 s on a loaded machine
	require.NoError(t, err)
	cgs := []string{fair, capped}
	start := time.Now()
	lap := func(what string) {
		t.Logf("%-50s at %5.1f s", what, time.Since(start).Seconds())
	}

	// The waiting set as publish.lua leaves it (a body, a due score and a
	// group per UUID), written by a script of the test: encoding a million
	// messages in Go takes longer than the rest of the test under -race.
	// The bodies are a real encoded message's, its UUID's bytes replaced
	// (version 3: the UUID's 16 bytes follow the version byte). Message i is
	// in group i mod 100,000, so each call spans many groups.
	tmpl := message.NewMessage("00000000-0000-4000-8000-000000000000", []byte("payload 0000000"))
	tmpl.Metadata.Set("_redisdelay_group", "tenant-000000")
	body := string(Encode(tmpl))
	fill := redis.NewScript(`
local waiting, bodies, grpof = KEYS[1], KEYS[2], KEYS[3]
local from, to, groups, body = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local t = redis.call('TIME')
local score = (tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)) * 1024
local z, h, g = {}, {}, {}
local function flush()
  redis.call('ZADD', waiting, unpack(z))
  redis.call('HSET', bodies, unpack(h))
  redis.call('HSET', grpof, unpack(g))
  z, h, g = {}, {}, {}
end
for i = from, to - 1 do
  local id = string.format('%08x-0000-4000-8000-%012x', i, i)
  z[#z + 1], z[#z + 2] = score + i % 1024, id
  h[#h + 1], h[#h + 2] = id, string.sub(body, 1, 1) .. struct.pack('>I4', i) .. '\0\0\64\0\128\0\0\0' .. struct.pack('>I4', i) .. string.sub(body, 18)
  g[#g + 1], g[#g + 2] = id, string.format('tenant-%06d', i % groups)
  if #z >= 1000 then flush() end
end
if #z > 0 then flush() end
return 0`)
	const built = msgs - 40*512
	for from := 0; from < built; from += 100_000 {
		require.NoError(t, fill.Run(ctx, c, []string{sh.Waiting(), sh.Bodies(), sh.GroupOf()}, from, min(from+100_000, built), groups, body).Err())
	}
	lap("979,520 grouped messages waiting")

	// publish.lua, as the Publisher calls it: parts of 512 messages,
	// encoded before the phase (Go's work between the calls, slow under
	// -race, leaves Redis's caches cold: 6 ms calls instead of 4).
	published := built
	var calls []*fairCall
	st.bound("publish: parts of 512, a million waiting", func() {
		calls = calls[:0]
		for range 40 {
			call := &fairCall{}
			for i := published; i < published+512; i++ {
				uuid := watermill.NewUUID()
				g := fmt.Sprintf("tenant-%06d", i%groups)
				msg := message.NewMessage(uuid, []byte(fmt.Sprintf("payload %07d", i)))
				msg.Metadata.Set("_redisdelay_group", g)
				call.Msgs = append(call.Msgs, PubMessage{UUID: uuid, Body: Encode(msg), Group: g, Far: FarArg{Bucket: -1}})
			}
			calls = append(calls, call)
			published += 512
		}
	}, func() {
		for _, call := range calls {
			r, err := Publish(ctx, c, sh, PublishOpts{}, []*fairCall{call})
			require.NoError(t, err)
			require.EqualValues(t, 0, r.Statuses[0])
		}
	})
	require.EqualValues(t, published, c.ZCard(ctx, sh.Waiting()).Val())
	require.GreaterOrEqual(t, published, msgs)
	lap("1,000,000 or more grouped messages waiting")

	promote := func(batch int) PromoteReply {
		r, err := Promote(ctx, c, sh, PromoteArgs{Groups: cgs, Batch: batch, Owner: "owner", Lease: time.Minute, MayTake: true, Extend: true})
		require.NoError(t, err)
		require.True(t, r.Held)
		return r
	}
	waiting := func() int64 { return c.ZCard(ctx, sh.Waiting()).Val() }
	for waiting() > 100_000 {
		promote(4096)
	}
	lap("promoted 900,000 (batches of 4,096)")
	st.bound("promote: batches of 256", nil, func() {
		for range 100 {
			promote(256)
		}
	})
	st.phase("promote: batches of 4,096 (the largest BatchSize)", func() {
		for range 10 {
			promote(4096)
		}
	})
	for waiting() > 0 {
		promote(4096)
	}
	lap("promoted all")
	for _, cg := range cgs {
		states, err := c.HLen(ctx, sh.Fair(cg)).Result()
		require.NoError(t, err)
		queued, err := c.HGet(ctx, sh.Fair(cg), fairQueued).Int64()
		require.NoError(t, err)
		require.EqualValues(t, published, queued, cg)
		require.EqualValues(t, groups, states-queued-1, "%s: a state per group", cg)
		require.EqualValues(t, groups, c.LLen(ctx, sh.fairRing(cg)).Val(), "%s: every group in the ring", cg)
	}

	// Reads as a subscription makes them: pick.lua and XREADGROUP in one
	// pipeline.
	pick := func(cg, consumer string, count int) []Entry {
		r, err := ReadNew(ctx, c, sh, ReadArgs{Group: cg, Consumer: consumer, Count: count, Pick: true})
		require.NoError(t, err)
		var got []Entry
		for _, s := range r.Streams {
			got = append(got, s.Entries...)
		}
		return got
	}
	pickN := func(cg, consumer string, n int) []Entry {
		var got []Entry
		for len(got) < n {
			more := pick(cg, consumer, min(1000, n-len(got)))
			require.NotEmpty(t, more)
			got = append(got, more...)
		}
		return got
	}
	ack := func(cg string, ms []Entry) {
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.ID
		}
		r := Ack(ctx, c, sh, cg, nil, ids)
		require.NoError(t, r.RedoErr)
		require.EqualValues(t, len(ms), r.Redo)
	}
	nack := func(cg string, m Entry, delay time.Duration, reason string) {
		body, _ := m.Values["m"].(string)
		r, err := Nack(ctx, c, sh, NackArgs{Group: cg, Stream: sh.Redelivery(cg), Id: m.ID, Redo: true, Attempt: 1, Delay: delay, Body: []byte(body), Reason: reason})
		require.NoError(t, err)
		require.NotZero(t, r.Status)
	}

	// The capped consumer group first: each group's first message goes,
	// then the group is over its rate for 30 s, while the other consumer
	// group is measured.
	var first []Entry
	st.bound("capped: pick, count 32", nil, func() {
		for range 100 {
			got := pick(capped, "c1", 32)
			require.Len(t, got, 32)
			first = append(first, got...)
		}
	})
	for c.LLen(ctx, sh.fairRing(capped)).Val() > 0 {
		first = append(first, pick(capped, "c1", 10_000)...)
	}
	require.Len(t, first, groups, "one message of each group in flight")
	lap("capped: each group's first message picked")
	acked := 0
	st.bound("capped: ack, 32 a call (the groups rejoin the ring)", nil, func() {
		for range 100 {
			ack(capped, first[acked:acked+32])
			acked += 32
		}
	})
	for ; acked < len(first); acked += 1000 {
		ack(capped, first[acked:min(acked+1000, len(first))])
	}
	lap("capped: all acknowledged")
	var second []Entry
	st.bound("capped: pick, count 32, groups over their rate", nil, func() {
		for range 300 {
			second = append(second, pick(capped, "c1", 32)...)
		}
	})
	asleep := c.ZCard(ctx, sh.fairWait(capped)).Val()
	t.Logf("capped: %d groups asleep in fwait, %d messages picked meanwhile", asleep, len(second))
	require.Positive(t, asleep, "the groups' first messages were picked more than 30 s ago")

	// The consumer group without bounds meanwhile.
	var c1 []Entry
	st.bound("pick, count 32, 100,000 groups in the ring", nil, func() {
		for range 300 {
			got := pick(fair, "c1", 32)
			require.Len(t, got, 32)
			c1 = append(c1, got...)
		}
	})
	// An idle subscription's read: it arms the bell, picks and reads.
	st.bound("armed read with pick, count 32, then ack", nil, func() {
		for range 100 {
			r, err := ReadNew(ctx, c, sh, ReadArgs{Group: fair, Consumer: "c2", Count: 32, Pick: true, Arm: true})
			require.NoError(t, err)
			require.Len(t, r.Streams, 1)
			ack(fair, r.Streams[0].Entries)
		}
	})
	var big []Entry
	st.phase("pick, count 10,000 (the largest BatchSize)", func() {
		for range 2 {
			big = append(big, pick(fair, "big", 10_000)...)
		}
	})
	st.bound("ack, 32 a call", nil, func() {
		for i := 0; i+32 <= len(c1); i += 32 {
			ack(fair, c1[i:i+32])
		}
		c1 = nil
	})
	st.phase("ack, 1,000 a call", func() {
		for i := 0; i+1000 <= len(big); i += 1000 {
			ack(fair, big[i:i+1000])
		}
	})
	var c2 []Entry
	st.bound("nack: now, later, buried", func() {
		c2 = pickN(fair, "c2", 3_000)
	}, func() {
		for i, m := range c2 {
			switch i % 3 {
			case 0:
				nack(fair, m, 0, "")
			case 1:
				nack(fair, m, 50*time.Millisecond, "")
			default:
				nack(fair, m, 0, "failed")
			}
		}
		c2 = nil
	})
	st.bound("promote: grouped retries due, batches of 256", func() {
		if c.ZCard(ctx, sh.Retry(fair)).Val() == 0 {
			for _, m := range pickN(fair, "c3", 1_000) {
				nack(fair, m, 50*time.Millisecond, "")
			}
		}
		time.Sleep(60 * time.Millisecond)
	}, func() {
		for n := 0; c.ZCard(ctx, sh.Retry(fair)).Val() > 0; n++ {
			require.Less(t, n, 100)
			promote(256)
		}
	})
	// The library's batches: RequeueBatch, and the root package's
	// reclaimBatch and releaseBatch (256).
	st.bound("requeue: 256 a call", func() {
		for _, m := range pickN(fair, "d", 3_000) {
			nack(fair, m, 0, "failed")
		}
	}, func() {
		for moved := 0; moved < 3_000; {
			n, err := Requeue(ctx, c, sh, fair, RequeueBatch, nil)
			require.NoError(t, err)
			require.Positive(t, n)
			moved += n
		}
	})
	// A dead consumer's 3,000 messages, reclaimed once the visibility
	// timeout (200 ms) passed, 256 pending entries a call.
	st.bound("reclaim: 256 entries a call", func() {
		pickN(fair, "gone", 3_000)
		time.Sleep(250 * time.Millisecond)
	}, func() {
		pos := ReclaimStart
		var requeued int64
		for {
			r, err := Reclaim(ctx, c, sh, fair, 256, false, pos)
			require.NoError(t, err)
			requeued += r.Requeued
			if r.Next.Stream == 0 {
				break
			}
			pos = r.Next
		}
		// and what earlier phases left pending past the visibility timeout
		require.GreaterOrEqual(t, requeued, int64(3_000))
	})
	// A closing subscription hands back 3,000, 256 a call.
	st.bound("release: 256 a call", func() {
		pickN(fair, "closing", 3_000)
	}, func() {
		var released int64
		for {
			r, err := Release(ctx, c, sh, fair, "closing", 256, "", "")
			require.NoError(t, err)
			released += r.Released
			if r.Done {
				break
			}
		}
		require.EqualValues(t, 3_000, released)
	})
	lap("measured the consumer group without bounds")

	// The capped consumer group's groups wake.
	wake, err := c.ZRangeWithScores(ctx, sh.fairWait(capped), -1, -1).Result()
	require.NoError(t, err)
	require.NotEmpty(t, wake)
	for {
		now, err := c.Time(ctx).Result()
		require.NoError(t, err)
		if float64(now.UnixMilli()) > wake[0].Score {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	st.bound("capped: pick, count 32, groups waking", nil, func() {
		for range 300 {
			second = append(second, pick(capped, "c1", 32)...)
		}
	})
	require.NotEmpty(t, second)
	st.bound("capped: nack later (the retry keeps the slot)", nil, func() {
		for _, m := range second[:min(len(second), 1000)] {
			nack(capped, m, 50*time.Millisecond, "")
		}
		second = second[min(len(second), 1000):]
	})
	st.bound("capped: promote grouped retries due, batches of 256", func() {
		time.Sleep(60 * time.Millisecond)
	}, func() {
		for n := 0; c.ZCard(ctx, sh.Retry(capped)).Val() > 0; n++ {
			require.Less(t, n, 100)
			promote(256)
		}
	})
	lap("measured the capped consumer group")

	var names []string
	for s := range st.worst {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		t.Logf("longest %-8s call: %9s (%s; %d calls timed), of CPU %9s", s, st.worst[s], st.worstP[s], st.calls[s], st.wcpu[s])
	}

	// For comparison (logged): the batch paths at 1,000 entries a call with
	// 10 groups, and with messages in no group, each on a partition of its
	// own.
	batches := func(name string, sh Shard, grouped bool) {
		const n = 3_000
		_, err := InitGroup(ctx, c, sh, fair, GroupPolicy{MaxAttempts: 3, Visibility: 200 * time.Millisecond, IdleTimeout: time.Hour})
		require.NoError(t, err)
		if grouped {
			require.NoError(t, fill.Run(ctx, c, []string{sh.Waiting(), sh.Bodies(), sh.GroupOf()}, 0, 3*n, 10, body).Err())
			for c.ZCard(ctx, sh.Waiting()).Val() > 0 {
				r, err := Promote(ctx, c, sh, PromoteArgs{Groups: []string{fair}, Batch: 4096, Owner: "owner", Lease: time.Minute, MayTake: true, Extend: true})
				require.NoError(t, err)
				if r.Wait > 0 {
					time.Sleep(time.Duration(r.Wait) * time.Microsecond)
				}
			}
		} else {
			pipe := c.Pipeline()
			for range 3 * n {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: sh.Stream(), Values: []any{"m", body}})
			}
			_, err := pipe.Exec(ctx)
			require.NoError(t, err)
		}
		// n messages for consumer (from the ready stream when not grouped)
		read := func(consumer string) []Entry {
			var got []Entry
			for len(got) < n {
				var streams []Batch
				var err error
				if grouped {
					var r ReadReply
					r, err = ReadNew(ctx, c, sh, ReadArgs{Group: fair, Consumer: consumer, Count: min(1000, n-len(got)), Pick: true})
					streams = r.Streams
				} else {
					var xs []redis.XStream
					xs, err = c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: fair, Consumer: consumer, Count: int64(min(1000, n-len(got))),
						Streams: []string{sh.Stream(), ">"}}).Result()
					streams = batches(xs)
				}
				require.NoError(t, err)
				for _, s := range streams {
					got = append(got, s.Entries...)
				}
			}
			return got
		}
		read("gone")
		for _, m := range read("d") {
			body, _ := m.Values["m"].(string)
			stream := sh.Stream()
			if grouped {
				stream = sh.Redelivery(fair)
			}
			_, err := Nack(ctx, c, sh, NackArgs{Group: fair, Stream: stream, Id: m.ID, Redo: grouped, Attempt: 1, Body: []byte(body), Reason: "failed"})
			require.NoError(t, err)
		}
		time.Sleep(250 * time.Millisecond)
		st.phase(name+": reclaim, 256 entries a call", func() {
			pos := ReclaimStart
			var requeued int64
			for {
				r, err := Reclaim(ctx, c, sh, fair, 256, false, pos)
				require.NoError(t, err)
				requeued += r.Requeued
				if r.Next.Stream == 0 {
					break
				}
				pos = r.Next
			}
			require.EqualValues(t, n, requeued)
		})
		read("closing")
		st.phase(name+": release, 256 a call", func() {
			var released int64
			for {
				r, err := Release(ctx, c, sh, fair, "closing", 256, "", "")
				require.NoError(t, err)
				released += r.Released
				if r.Done {
					break
				}
			}
			require.EqualValues(t, n, released)
		})
		st.phase(name+": requeue, 256 a call", func() {
			for done := 0; done < 3_000; {
				moved, err := Requeue(ctx, c, sh, fair, RequeueBatch, nil)
				require.NoError(t, err)
				require.Positive(t, moved)
				done += moved
			}
		})
	}
	batches("10 groups", Keys{Prefix: "ten"}.Shard("t", 0), true)
	batches("no group", Keys{Prefix: "plain"}.Shard("t", 0), false)
}
