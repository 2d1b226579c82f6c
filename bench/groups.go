package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// Scenario 12 (issue 27): fair consumption across groups (SetGroup), and
// what groups cost.

// groupsTopic is scenario 12's topic.
const groupsTopic = "groups"

// groupsSlowlogUsec is scenario 12's SLOWLOG threshold: far below the
// issue's 10 ms bound, so that the slowest script call is known even when
// every call is fast (scenarios 7 and 10 log from 1 ms).
const groupsSlowlogUsec = 100

// GroupsReport is scenario 12.
type GroupsReport struct {
	Fairness []*FairnessRun  `json:"fairness"`
	Cost     []*GroupCostRun `json:"cost"`
}

// FairnessRun is one run of scenario 12's fairness part: a big tenant's
// burst, then small tenants' messages, consumed by one consumer group.
type FairnessRun struct {
	Grouped bool `json:"grouped"` // SetGroup(msg, tenant) on every message
	// Promoted: the small tenants published once the burst had left the
	// waiting set (Inspector.Stats Waiting 0), not right after it: a
	// grouped message, immediate or not, is promoted in due order before
	// it joins its group's queue, so right after a burst the small
	// tenants' messages wait for the burst's promotion too.
	Promoted    bool `json:"promoted"`
	Subscribers int  `json:"subscribers"`
	Big         int  `json:"big"`           // messages of the big tenant
	Tenants     int  `json:"small_tenants"` // small tenants
	Each        int  `json:"small_each"`    // messages per small tenant
	// BigPublishSeconds: the big tenant's burst, from its first publish
	// to its last; BacklogAtSmall: its messages published and not yet
	// delivered when the small tenants began publishing.
	BigPublishSeconds float64 `json:"big_publish_seconds"`
	BacklogAtSmall    int     `json:"backlog_at_small"`
	// Where that backlog was (Inspector.Stats, just before the small
	// tenants published): due messages not yet promoted (Waiting), queued
	// in the groups' fair queues (Grouped), and in the ready and
	// redelivery streams (Ready) or read and not acknowledged (Pending).
	AtSmall BacklogPlace `json:"backlog_place_at_small"`
	// Small: the small tenants' delivery latency, from each message's
	// publish (ms), with the duplicates and messages not delivered.
	Small *Lateness `json:"small_latency"`
	// Delivery positions (1 = first delivery of the run) of the small
	// tenants' messages; BigBefore counts the big tenant's messages
	// delivered after the small tenants began publishing and before the
	// last small message: the part of the backlog they waited behind.
	PosFirst  int `json:"small_position_first"`
	PosP50    int `json:"small_position_p50"`
	PosLast   int `json:"small_position_last"`
	BigBefore int `json:"big_delivered_before_last_small"`
	// Seconds from the first publish to the last delivery of all.
	DrainSeconds float64     `json:"drain_seconds"`
	Duplicates   int         `json:"duplicates"`
	Slowest      SlowCall    `json:"slowest"` // SLOWLOG, ≥ groupsSlowlogUsec
	Over10       []SlowEntry `json:"calls_over_10ms,omitempty"`
	LongestGapMs float64     `json:"longest_delivery_gap_ms"`
	Load         MachineLoad `json:"load"`
	Settled      string      `json:"settled"` // what was left in Redis after the run ("" none)
}

// BacklogPlace is where a consumer group's messages are, in Inspector.Stats's terms.
type BacklogPlace struct {
	Waiting int64 `json:"waiting"`
	Grouped int64 `json:"grouped"`
	Ready   int64 `json:"ready"`
	Pending int64 `json:"pending"`
}

func (p BacklogPlace) String() string {
	return fmt.Sprintf("waiting %s, grouped %s, ready %s, pending %s", formatNumber(float64(p.Waiting)),
		formatNumber(float64(p.Grouped)), formatNumber(float64(p.Ready)), formatNumber(float64(p.Pending)))
}

// GroupCostRun is one run of scenario 12's cost part: messages published
// and consumed end to end in some groups (0: none).
type GroupCostRun struct {
	Groups      int      `json:"groups"`
	Concurrency int      `json:"group_concurrency"`
	Subscribers int      `json:"subscribers"`
	Messages    int      `json:"messages"`
	Rate        *float64 `json:"rate"` // messages / (last delivery − first publish)
	// Redis's cost per message: CPU (INFO cpu) and script time and calls
	// (INFO commandstats, all script commands); ScriptUsecPerCall is
	// evalsha's usec_per_call.
	CPUUsecPerMsg     float64  `json:"redis_cpu_usec_per_msg"`
	ScriptUsecPerMsg  float64  `json:"script_usec_per_msg"`
	ScriptCallsPerMsg float64  `json:"script_calls_per_msg"`
	ScriptUsecPerCall float64  `json:"evalsha_usec_per_call"`
	Duplicates        int      `json:"duplicates"`
	Slowest           SlowCall `json:"slowest"` // SLOWLOG, ≥ groupsSlowlogUsec
	// ByCall: the slowest of each kind of call SLOWLOG logged (scripts
	// told apart by their hash and keys), most first.
	ByCall []SlowKind  `json:"slowest_by_call"`
	Over10 []SlowEntry `json:"calls_over_10ms,omitempty"`
	// LongestGapMs: the longest time between two consecutive deliveries.
	LongestGapMs float64     `json:"longest_delivery_gap_ms"`
	Load         MachineLoad `json:"load"`
	Settled      string      `json:"settled"`
}

// MachineLoad is the CPU (% of one core; the machine has 2 cores) of the
// bench process and of every other process but Redis over a run: the
// share of the cores Redis did not get.
type MachineLoad struct {
	Bench  float64 `json:"bench_cpu_percent"`
	Others float64 `json:"others_cpu_percent"`
}

// loadMeter starts measuring MachineLoad; stop ends it, given the Redis
// CPU seconds of the same span (counted among the other processes).
func loadMeter() (stop func(redisSeconds float64) MachineLoad) {
	self0, others0, t0 := selfCPU(), processTicks(nil), time.Now()
	return func(redisSeconds float64) MachineLoad {
		self1, others1 := selfCPU(), processTicks(nil)
		wall := time.Since(t0).Seconds()
		return MachineLoad{
			Bench:  (self1 - self0) / wall * 100,
			Others: max(0, otherCPUSeconds(others0, others1)-redisSeconds) / wall * 100,
		}
	}
}

// SlowEntry is one call SLOWLOG logged at 10 ms or more.
type SlowEntry struct {
	Ms   float64 `json:"ms"`
	Call string  `json:"call"`
	Args int     `json:"args"` // arguments after the keys (ack: 1 + entry ids)
}

// slowEntries returns the calls of 10 ms or more SLOWLOG holds, at most
// 20 of them, oldest first.
func (b *bench) slowEntries() ([]SlowEntry, error) {
	logs, err := b.admin.SlowLogGet(b.ctx, -1).Result()
	if err != nil {
		return nil, err
	}
	var out []SlowEntry
	for i := len(logs) - 1; i >= 0; i-- {
		l := logs[i]
		if len(l.Args) == 0 || l.Duration < 10*time.Millisecond {
			continue
		}
		switch strings.ToLower(l.Args[0]) {
		case "flushall", "flushdb", "info", "config", "slowlog":
			continue
		}
		e := SlowEntry{Ms: float64(l.Duration) / float64(time.Millisecond), Call: describeCall(l.Args)}
		if len(l.Args) >= 3 {
			if k, err := strconv.Atoi(l.Args[2]); err == nil {
				e.Args = len(l.Args) - 3 - k
			}
		}
		out = append(out, e)
		if len(out) == 20 {
			break
		}
	}
	return out, nil
}

// longestGap returns the longest time between consecutive first
// deliveries (ns timestamps, 0: not delivered), in ms: a stall shows here.
func longestGap(at []int64) float64 {
	ts := make([]int64, 0, len(at))
	for _, v := range at {
		if v != 0 {
			ts = append(ts, v)
		}
	}
	slices.Sort(ts)
	var gap int64
	for i := 1; i < len(ts); i++ {
		gap = max(gap, ts[i]-ts[i-1])
	}
	return float64(gap) / 1e6
}

// SlowKind is the slowest of one kind of call in SLOWLOG.
type SlowKind struct {
	Call  string  `json:"call"`
	Ms    float64 `json:"ms"`
	Calls int     `json:"calls_logged"`
}

// slowestByCall returns the slowest call of each kind SLOWLOG holds,
// leaving out the bench's administration, most first.
func (b *bench) slowestByCall() ([]SlowKind, error) {
	logs, err := b.admin.SlowLogGet(b.ctx, -1).Result()
	if err != nil {
		return nil, err
	}
	kinds := map[string]*SlowKind{}
	for _, l := range logs {
		if len(l.Args) == 0 {
			continue
		}
		switch strings.ToLower(l.Args[0]) {
		case "flushall", "flushdb", "info", "config", "slowlog":
			continue
		}
		c := describeCall(l.Args)
		k := kinds[c]
		if k == nil {
			k = &SlowKind{Call: c}
			kinds[c] = k
		}
		k.Calls++
		k.Ms = max(k.Ms, float64(l.Duration)/float64(time.Millisecond))
	}
	var out []SlowKind
	for _, k := range kinds {
		out = append(out, *k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ms > out[j].Ms })
	return out, nil
}

// groups measures scenario 12.
//
// Fairness: a big tenant publishes -groups-big immediate messages, then
// -groups-small tenants publish -groups-each each, while one consumer
// group consumes them through a Router with an ack-only handler (1 and 4
// subscribers, -groups-subs); with SetGroup(msg, tenant) on every
// message, without (plain FIFO), and with groups again but the small
// tenants publishing only once the burst has been promoted. The small
// tenants' latency from their publish, and where in the delivery order
// they came.
//
// Cost: -groups-n messages published one per call from 64 goroutines and
// consumed end to end by -subs subscribers, in each of -group-counts
// groups (message i in group i mod count), with no cap and with
// GroupConcurrency 1, against the same messages without groups.
func (b *bench) groups() {
	restore, err := b.slowlogFrom(groupsSlowlogUsec)
	if b.failed("configure SLOWLOG", err) {
		return
	}
	defer restore()
	rep := &GroupsReport{}
	b.rep.Groups = rep
	for _, subs := range b.opts.GroupsSubs {
		var runs [3]*FairnessRun
		for i, mode := range []struct{ grouped, promoted bool }{{true, false}, {false, false}, {true, true}} {
			runs[i] = b.fairnessRun(subs, mode.grouped, mode.promoted)
			if runs[i] != nil {
				rep.Fairness = append(rep.Fairness, runs[i])
			}
		}
		with, without, promoted := runs[0], runs[1], runs[2]
		label := fmt.Sprintf("%d×%d small tenants after a burst of %s, %d subscriber%s", b.opts.GroupsSmall, b.opts.GroupsEach,
			count(b.opts.GroupsBig), subs, plural(subs))
		stat := func(r *FairnessRun, f func(*FairnessRun) float64) *float64 {
			if r == nil || r.Small == nil || r.Small.Delivered == 0 {
				return nil
			}
			return ptr(f(r))
		}
		for _, p := range []struct {
			name, target string
			f            func(*FairnessRun) float64
		}{
			{"p50", "", func(r *FairnessRun) float64 { return r.Small.P50 }},
			{"p99", "", func(r *FairnessRun) float64 { return r.Small.P99 }},
			{"max", "far below FIFO's", func(r *FairnessRun) float64 { return r.Small.Max }},
		} {
			b.rep.row("12", fmt.Sprintf("%s: latency %s from publish, with groups", label, p.name), "ms", p.target,
				stat(with, p.f), peer("without groups (FIFO)", stat(without, p.f)),
				peer("with groups, published once the burst was promoted", stat(promoted, p.f)))
		}
		bigBefore := func(r *FairnessRun) float64 { return float64(r.BigBefore) }
		b.rep.row("12", label+": big-tenant messages delivered before the last small one, with groups", "messages", "",
			stat(with, bigBefore), peer("without groups (FIFO)", stat(without, bigBefore)),
			peer("with groups, published once the burst was promoted", stat(promoted, bigBefore)))
	}

	counts := append([]int{0}, b.opts.GroupCounts...)
	var base *GroupCostRun
	for _, g := range counts {
		caps := []int{0, 1}
		if g == 0 {
			caps = caps[:1]
		}
		for _, c := range caps {
			run := b.groupCostRun(g, c)
			if run == nil {
				continue
			}
			rep.Cost = append(rep.Cost, run)
			if g == 0 {
				base = run
				continue
			}
			label := fmt.Sprintf("%s messages end to end in %s, %d subscribers", count(run.Messages), groupsLabel(g, c), run.Subscribers)
			var baseRate, baseCPU *float64
			if base != nil {
				baseRate, baseCPU = base.Rate, ptr(base.CPUUsecPerMsg)
			}
			b.rep.row("12", label, "msg/s", "", run.Rate, peer("without groups", baseRate))
			b.rep.row("12", label+": Redis CPU per message", "µs", "", ptr(run.CPUUsecPerMsg), peer("without groups", baseCPU))
			b.rep.row("12", label+": slowest call (SLOWLOG)", "ms", "≤ 10 ms", ptr(run.Slowest.Ms))
		}
	}
}

// groupsLabel names a cost run's setting.
func groupsLabel(groups, concurrency int) string {
	switch {
	case groups == 0:
		return "no groups"
	case concurrency == 0:
		return fmt.Sprintf("%s group%s", count(groups), plural(groups))
	}
	return fmt.Sprintf("%s group%s, GroupConcurrency %d", count(groups), plural(groups), concurrency)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// fairTracker records, for each of n messages, when it was published and
// first delivered and its place in the delivery order. A payload is 16
// bytes: the message's index, big endian, then zeros.
type fairTracker struct {
	pub, at    []int64 // unix ns
	pos        []int64 // 1-based position of its first delivery, 0 before
	delivered  atomic.Int64
	duplicates atomic.Int64
	done       chan struct{}
}

func newFairTracker(n int) *fairTracker {
	return &fairTracker{pub: make([]int64, n), at: make([]int64, n), pos: make([]int64, n), done: make(chan struct{})}
}

// message returns message i, its publish time recorded as now.
func (t *fairTracker) message(i int, now int64) *message.Message {
	t.pub[i] = now
	p := make([]byte, 16)
	binary.BigEndian.PutUint64(p, uint64(i))
	return message.NewMessage(watermill.NewULID(), p)
}

func (t *fairTracker) deliver(payload []byte) {
	now := time.Now().UnixNano()
	if len(payload) < 8 {
		return
	}
	i := binary.BigEndian.Uint64(payload)
	if i >= uint64(len(t.at)) {
		return
	}
	if !atomic.CompareAndSwapInt64(&t.at[i], 0, now) {
		t.duplicates.Add(1)
		return
	}
	d := t.delivered.Add(1)
	atomic.StoreInt64(&t.pos[i], d)
	if d == int64(len(t.at)) {
		close(t.done)
	}
}

// fairnessRun runs scenario 12's fairness part once.
func (b *bench) fairnessRun(subscribers int, grouped, promoted bool) *FairnessRun {
	big, tenants, each := b.opts.GroupsBig, b.opts.GroupsSmall, b.opts.GroupsEach
	small := tenants * each
	n := big + small
	mode := "without groups"
	if grouped {
		mode = "with groups"
	}
	if promoted {
		mode += ", once promoted"
	}
	name := fmt.Sprintf("fairness %s + %d×%d, %d sub%s · %s", count(big), tenants, each, subscribers, plural(subscribers), mode)
	if b.failed("flush", b.flush()) {
		return nil
	}
	// The library's defaults: groups need no setting on the subscribers.
	ps, err := openRedisdelay(b, subscribers)
	if b.failed(name, err) {
		return nil
	}
	t := newFairTracker(n)
	stop, err := b.startRouter(ps, func(p []byte) { t.deliver(p) })
	if b.failed(name, err) {
		ps.close()
		return nil
	}
	if b.failed("SLOWLOG RESET", b.admin.SlowLogReset(b.ctx).Err()) {
		_ = stop()
		ps.close()
		return nil
	}
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.admin})
	if b.failed(name, err) {
		_ = stop()
		ps.close()
		return nil
	}
	run := &FairnessRun{Grouped: grouped, Promoted: promoted, Subscribers: subscribers, Big: big, Tenants: tenants, Each: each}
	var smallStart int64
	meter := loadMeter()
	rate := b.measure(name, n, func() (time.Duration, error) {
		start := time.Now()
		// The big tenant's burst: Publish calls of 100 from 64 goroutines,
		// a bulk import, faster than any consumer here, so that a backlog
		// builds (with single-message calls the consumers, on the same 2
		// cores, keep up with much of it and FIFO has little to show).
		_, err := runPublishers(big, batchSize, func(first, cnt int) error {
			msgs := make([]*message.Message, cnt)
			now := time.Now().UnixNano()
			for j := range msgs {
				msgs[j] = t.message(first+j, now)
				if grouped {
					redisdelay.SetGroup(msgs[j], "big")
				}
			}
			return ps.pub.Publish(groupsTopic, msgs...)
		})
		if err != nil {
			return 0, err
		}
		run.BigPublishSeconds = time.Since(start).Seconds()
		if promoted {
			if err := awaitPromoted(b, insp); err != nil {
				return 0, err
			}
		}
		if st, err := insp.Stats(b.ctx, groupsTopic); err == nil {
			run.AtSmall.Waiting = st.Waiting
			for _, g := range st.Groups {
				run.AtSmall.Grouped += g.Grouped
				run.AtSmall.Ready += g.Ready
				run.AtSmall.Pending += g.Pending
			}
		}
		// Every delivery so far is the big tenant's.
		smallStart = t.delivered.Load()
		run.BacklogAtSmall = big - int(smallStart)
		// Then each small tenant publishes its messages one per call, the
		// tenants at once (one goroutine each).
		_, err = runPublishersN(tenants, small, 1, func(first, _ int) error {
			msg := t.message(big+first, time.Now().UnixNano())
			if grouped {
				redisdelay.SetGroup(msg, fmt.Sprintf("tenant-%03d", first%tenants))
			}
			return ps.pub.Publish(groupsTopic, msg)
		})
		if err != nil {
			return 0, err
		}
		if err := waitFor(t.done, t.delivered.Load, n); err != nil {
			return 0, err
		}
		last := slices.Max(t.at)
		return time.Unix(0, last).Sub(start), nil
	})
	if rate != nil {
		run.Load = meter(b.rep.Runs[len(b.rep.Runs)-1].CPUTime)
	}
	run.Slowest, err = b.slowest(time.Time{})
	b.failed(name+": SLOWLOG", err)
	run.Over10, err = b.slowEntries()
	b.failed(name+": SLOWLOG", err)
	err = stop()
	ps.close()
	b.failed(name+": close", err)
	if rate == nil {
		// Report what did arrive.
		progress("   %d of %d delivered, %d duplicates", t.delivered.Load(), n, t.duplicates.Load())
		return nil
	}
	run.DrainSeconds = float64(n) / *rate
	run.Duplicates = int(t.duplicates.Load())
	run.LongestGapMs = longestGap(t.at)
	var lat []float64
	var pos []int
	for i := big; i < n; i++ {
		if t.at[i] == 0 {
			continue
		}
		lat = append(lat, float64(t.at[i]-t.pub[i])/1e6)
		pos = append(pos, int(t.pos[i]))
	}
	sort.Float64s(lat)
	sort.Ints(pos)
	run.Small = &Lateness{Messages: small, Delivered: len(lat)}
	if len(lat) > 0 {
		l := run.Small
		l.Min, l.Max = lat[0], lat[len(lat)-1]
		l.P50, l.P99, l.P999 = percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 0.999)
		run.PosFirst, run.PosLast = pos[0], pos[len(pos)-1]
		run.PosP50 = pos[max(0, (len(pos)+1)/2-1)]
		run.BigBefore = run.PosLast - int(smallStart) - len(pos)
	}
	run.Settled = b.groupsSettled()
	progress("   small tenants: p50 %s, p99 %s, max %s ms; positions %d–%d (p50 %d) of %d; backlog at their publish %d (%s), big delivered before the last %d; %d duplicates; slowest %s",
		formatNumber(run.Small.P50), formatNumber(run.Small.P99), formatNumber(run.Small.Max),
		run.PosFirst, run.PosLast, run.PosP50, n, run.BacklogAtSmall, run.AtSmall, run.BigBefore, run.Duplicates, slowString(run.Slowest))
	progress("   longest pause between deliveries %s ms; CPU: bench %.0f%%, other processes %.0f%% of a core", formatNumber(run.LongestGapMs), run.Load.Bench, run.Load.Others)
	printOver10(run.Over10)
	if run.Settled != "" {
		b.rep.errorf("%s: not settled after the run: %s", name, run.Settled)
	}
	return run
}

// printOver10 prints the calls of 10 ms or more of a run.
func printOver10(calls []SlowEntry) {
	for _, e := range calls {
		progress("     ≥ 10 ms: %s ms, %s, %d args", formatNumber(e.Ms), e.Call, e.Args)
	}
}

// awaitPromoted waits until scenario 12's topic has no message waiting
// (every due message promoted), at most stallTimeout.
func awaitPromoted(b *bench, insp *redisdelay.Inspector) error {
	deadline := time.Now().Add(stallTimeout)
	for {
		st, err := insp.Stats(b.ctx, groupsTopic)
		if err != nil {
			return err
		}
		if st.Waiting == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d messages still waiting %s after the burst", st.Waiting, stallTimeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// groupCostRun runs scenario 12's cost part once: groups 0 for none.
func (b *bench) groupCostRun(groups, concurrency int) *GroupCostRun {
	n := b.opts.GroupsN
	subs := b.opts.Subscribers
	name := fmt.Sprintf("groups cost %s, %s · %d subs", count(n), groupsLabel(groups, concurrency), subs)
	if b.failed("flush", b.flush()) {
		return nil
	}
	// GroupConcurrency is what this part measures; everything else keeps
	// the library's defaults.
	ps, err := openRedisdelayWith(b, subs, func(c *redisdelay.SubscriberConfig) { c.GroupConcurrency = concurrency })
	if b.failed(name, err) {
		return nil
	}
	t := newTracker(n)
	stop, err := b.startRouter(ps, t.deliver)
	if b.failed(name, err) {
		ps.close()
		return nil
	}
	if b.failed("SLOWLOG RESET", b.admin.SlowLogReset(b.ctx).Err()) {
		_ = stop()
		ps.close()
		return nil
	}
	run := &GroupCostRun{Groups: groups, Concurrency: concurrency, Subscribers: subs, Messages: n}
	var stats []CommandStat
	meter := loadMeter()
	run.Rate = b.measure(name, n, func() (time.Duration, error) {
		start := time.Now()
		_, err := runPublishers(n, 1, func(i, _ int) error {
			p := make([]byte, 16)
			binary.BigEndian.PutUint64(p, uint64(i))
			msg := message.NewMessage(watermill.NewULID(), p)
			if groups > 0 {
				redisdelay.SetGroup(msg, "g"+strconv.Itoa(i%groups))
			}
			return ps.pub.Publish(groupsTopic, msg)
		})
		if err != nil {
			return 0, err
		}
		if err := waitFor(t.done, t.delivered.Load, n); err != nil {
			return 0, err
		}
		_, last := t.lateness()
		var e error
		stats, e = commandStats(b.ctx, b.admin)
		return last.Sub(start), e
	})
	if run.Rate != nil {
		run.Load = meter(b.rep.Runs[len(b.rep.Runs)-1].CPUTime)
	}
	run.Slowest, err = b.slowest(time.Time{})
	b.failed(name+": SLOWLOG", err)
	run.ByCall, err = b.slowestByCall()
	b.failed(name+": SLOWLOG", err)
	run.Over10, err = b.slowEntries()
	b.failed(name+": SLOWLOG", err)
	err = stop()
	ps.close()
	b.failed(name+": close", err)
	if run.Rate == nil {
		progress("   %d of %d delivered, %d duplicates", t.delivered.Load(), n, t.duplicates.Load())
		return nil
	}
	m := b.rep.Runs[len(b.rep.Runs)-1]
	run.CPUUsecPerMsg = m.CPUTime * 1e6 / float64(n)
	calls, usec := scriptCalls(stats)
	run.ScriptCallsPerMsg, run.ScriptUsecPerMsg = float64(calls)/float64(n), float64(usec)/float64(n)
	for _, s := range stats {
		if s.Command == "evalsha" && s.Calls > 0 {
			run.ScriptUsecPerCall = float64(s.Usec) / float64(s.Calls)
		}
	}
	run.Duplicates = int(t.duplicates.Load())
	run.LongestGapMs = longestGap(t.at)
	run.Settled = b.groupsSettled()
	progress("   longest pause between deliveries %s ms; CPU: bench %.0f%%, other processes %.0f%% of a core", formatNumber(run.LongestGapMs), run.Load.Bench, run.Load.Others)
	progress("   Redis CPU %.1f µs/msg; scripts %.2f calls, %.1f µs per message, evalsha %.0f µs/call; slowest %s; %d duplicates",
		run.CPUUsecPerMsg, run.ScriptCallsPerMsg, run.ScriptUsecPerMsg, run.ScriptUsecPerCall, slowString(run.Slowest), run.Duplicates)
	for _, k := range run.ByCall[:min(len(run.ByCall), 6)] {
		progress("     %-70s max %s ms, %d logged", k.Call, formatNumber(k.Ms), k.Calls)
	}
	printOver10(run.Over10)
	if run.Settled != "" {
		b.rep.errorf("%s: not settled after the run: %s", name, run.Settled)
	}
	return run
}

// startRouter runs a Router with an ack-only handler per subscriber of ps
// on groupsTopic, calling deliver with each payload, and waits until every
// subscription waits for messages. stop closes the Router.
func (b *bench) startRouter(ps *pubSub, deliver func([]byte)) (stop func() error, err error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, b.logger)
	if err != nil {
		return nil, err
	}
	for i, sub := range ps.subs {
		router.AddConsumerHandler(fmt.Sprintf("groups-%d", i), groupsTopic, sub, func(msg *message.Message) error {
			deliver(msg.Payload)
			return nil
		})
	}
	done := make(chan error, 1)
	go func() { done <- router.Run(b.ctx) }()
	select {
	case <-router.Running():
	case err := <-done:
		return nil, fmt.Errorf("router stopped: %w", err)
	}
	stop = func() error { return errors.Join(router.Close(), <-done) }
	if err := b.awaitArmed([]string{groupsTopic}); err != nil {
		return nil, errors.Join(err, stop())
	}
	return stop, nil
}

// groupsSettled returns what is left of a finished run in Redis ("" for
// nothing): every message was acknowledged, so no consumer group holds
// any, and the fair queues' keys are gone (fair.lua's invariant).
func (b *bench) groupsSettled() string {
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: b.admin})
	if err != nil {
		return err.Error()
	}
	var left []string
	check := func() {
		left = left[:0]
		st, err := insp.Stats(b.ctx, groupsTopic)
		if err != nil {
			left = append(left, err.Error())
			return
		}
		if st.Waiting != 0 {
			left = append(left, fmt.Sprintf("%d waiting", st.Waiting))
		}
		for _, g := range st.Groups {
			for _, c := range []struct {
				what string
				n    int64
			}{{"ready", g.Ready}, {"pending", g.Pending}, {"retry", g.Retry}, {"dead", g.Dead},
				{"grouped", g.Grouped}, {"active groups", g.ActiveGroups}} {
				if c.n != 0 {
					left = append(left, fmt.Sprintf("%s: %d %s", g.Group, c.n, c.what))
				}
			}
		}
		shard := redisdelay.DefaultKeyPrefix + ":{" + groupsTopic + "}:g:" + consumerGroup + ":"
		for _, k := range []string{"fq", "fring", "fprio", "fwait"} {
			if n, err := b.admin.Exists(b.ctx, shard+k).Result(); err != nil || n != 0 {
				left = append(left, fmt.Sprintf("key %s exists (%v)", shard+k, err))
			}
		}
	}
	check()
	if len(left) > 0 {
		// Acknowledgements are written in the background: one more look.
		time.Sleep(2 * time.Second)
		first := strings.Join(left, ", ")
		check()
		if len(left) == 0 {
			progress("   settled only 2s after Close (at Close: %s)", first)
			return ""
		}
	}
	return strings.Join(left, ", ")
}

// slowlogFrom logs calls of usec or more in SLOWLOG (up to 100,000 of
// them); it returns what restores the previous settings.
func (b *bench) slowlogFrom(usec int) (func(), error) {
	old := map[string]string{}
	restore := func() {
		for k, v := range old {
			_ = b.admin.ConfigSet(b.ctx, k, v).Err()
		}
	}
	for k, v := range map[string]string{"slowlog-log-slower-than": strconv.Itoa(usec), "slowlog-max-len": "100000"} {
		was, err := b.admin.ConfigGet(b.ctx, k).Result()
		if err == nil {
			err = b.admin.ConfigSet(b.ctx, k, v).Err()
		}
		if err != nil {
			restore()
			return nil, err
		}
		old[k] = was[k]
	}
	return restore, b.admin.SlowLogReset(b.ctx).Err()
}

// slowString is a SlowCall at scenario 12's threshold.
func slowString(s SlowCall) string {
	if s.Calls == 0 {
		return fmt.Sprintf("none ≥ %d µs", groupsSlowlogUsec)
	}
	return fmt.Sprintf("%s ms, %s; %d calls ≥ %d µs, %d ≥ 10 ms", formatNumber(s.Ms), s.Command, s.Calls, groupsSlowlogUsec, s.Over10)
}

// groupsMarkdown writes scenario 12's runs as two tables.
func (r *Report) groupsMarkdown(sb *strings.Builder) {
	g := r.Groups
	if g == nil || len(g.Fairness)+len(g.Cost) == 0 {
		return
	}
	load := func(l MachineLoad) string { return fmt.Sprintf("%.0f%% / %.0f%%", l.Bench, l.Others) }
	if len(g.Fairness) > 0 {
		sb.WriteString("\n### 12b. Fairness, run by run\n\n")
		sb.WriteString("The small tenants' latency is from each message's publish to its delivery in the handler. Positions: in the delivery order of the run (1 = first). " +
			"Backlog: the big tenant's messages not yet delivered when the small tenants began publishing, and where they were (Inspector.Stats: waiting = not yet promoted, grouped = in the groups' queues, ready, pending); " +
			"big before last: the big tenant's messages delivered after that and before the last small one. Pause: the longest time between two deliveries. " +
			"CPU: the bench process and the other processes of the machine but Redis, % of a core. Slowest: SLOWLOG (wall time: it counts the time Redis waited for a core).\n\n")
		sb.WriteString("| subscribers | groups | big burst published in | backlog at small publish | small latency p50 / p99 / max, ms | small positions first / p50 / last | big before last small | all delivered in | pause, ms | CPU bench / others | duplicates | slowest call |\n")
		sb.WriteString("|--:|---|--:|---|---|---|--:|--:|--:|--:|--:|---|\n")
		for _, f := range g.Fairness {
			mode := "none (FIFO)"
			switch {
			case f.Grouped && f.Promoted:
				mode = "SetGroup(tenant), small ones published once the burst was promoted"
			case f.Grouped:
				mode = "SetGroup(tenant)"
			}
			lat := "—"
			if f.Small != nil {
				lat = fmt.Sprintf("%s / %s / %s", formatNumber(f.Small.P50), formatNumber(f.Small.P99), formatNumber(f.Small.Max))
			}
			fmt.Fprintf(sb, "| %d | %s | %.2f s | %s (%s) | %s | %s / %s / %s of %s | %s | %.2f s | %s | %s | %d | %s |\n",
				f.Subscribers, mode, f.BigPublishSeconds, formatNumber(float64(f.BacklogAtSmall)), f.AtSmall, lat,
				formatNumber(float64(f.PosFirst)), formatNumber(float64(f.PosP50)), formatNumber(float64(f.PosLast)),
				formatNumber(float64(f.Big+f.Tenants*f.Each)), formatNumber(float64(f.BigBefore)), f.DrainSeconds,
				formatNumber(f.LongestGapMs), load(f.Load), f.Duplicates, slowString(f.Slowest))
		}
	}
	if len(g.Cost) > 0 {
		sb.WriteString("\n### 12c. Cost of groups, run by run\n\n")
		sb.WriteString("Messages published one per call from 64 goroutines while the subscribers consume; rate = messages / (last delivery − first publish). " +
			"Redis CPU (INFO cpu) and script time (INFO commandstats) per message over the run; evalsha µs/call is commandstats' usec_per_call. " +
			"Pause, CPU and slowest as in 12b.\n\n")
		sb.WriteString("| setting | subscribers | msg/s | × no groups | Redis CPU µs/msg | script calls/msg | script µs/msg | evalsha µs/call | pause, ms | CPU bench / others | duplicates | slowest call |\n")
		sb.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
		var base *float64
		for _, c := range g.Cost {
			if c.Groups == 0 {
				base = c.Rate
			}
			ratio := ""
			if c.Groups > 0 && base != nil && c.Rate != nil && *base > 0 {
				ratio = formatRatio(*c.Rate / *base)
			}
			fmt.Fprintf(sb, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n",
				groupsLabel(c.Groups, c.Concurrency), c.Subscribers, formatValue(c.Rate), ratio, formatNumber(c.CPUUsecPerMsg),
				formatNumber(c.ScriptCallsPerMsg), formatNumber(c.ScriptUsecPerMsg), formatNumber(c.ScriptUsecPerCall),
				formatNumber(c.LongestGapMs), load(c.Load), c.Duplicates, slowString(c.Slowest))
		}
	}
}
