package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// The shape in which issue 14's user publishes: UUIDv4 ids, Watermill's
// delay metadata (delay.For or delay.Until), 100 B payloads, Publish calls
// of 500 messages from 8 goroutines.
const (
	userPublishers = 8
	userBatch      = 500
	userPayload    = 100
)

// Topics of scenarios 7 and 10.
const (
	backlogTopic = "backlog"
	spikeTopic   = "spike"
)

// slowlogThreshold is the SLOWLOG threshold of scenarios 7 and 10: calls
// that take longer are logged (the bound is 10 ms).
const slowlogThreshold = time.Millisecond

// BacklogStep is what scenario 7 measured at one size of the ladder.
type BacklogStep struct {
	Size        int     `json:"size"` // waiting messages in the topic
	FillSeconds float64 `json:"fill_seconds"`
	FillRate    float64 `json:"fill_rate"`
	UsedMemory  int64   `json:"used_memory"` // INFO used_memory after the fill
	// BytesPerMsg is the used_memory growth of all fills so far over Size;
	// StepBytesPerMsg that of this step's fill over the messages it added.
	BytesPerMsg     float64 `json:"bytes_per_msg"`
	StepBytesPerMsg float64 `json:"step_bytes_per_msg"`
	// PublishRate: Scaling messages due in -backlog-due, 500 per call from 8
	// goroutines, no scheduler running; the median of publishRounds
	// rounds (PublishRates), each followed by the same publish to a topic
	// that holds no backlog, in the same Redis (EmptyPublishRates, median
	// EmptyPublishRate). Both topics grow alike over the rounds; only the
	// backlog tells them apart, while the heap around them is the same.
	PublishRate       *float64  `json:"publish_rate"`
	PublishRates      []float64 `json:"publish_rates"`
	EmptyPublishRate  *float64  `json:"empty_topic_publish_rate"`
	EmptyPublishRates []float64 `json:"empty_topic_publish_rates"`
	// PublishCPUUsec and EmptyPublishCPUUsec: the Redis CPU (INFO cpu) a
	// message of those rounds cost, medians. On a shared or stolen CPU a
	// rate follows the machine's load; what Redis spends a message does
	// not, so their ratio says what the backlog costs a publish.
	PublishCPUUsec      *float64  `json:"publish_cpu_usec_per_msg"`
	PublishCPUs         []float64 `json:"publish_cpu_usec"`
	EmptyPublishCPUUsec *float64  `json:"empty_topic_publish_cpu_usec_per_msg"`
	EmptyPublishCPUs    []float64 `json:"empty_topic_publish_cpu_usec"`
	// PublishClientUsec and EmptyPublishClientUsec: the bench process's CPU
	// (getrusage) a message of those rounds, medians: the publisher's side,
	// which builds a message's far arguments (its far filter bit, index
	// shards and fingerprint) only for the backlog topic. On this bench's
	// one machine the publisher and Redis share the cores, so the rates'
	// ratio holds both; a Redis that publishers do not share a machine
	// with runs at the Redis CPU's ratio.
	PublishClientUsec      *float64  `json:"publish_client_cpu_usec_per_msg"`
	PublishClients         []float64 `json:"publish_client_cpu_usec"`
	EmptyPublishClientUsec *float64  `json:"empty_topic_publish_client_cpu_usec_per_msg"`
	EmptyPublishClients    []float64 `json:"empty_topic_publish_client_cpu_usec"`
	// PromoteRate: those messages moved by a Manager alone; the Redis cost
	// per message moved: script time (INFO commandstats) and server CPU.
	PromoteRate       *float64 `json:"promote_rate"`
	PromoteScriptUsec float64  `json:"promote_script_usec_per_msg"`
	PromoteCPUUsec    float64  `json:"promote_cpu_usec_per_msg"`
	// DeliveryRate: Scaling messages due at one instant T, delivered and
	// acknowledged by subscribers: messages / (last delivery − T); the
	// median of publishRounds rounds (DeliveryRates), and the lateness of
	// that round.
	DeliveryRate  *float64  `json:"delivery_rate"`
	DeliveryRates []float64 `json:"delivery_rates"`
	Delivery      *Lateness `json:"delivery_lateness"`
	// SLOWLOG of the fill, and of the measurements after it; the fill's
	// Redis CPU time per publish call (INFO cpu over the calls counted by
	// INFO commandstats), against which its SLOWLOG wall times compare.
	FillSlowest      SlowCall  `json:"fill_slowest"`
	FillCPUMsPerCall float64   `json:"fill_redis_cpu_ms_per_call"`
	Slowest          SlowCall  `json:"slowest"`
	FarCalls         *FarProbe `json:"far_calls,omitempty"`
	// Lookups: Find, Reschedule and Cancel by UUID of far messages of the
	// backlog, one at a time from one client, as a user calls them.
	Lookups *Lookups `json:"lookups,omitempty"`
	// FilterSeconds is how long the rebuild of the backlog's far filter
	// took after the fill (the partition's scheduler runs it at its next
	// trim; no scheduler runs during the ladder's fill); used_memory is
	// measured after it, with the filter.
	FilterSeconds float64 `json:"far_filter_rebuild_seconds"`
}

// FarProbe is the end of a fill published from one goroutine: far publish
// calls of the user's shape while Redis has a core to itself. In the 8
// publishers' part of the fill, their encoding shares the machine's 2
// cores with Redis, and SLOWLOG's wall time also counts the time Redis
// waits for a CPU.
type FarProbe struct {
	// Calls counts the script runs (a Publish call of 500 messages due
	// over a month is stored in about 4 parts: see maxPartFarBuckets in
	// publisher.go); the percentiles are of their SLOWLOG times.
	Calls int `json:"calls"`
	// Unlogged runs took less than probeSlowlogUsec, so SLOWLOG did not
	// log them (most likely a run that only answers "run again" with the
	// index's new shape, or the Publisher's announce.lua): the percentiles
	// count each at that bound.
	Unlogged     int     `json:"unlogged,omitempty"`
	Publishes    int     `json:"publishes"` // Publish calls of 500
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	CPUMsPerCall float64 `json:"redis_cpu_ms_per_call"` // per script run
	// CPUMsPerPublish is Redis CPU per Publish call of 500.
	CPUMsPerPublish float64 `json:"redis_cpu_ms_per_publish,omitempty"`
}

// Lookups are the latencies (ms, client-side, one call at a time) of
// Inspector.FindWaiting, Publisher.Reschedule (to a due time in the far
// tier) and Publisher.Cancel of N messages sampled from the backlog's
// fills, each found.
type Lookups struct {
	N int `json:"n"`
	LookupPercentiles
	// Server: the same percentiles of the time Redis spent executing each
	// call's commands (SLOWLOG at a threshold of 0, summed over the call),
	// which tells Redis's share of a tail from the client's, the network
	// stack's and the host's.
	Server *LookupServer `json:"server,omitempty"`
	// PingP50 and PingP99 (ms) are of a PING timed on the same client
	// after each lookup: the floor this host puts under any round trip,
	// so a lookup's tail is told from the host's stalls in the same run
	// (this VM reports no steal time in /proc/stat).
	PingP50 float64 `json:"ping_p50_ms,omitempty"`
	PingP99 float64 `json:"ping_p99_ms,omitempty"`
	// GCs the bench process ran during the lookups (a stop of its own).
	GCs uint32 `json:"gcs"`
}

// LookupPercentiles are p50 and p99 (ms) of each lookup.
type LookupPercentiles struct {
	FindP50    float64 `json:"find_p50_ms"`
	FindP99    float64 `json:"find_p99_ms"`
	ReschedP50 float64 `json:"reschedule_p50_ms"`
	ReschedP99 float64 `json:"reschedule_p99_ms"`
	CancelP50  float64 `json:"cancel_p50_ms"`
	CancelP99  float64 `json:"cancel_p99_ms"`
}

// lookupPercentiles sorts each sample and takes its percentiles.
func lookupPercentiles(find, resched, cancel []float64) LookupPercentiles {
	for _, v := range [][]float64{find, resched, cancel} {
		slices.Sort(v)
	}
	return LookupPercentiles{FindP50: percentile(find, 0.5), FindP99: percentile(find, 0.99),
		ReschedP50: percentile(resched, 0.5), ReschedP99: percentile(resched, 0.99),
		CancelP50: percentile(cancel, 0.5), CancelP99: percentile(cancel, 0.99)}
}

// LookupServer is Lookups.Server.
type LookupServer struct {
	LookupPercentiles
	// Commands a call (a script run is one, whatever it runs).
	FindCommands, ReschedCommands, CancelCommands float64
}

func (l *Lookups) String() string {
	s := fmt.Sprintf("%d far messages: Find p50 %.2f, p99 %.2f ms; Reschedule p50 %.2f, p99 %.2f ms; Cancel p50 %.2f, p99 %.2f ms",
		l.N, l.FindP50, l.FindP99, l.ReschedP50, l.ReschedP99, l.CancelP50, l.CancelP99)
	if v := l.Server; v != nil {
		s += fmt.Sprintf("; in Redis: Find p50 %.3f, p99 %.3f ms (%.1f commands); Reschedule p50 %.3f, p99 %.3f ms (%.1f); Cancel p50 %.3f, p99 %.3f ms (%.1f)",
			v.FindP50, v.FindP99, v.FindCommands, v.ReschedP50, v.ReschedP99, v.ReschedCommands, v.CancelP50, v.CancelP99, v.CancelCommands)
	}
	if l.PingP99 > 0 {
		s += fmt.Sprintf("; a PING after each: p50 %.3f, p99 %.3f ms; %d GCs of the bench", l.PingP50, l.PingP99, l.GCs)
	}
	return s
}

// fillSample, when set (during a ladder's fill), keeps the UUID of one
// message of every few the fill publishes, up to lookupSample, for the
// step's lookups.
var fillSample *uuidSample

const lookupSample = 1000

type uuidSample struct {
	mu    sync.Mutex
	every int // keep one of every
	n     int
	ids   []string
}

func (s *uuidSample) offer(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n++; s.n%s.every == 0 && len(s.ids) < lookupSample {
		s.ids = append(s.ids, id)
	}
}

// lookups measures Lookups on ids, far messages of the backlog: Find on
// each, then Cancel on half of them and Reschedule (to another due time
// in the far tier) on the other half. Each must find its message.
func (b *bench) lookups(client *redis.Client, ids []string) (*Lookups, error) {
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, b.logger)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	if err != nil {
		return nil, err
	}
	// each lookup's client and Redis times (ms) and its commands
	type sample struct {
		client, server []float64
		commands       int
	}
	var find, cancel, resched sample
	var ping []float64
	var gc0 runtime.MemStats
	runtime.ReadMemStats(&gc0)
	// Every command is logged while the lookups run (nothing else does),
	// and the log is read and emptied between two calls, outside the
	// timed part: each call's server time is the sum of its commands'.
	if err := b.admin.ConfigSet(b.ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		return nil, err
	}
	defer b.admin.ConfigSet(b.ctx, "slowlog-log-slower-than", strconv.FormatInt(slowlogThreshold.Microseconds(), 10))
	if err := b.admin.SlowLogReset(b.ctx).Err(); err != nil {
		return nil, err
	}
	timed := func(into *sample, what, id string, f func() (bool, error)) error {
		t0 := time.Now()
		ok, err := f()
		into.client = append(into.client, float64(time.Since(t0).Microseconds())/1e3)
		if err == nil && !ok {
			err = fmt.Errorf("%s did not find %s", what, id)
		}
		if err != nil {
			return err
		}
		t0 = time.Now()
		if err := client.Ping(b.ctx).Err(); err != nil {
			return err
		}
		ping = append(ping, float64(time.Since(t0).Microseconds())/1e3)
		pipe := b.admin.Pipeline()
		logs := pipe.SlowLogGet(b.ctx, -1)
		pipe.SlowLogReset(b.ctx)
		if _, err := pipe.Exec(b.ctx); err != nil {
			return err
		}
		var took time.Duration
		for _, l := range logs.Val() {
			// Redis 7 logs the commands a script runs too, as the client
			// "?:0": the script's own entry already counts their time.
			// The PING is the floor's, not the call's.
			if len(l.Args) > 0 && !strings.EqualFold(l.Args[0], "slowlog") && !strings.EqualFold(l.Args[0], "ping") && l.ClientAddr != "?:0" {
				took += l.Duration
				into.commands++
			}
		}
		into.server = append(into.server, float64(took.Microseconds())/1e3)
		return nil
	}
	for _, id := range ids {
		if err := timed(&find, "FindWaiting", id, func() (bool, error) {
			_, ok, err := insp.FindWaiting(b.ctx, backlogTopic, id)
			return ok, err
		}); err != nil {
			return nil, err
		}
	}
	for i, id := range ids {
		var err error
		if i%2 == 0 {
			err = timed(&cancel, "Cancel", id, func() (bool, error) { return pub.Cancel(b.ctx, backlogTopic, id) })
		} else {
			err = timed(&resched, "Reschedule", id, func() (bool, error) {
				return pub.Reschedule(b.ctx, backlogTopic, id, time.Now().Add(backlogDelay()))
			})
		}
		if err != nil {
			return nil, err
		}
	}
	if len(resched.client) == 0 {
		return nil, fmt.Errorf("a sample of %d far messages is too small", len(ids))
	}
	var gc1 runtime.MemStats
	runtime.ReadMemStats(&gc1)
	slices.Sort(ping)
	per := func(s sample) float64 { return float64(s.commands) / float64(len(s.client)) }
	return &Lookups{N: len(ids), LookupPercentiles: lookupPercentiles(find.client, resched.client, cancel.client),
		Server: &LookupServer{LookupPercentiles: lookupPercentiles(find.server, resched.server, cancel.server),
			FindCommands: per(find), ReschedCommands: per(resched), CancelCommands: per(cancel)},
		PingP50: percentile(ping, 0.5), PingP99: percentile(ping, 0.99), GCs: gc1.NumGC - gc0.NumGC}, nil
}

func (p *FarProbe) String() string {
	if p == nil {
		return "—"
	}
	if p.Publishes == 0 { // a run from before calls went in parts
		return fmt.Sprintf("p50 %s, p99 %s, max %s ms (%d calls; Redis CPU %s ms a call)",
			formatNumber(p.P50Ms), formatNumber(p.P99Ms), formatNumber(p.MaxMs), p.Calls, formatNumber(p.CPUMsPerCall))
	}
	unlogged := ""
	if p.Unlogged > 0 {
		unlogged = fmt.Sprintf(", %d under %d µs", p.Unlogged, probeSlowlogUsec)
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s ms (%d script runs for %d calls%s; Redis CPU %s ms a run, %s a call)",
		formatNumber(p.P50Ms), formatNumber(p.P99Ms), formatNumber(p.MaxMs), p.Calls, p.Publishes, unlogged,
		formatNumber(p.CPUMsPerCall), formatNumber(p.CPUMsPerPublish))
}

// SpikeRun is one run of scenario 10.
type SpikeRun struct {
	Messages    int       `json:"messages"`
	Partitions  int       `json:"partitions"`
	Subscribers int       `json:"subscribers"`
	PublishRate float64   `json:"publish_rate"`
	Lateness    *Lateness `json:"lateness"` // from T; Max: the last delivery
	// Rate is messages / (last delivery − T).
	Rate *float64 `json:"rate"`
	// SLOWLOG from the first publish on, and from T on.
	Slowest      SlowCall `json:"slowest"`
	SlowestAfter SlowCall `json:"slowest_after_due"`
	// Over10 are the calls of 10 ms or more from the first publish on
	// (at most 20, oldest first): which ones break the 10 ms
	// bound for a script run, which Slowest alone does not tell.
	Over10 []SlowEntry `json:"over_10ms,omitempty"`
}

// SlowCall is the slowest call SLOWLOG recorded over a part of a run.
type SlowCall struct {
	Ms      float64 `json:"ms"`
	Command string  `json:"command,omitempty"`
	Calls   int     `json:"calls_over_threshold"` // calls ≥ slowlogThreshold
	Over10  int     `json:"calls_over_10ms"`
}

func (s SlowCall) String() string {
	if s.Calls == 0 {
		return fmt.Sprintf("none ≥ %s", slowlogThreshold)
	}
	return fmt.Sprintf("%s ms, %s; %d calls ≥ %s, %d ≥ 10 ms", formatNumber(s.Ms), s.Command, s.Calls, slowlogThreshold, s.Over10)
}

// backlogDelay is the delay of a backlog message: 1 to 30 days ahead,
// uniformly, as reminders and trial ends are spread.
func backlogDelay() time.Duration {
	return 24*time.Hour + rand.N(29*24*time.Hour)
}

// untracked marks payloads the delivery handler counts without a tracker.
const untracked = math.MaxUint64

// publishUser publishes n messages at the user's shape to topic, with the
// delay due returns for each. With t, message i carries i in the first 8
// bytes of its payload and is tracked; without, the payload is shared and
// marked untracked. done, if not nil, counts published messages.
func publishUser(pub message.Publisher, topic string, n int, payload []byte, t *tracker, due func() delay.Delay, done *atomic.Int64) (time.Duration, error) {
	return publishUserFrom(userPublishers, pub, topic, n, payload, t, due, done)
}

// fillKeys, when set (-backlog-keyed, during a ladder's fill), numbers the
// business keys publishUserFrom gives its messages.
var fillKeys *atomic.Int64

// publishUserFrom is publishUser from the given number of goroutines.
func publishUserFrom(goroutines int, pub message.Publisher, topic string, n int, payload []byte, t *tracker, due func() delay.Delay, done *atomic.Int64) (time.Duration, error) {
	shared := make([]byte, len(payload))
	copy(shared, payload)
	binary.BigEndian.PutUint64(shared, untracked)
	return runPublishersN(goroutines, n, userBatch, func(first, count int) error {
		msgs := make([]*message.Message, count)
		for i := range msgs {
			p := shared
			if t != nil {
				p = make([]byte, len(payload))
				copy(p, payload)
				binary.BigEndian.PutUint64(p, uint64(first+i))
			}
			msgs[i] = message.NewMessage(watermill.NewUUID(), p)
			delay.Message(msgs[i], due())
			if fillKeys != nil {
				msgs[i].Metadata.Set(redisdelay.BusinessKey, "order-"+strconv.FormatInt(fillKeys.Add(1), 10))
			}
			if fillSample != nil {
				fillSample.offer(msgs[i].UUID)
			}
		}
		err := pub.Publish(topic, msgs...)
		if done != nil && err == nil {
			done.Add(int64(count))
		}
		return err
	})
}

// backlogLadder measures scenario 7: one topic grown to each size of
// -backlogs in one Redis, with at each size the memory per waiting message,
// the delayed publish rate, the promotion rate and cost, the due delivery
// rate and the slowest call. It stops before a size whose fill would take
// Redis past -max-memory.
func (b *bench) backlogLadder() {
	if b.failed("flush", b.flush()) {
		return
	}
	restore, err := b.limitRedis()
	if b.failed("configure Redis for the ladder", err) {
		return
	}
	defer restore()
	payload := randomPayload(userPayload)
	client := newClient(b.addr, poolSize)
	defer client.Close()
	base, err := b.settledMemory()
	if b.failed("INFO memory", err) {
		return
	}
	var (
		current int   // messages waiting
		grown   int64 // used_memory growth of the fills
		perMsg  float64
		used    = base
	)
	for _, size := range b.opts.Backlogs {
		add := size - current
		if need := used + int64(1.1*perMsg*float64(add)); perMsg > 0 && need > b.opts.MaxMemory {
			b.rep.BacklogLimit = fmt.Sprintf("%s not reached: at %s B per message it would take Redis to about %.1f GB, over -max-memory %.1f GB (maxmemory, noeviction)",
				count(size), formatNumber(perMsg), float64(need)/1e9, float64(b.opts.MaxMemory)/1e9)
			progress("ladder stops: %s", b.rep.BacklogLimit)
			break
		}
		step := &BacklogStep{Size: size}
		if b.failed("SLOWLOG RESET", b.admin.SlowLogReset(b.ctx).Err()) {
			return
		}
		before, err := b.settledMemory()
		if b.failed("INFO memory", err) {
			return
		}
		// The fill's last messages come from one goroutine (farProbe).
		probe := min(farProbeMessages, add/2/userBatch*userBatch)
		progress("filling the backlog from %s to %s (500 per call × 8 goroutines, due in 1–30 days; the last %s from one)",
			count(current), count(size), count(probe))
		if b.failed("CONFIG RESETSTAT", b.admin.ConfigResetStat(b.ctx).Err()) {
			return
		}
		cpu0, err := cpuSeconds(b.ctx, b.admin)
		if b.failed("INFO cpu", err) {
			return
		}
		d, err := b.fillBacklog(client, current, add-probe, payload)
		if err != nil {
			b.rep.BacklogLimit = fmt.Sprintf("%s not reached: filling from %s failed: %v", count(size), count(current), err)
			b.rep.errorf("backlog fill: %s", b.rep.BacklogLimit)
			break
		}
		step.FillSeconds, step.FillRate = d.Seconds(), float64(add-probe)/d.Seconds()
		cpu1, err := cpuSeconds(b.ctx, b.admin)
		if b.failed("INFO cpu", err) {
			return
		}
		stats, err := commandStats(b.ctx, b.admin)
		if b.failed("INFO commandstats", err) {
			return
		}
		if calls, _ := scriptCalls(stats); calls > 0 {
			step.FillCPUMsPerCall = (cpu1 - cpu0) * 1e3 / float64(calls)
		}
		if step.FillSlowest, err = b.slowest(time.Time{}); b.failed("SLOWLOG GET", err) {
			return
		}
		if probe > 0 {
			if step.FarCalls, err = b.farProbe(client, probe, payload); err != nil {
				b.rep.BacklogLimit = fmt.Sprintf("%s not reached: the far publish calls from one goroutine failed: %v", count(size), err)
				b.rep.errorf("backlog fill: %s", b.rep.BacklogLimit)
				break
			}
		}
		// What the partition's scheduler does at its next trim, a
		// TrimInterval after the fill (none runs during it): rebuild the
		// far filter when trim.lua asks (the fills outgrow it). With
		// -backlog-cold, after the publish rounds instead.
		rebuild := func() bool {
			t0 := time.Now()
			backlogShard := store.Keys{Prefix: redisdelay.DefaultKeyPrefix}.Shard(backlogTopic, 0)
			tr, err := store.Trim(b.ctx, client, backlogShard, 0, store.LevelNewest)
			if b.failed("trim", err) {
				return false
			}
			if tr.FarFilter && b.failed("rebuild the far filter", store.RebuildFarFilter(b.ctx, client, backlogShard, "bench", store.LevelNewest)) {
				return false
			}
			step.FilterSeconds = time.Since(t0).Seconds()
			return true
		}
		if !b.opts.BacklogCold && !rebuild() {
			return
		}
		after, err := b.settledMemory()
		if b.failed("INFO memory", err) {
			return
		}
		grown += after - before
		step.UsedMemory = after
		step.BytesPerMsg = float64(grown) / float64(size)
		step.StepBytesPerMsg = float64(after-before) / float64(add)
		perMsg = max(step.BytesPerMsg, step.StepBytesPerMsg)
		current = size
		filter := fmt.Sprintf("far filter rebuilt in %.1f s", step.FilterSeconds)
		if b.opts.BacklogCold {
			filter = "far filter not rebuilt yet (-backlog-cold; memory without it)"
		}
		progress("backlog %s: %s B/msg (this step %s B/msg), used_memory %.2f GB, filled at %s msg/s; slowest call %s, Redis CPU %s ms a call; far calls from one goroutine: %s; %s",
			count(size), formatNumber(step.BytesPerMsg), formatNumber(step.StepBytesPerMsg), float64(after)/1e9,
			formatNumber(step.FillRate), step.FillSlowest, formatNumber(step.FillCPUMsPerCall), step.FarCalls, filter)
		// First, while nothing else runs (the measurements below leave
		// subscribers' and the server's work behind for seconds); half the
		// sample moves to the waiting set, due days ahead, out of their way.
		if step.Lookups, err = b.lookups(client, b.sample); b.failed("lookups", err) {
			return
		}
		progress("   lookups by UUID of %s", step.Lookups)
		if b.failed("SLOWLOG RESET", b.admin.SlowLogReset(b.ctx).Err()) {
			return
		}
		b.measureAtBacklog(client, step, payload, rebuild)
		if step.Slowest, err = b.slowest(time.Time{}); b.failed("SLOWLOG GET", err) {
			return
		}
		// After the step: freeing it must not share the measured time.
		if b.failed("delete the topic with no backlog", b.deleteTopic(emptyTopic(step.Size))) {
			return
		}
		b.rep.Backlog = append(b.rep.Backlog, step)
		used, err = b.settledMemory()
		if b.failed("INFO memory", err) {
			return
		}
	}
	b.backlogRows()
}

// fillBacklog adds n far-future messages to the backlog topic, printing
// progress every 10 s, and returns how long that took.
func (b *bench) fillBacklog(client *redis.Client, from, n int, payload []byte) (time.Duration, error) {
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, b.logger)
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	var done atomic.Int64
	start := time.Now()
	stop := every(10*time.Second, func() {
		mem, _ := usedMemory(b.ctx, b.admin)
		k := done.Load()
		progress("   %s of %s waiting (%s msg/s), used_memory %.2f GB", count(from+int(k)), count(from+n),
			formatNumber(float64(k)/time.Since(start).Seconds()), float64(mem)/1e9)
	})
	if b.opts.BacklogKeyed {
		fillKeys = &b.keys
		defer func() { fillKeys = nil }()
	}
	fillSample = &uuidSample{every: max(1, n/lookupSample)}
	defer func() { b.sample, fillSample = fillSample.ids, nil }()
	d, err := publishUser(pub, backlogTopic, n, payload, nil, func() delay.Delay { return delay.For(backlogDelay()) }, &done)
	stop()
	return d, err
}

// farProbeMessages is how many messages of a fill farProbe publishes.
const farProbeMessages = 50_000

// slowlogMaxLen is SLOWLOG's length during the ladder: far more entries
// than a fill's or a measurement's calls over the thresholds.
const slowlogMaxLen = 100_000

// probeSlowlogUsec is farProbe's SLOWLOG threshold: below any script run
// of a far call's part, above almost every command such a run runs.
const probeSlowlogUsec = 100

// farProbe publishes n far messages (due in 1–30 days) to the backlog topic
// from one goroutine, with every script run over probeSlowlogUsec logged by
// SLOWLOG, and returns the runs' times and Redis CPU per call. It fails
// when SLOWLOG holds more runs than were made or is full (it lost some).
func (b *bench) farProbe(client *redis.Client, n int, payload []byte) (*FarProbe, error) {
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, b.logger)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	// Over probeSlowlogUsec rather than every call: Redis 7 also logs each
	// command a script runs, which would push the scripts out of the log.
	if err := b.admin.ConfigSet(b.ctx, "slowlog-log-slower-than", strconv.Itoa(probeSlowlogUsec)).Err(); err != nil {
		return nil, err
	}
	defer b.admin.ConfigSet(b.ctx, "slowlog-log-slower-than", strconv.FormatInt(slowlogThreshold.Microseconds(), 10))
	if err := errors.Join(b.admin.SlowLogReset(b.ctx).Err(), b.admin.ConfigResetStat(b.ctx).Err()); err != nil {
		return nil, err
	}
	cpu0, err := cpuSeconds(b.ctx, b.admin)
	if err != nil {
		return nil, err
	}
	if b.opts.BacklogKeyed {
		fillKeys = &b.keys
		defer func() { fillKeys = nil }()
	}
	if _, err := publishUserFrom(1, pub, backlogTopic, n, payload, nil, func() delay.Delay { return delay.For(backlogDelay()) }, nil); err != nil {
		return nil, err
	}
	cpu1, err := cpuSeconds(b.ctx, b.admin)
	if err != nil {
		return nil, err
	}
	stats, err := commandStats(b.ctx, b.admin)
	if err != nil {
		return nil, err
	}
	logs, err := b.admin.SlowLogGet(b.ctx, -1).Result()
	if err != nil {
		return nil, err
	}
	var ms []float64
	for _, l := range logs {
		if len(l.Args) > 0 && strings.EqualFold(l.Args[0], "evalsha") {
			ms = append(ms, float64(l.Duration)/float64(time.Millisecond))
		}
	}
	calls, _ := scriptCalls(stats)
	logged := len(ms)
	if int64(logged) > calls || logged == 0 || len(logs) >= slowlogMaxLen {
		return nil, fmt.Errorf("SLOWLOG holds %d script runs of the %d made, %d entries in all (at most %d)", logged, calls, len(logs), slowlogMaxLen)
	}
	for int64(len(ms)) < calls {
		ms = append(ms, probeSlowlogUsec/1e3)
	}
	sort.Float64s(ms)
	p := &FarProbe{Calls: len(ms), Unlogged: len(ms) - logged, Publishes: n / userBatch,
		P50Ms: percentile(ms, 0.5), P99Ms: percentile(ms, 0.99), MaxMs: ms[len(ms)-1]}
	p.CPUMsPerCall = (cpu1 - cpu0) * 1e3 / float64(calls)
	p.CPUMsPerPublish = (cpu1 - cpu0) * 1e3 / float64(p.Publishes)
	return p, b.admin.SlowLogReset(b.ctx).Err()
}

// scriptCalls sums the calls and time INFO commandstats counts in scripts.
func scriptCalls(stats []CommandStat) (calls, usec int64) {
	for _, s := range stats {
		switch s.Command {
		case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
			calls += s.Calls
			usec += s.Usec
		}
	}
	return calls, usec
}

// publishRounds is how many times a ladder step measures publishing, to
// the backlog topic and to a topic with no backlog, alternately, and due
// delivery.
const publishRounds = 3

// measureAtBacklog measures one step of the ladder: publish of messages due
// in -backlog-due (1 ms by default) with no scheduler running
// (publishRounds times, alternating with a topic that holds no backlog),
// their promotion by a Manager alone, then
// (after subscribers drained them) the delivery of messages all due at one
// instant (publishRounds times). With -backlog-cold it runs rebuild (the
// far filter's, as the scheduler's next trim does) after the publish
// rounds, not before.
func (b *bench) measureAtBacklog(client *redis.Client, step *BacklogStep, payload []byte, rebuild func() bool) {
	n := b.opts.Scaling
	at := "at backlog " + count(step.Size)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, b.logger)
	if b.failed("publisher", err) {
		return
	}
	defer pub.Close()
	empty := emptyTopic(step.Size)
	publish := func(topic, what string, round int, into, cpu, client *[]float64) bool {
		due := b.opts.BacklogDue
		own := processCPU()
		rate := b.measure(fmt.Sprintf("publish delayed %v, 500 per call × 8, %s %s (round %d)", due, what, at, round), n, func() (time.Duration, error) {
			return publishUser(pub, topic, n, payload, nil, func() delay.Delay { return delay.For(due) }, nil)
		})
		if rate != nil {
			*into = append(*into, *rate)
			*cpu = append(*cpu, b.rep.Runs[len(b.rep.Runs)-1].CPUTime*1e6/float64(n))
			*client = append(*client, float64((processCPU()-own).Nanoseconds())/1e3/float64(n))
		}
		return rate != nil
	}
	for r := 1; r <= publishRounds; r++ {
		// in turn first, so neither topic always follows the other
		backlogFirst := r%2 == 1
		for _, first := range []bool{backlogFirst, !backlogFirst} {
			var ok bool
			if first {
				ok = publish(backlogTopic, "to the backlog topic", r, &step.PublishRates, &step.PublishCPUs, &step.PublishClients)
			} else {
				ok = publish(empty, "to a topic with no backlog", r, &step.EmptyPublishRates, &step.EmptyPublishCPUs, &step.EmptyPublishClients)
			}
			if !ok {
				return
			}
		}
	}
	step.PublishRate, step.EmptyPublishRate = ptr(median(step.PublishRates)), ptr(median(step.EmptyPublishRates))
	progress("   publish: %s msg/s to the backlog topic, %s to a topic with no backlog (medians of %d; %.2f×)",
		formatNumber(*step.PublishRate), formatNumber(*step.EmptyPublishRate), publishRounds, *step.PublishRate / *step.EmptyPublishRate)
	step.PublishCPUUsec, step.EmptyPublishCPUUsec = ptr(median(step.PublishCPUs)), ptr(median(step.EmptyPublishCPUs))
	progress("   Redis CPU a message: %.2f µs to the backlog topic, %.2f µs to a topic with no backlog (medians of %d; the backlog's %.2f× the other's rate at that cost)",
		*step.PublishCPUUsec, *step.EmptyPublishCPUUsec, publishRounds, *step.EmptyPublishCPUUsec / *step.PublishCPUUsec)
	step.PublishClientUsec, step.EmptyPublishClientUsec = ptr(median(step.PublishClients)), ptr(median(step.EmptyPublishClients))
	progress("   the publisher's CPU a message (this process): %.2f µs to the backlog topic, %.2f µs to a topic with no backlog (medians of %d; %.2f×)",
		*step.PublishClientUsec, *step.EmptyPublishClientUsec, publishRounds, *step.EmptyPublishClientUsec / *step.PublishClientUsec)
	if b.opts.BacklogCold {
		if !rebuild() {
			return
		}
		progress("   far filter rebuilt in %.1f s, after the publish rounds (-backlog-cold)", step.FilterSeconds)
	}
	time.Sleep(b.opts.BacklogDue + 10*time.Millisecond) // all due
	moved := publishRounds * n
	step.PromoteRate = b.measure(fmt.Sprintf("promote %s due, Manager alone, %s", count(moved), at), moved, func() (time.Duration, error) {
		return promote(b.ctx, b.logger, client, backlogTopic, int64(step.Size))
	})
	if step.PromoteRate == nil {
		return
	}
	run := b.rep.Runs[len(b.rep.Runs)-1]
	step.PromoteScriptUsec = float64(run.ScriptUsec) / float64(moved)
	step.PromoteCPUUsec = run.CPUTime * 1e6 / float64(moved)
	progress("   promotion costs Redis %.2f µs of scripts, %.2f µs of CPU per message", step.PromoteScriptUsec, step.PromoteCPUUsec)
	lats := map[float64]*Lateness{}
	for r := 1; r <= publishRounds; r++ {
		drain := 0
		if r == 1 {
			drain = moved // the promoted messages go first
		}
		lat, rate, _ := b.dueAtOnce(client, pub, backlogTopic, 1, n, drain, payload, *step.PublishRate,
			fmt.Sprintf("deliver %s due at once, %d subscribers, %s (round %d)", count(n), b.opts.Subscribers, at, r))
		if rate == nil {
			return
		}
		step.DeliveryRates = append(step.DeliveryRates, *rate)
		lats[*rate] = lat
	}
	// an odd number of rounds: the median is one of them
	step.DeliveryRate = ptr(median(step.DeliveryRates))
	step.Delivery = lats[*step.DeliveryRate]
}

// median returns the median of vs (not empty), leaving vs as it is.
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// emptyTopic is the topic with no backlog that a ladder step publishes to
// beside the backlog topic.
func emptyTopic(size int) string { return "empty-" + strconv.Itoa(size) }

// deleteTopic removes an unpartitioned topic's keys and its registry entry,
// with DEL rather than UNLINK: the memory is free when it returns.
func (b *bench) deleteTopic(topic string) error {
	iter := b.admin.Scan(b.ctx, 0, redisdelay.DefaultKeyPrefix+":{"+topic+"}*", 10_000).Iterator()
	var keys []string
	for iter.Next(b.ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) > 0 {
		if err := b.admin.Del(b.ctx, keys...).Err(); err != nil {
			return err
		}
	}
	pipe := b.admin.Pipeline()
	pipe.SRem(b.ctx, redisdelay.DefaultKeyPrefix+":topics", topic)
	pipe.HDel(b.ctx, redisdelay.DefaultKeyPrefix+":partitions", topic)
	_, err := pipe.Exec(b.ctx)
	return err
}

// dueAtOnce runs subscribers (defaults, embedded schedulers on) of topic
// through a Router with an ack-only handler, waits until they have handled
// drain untracked messages, then publishes n messages due at one whole
// second T (delay.Until(T), far enough ahead for publishing to end before
// it, judged from pubRate) and waits until all n are handled. It returns
// their lateness from T, the rate n / (last delivery − T) and T.
func (b *bench) dueAtOnce(client *redis.Client, pub message.Publisher, topic string, partitions, n, drain int, payload []byte, pubRate float64, name string) (*Lateness, *float64, time.Time) {
	t := newTracker(n)
	var drained atomic.Int64
	drainDone := make(chan struct{})
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, b.logger)
	if b.failed(name, err) {
		return nil, nil, time.Time{}
	}
	var subs []message.Subscriber
	defer func() {
		for _, s := range subs {
			_ = s.Close()
		}
	}()
	for i := range b.opts.Subscribers {
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
			Client:        client,
			ConsumerGroup: consumerGroup,
			Consumer:      fmt.Sprintf("c%d", i),
			Partitions:    partitions,
		}, b.logger)
		if b.failed(name, err) {
			return nil, nil, time.Time{}
		}
		subs = append(subs, sub)
		router.AddConsumerHandler(fmt.Sprintf("due-%d", i), topic, sub, func(msg *message.Message) error {
			if len(msg.Payload) >= 8 && binary.BigEndian.Uint64(msg.Payload) == untracked {
				if drained.Add(1) == int64(drain) {
					close(drainDone)
				}
				return nil
			}
			t.deliver(msg.Payload)
			return nil
		})
	}
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(b.ctx) }()
	defer func() { _ = errors.Join(router.Close(), <-runErr) }()
	select {
	case <-router.Running():
	case err := <-runErr:
		runErr <- err
		b.failed(name, fmt.Errorf("router stopped: %w", err))
		return nil, nil, time.Time{}
	}
	if drain > 0 {
		progress("   subscribers take the %s promoted messages", count(drain))
		if b.failed(name+": drain", waitFor(drainDone, drained.Load, drain)) {
			return nil, nil, time.Time{}
		}
	}
	lead := time.Second + time.Duration(2*float64(n)/pubRate*float64(time.Second))
	due := time.Now().Add(lead).Truncate(time.Second).Add(time.Second)
	var lat *Lateness
	rate := b.measure(name, n, func() (time.Duration, error) {
		for i := range t.due {
			t.due[i] = due.UnixNano()
		}
		if _, err := publishUser(pub, topic, n, payload, t, func() delay.Delay { return delay.Until(due) }, nil); err != nil {
			return 0, err
		}
		left := time.Until(due)
		if left < 0 {
			return 0, fmt.Errorf("publishing ended %s after the due time: the lead of %s was too short", -left, lead)
		}
		progress("   %s published, due in %s", count(n), left.Round(time.Millisecond))
		// Nothing can arrive before the due time: the stall watch starts
		// there (a lead over stallTimeout read as a stall).
		time.Sleep(left)
		stopProfile := startDeliveryProfile(b.ctx, b.admin, topic, name, t.delivered.Load)
		err := waitFor(t.done, t.delivered.Load, n)
		stopProfile(n)
		if err != nil {
			return 0, err
		}
		var last time.Time
		lat, last = t.lateness()
		return last.Sub(due), nil
	})
	if lat != nil {
		progress("   from the due time: p50 %s ms, p99 %s ms, last %s ms; %d duplicates",
			formatNumber(lat.P50), formatNumber(lat.P99), formatNumber(lat.Max), lat.Duplicates)
	}
	return lat, rate, due
}

// spike measures scenario 10: -spike messages due at one instant on an
// empty topic, delivered to 4 subscribers; with one partition (the
// default) and with -spike-partitions.
func (b *bench) spike() {
	parts := []int{1}
	if b.opts.SpikePartitions > 1 {
		parts = append(parts, b.opts.SpikePartitions)
	}
	for _, p := range parts {
		run := b.spikeRun(p)
		if run == nil {
			continue
		}
		b.rep.Spikes = append(b.rep.Spikes, run)
		label := fmt.Sprintf("%s due at one instant, %d subscribers, %s", count(run.Messages), run.Subscribers, partitionsLabel(run.Partitions))
		b.rep.row("10", label+": last delivered after the due time", "ms", "≤ 10,000 ms", ptr(run.Lateness.Max))
		b.rep.row("10", label+": rate from the due time", "msg/s", "", run.Rate)
		b.rep.row("10", label+": slowest call (SLOWLOG), from the first publish", "ms", "≤ 10 ms", ptr(run.Slowest.Ms))
		b.rep.row("10", label+": slowest call (SLOWLOG), from the due time", "ms", "≤ 10 ms", ptr(run.SlowestAfter.Ms))
	}
}

func (b *bench) spikeRun(partitions int) *SpikeRun {
	n := b.opts.Spike
	name := fmt.Sprintf("spike %s, %s", count(n), partitionsLabel(partitions))
	if b.failed("flush", b.flush()) {
		return nil
	}
	restore, err := b.limitRedis()
	if b.failed("configure Redis for the spike", err) {
		return nil
	}
	defer restore()
	client := newClient(b.addr, poolSize)
	defer client.Close()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, Partitions: partitions}, b.logger)
	if b.failed(name, err) {
		return nil
	}
	defer pub.Close()
	payload := randomPayload(userPayload)
	// A timed sample of far-future messages sets the lead.
	sample := min(n, 20_000)
	d, err := publishUser(pub, spikeTopic, sample, payload, nil, func() delay.Delay { return delay.For(backlogDelay()) }, nil)
	if b.failed(name+": sample", err) {
		return nil
	}
	if b.failed("SLOWLOG RESET", b.admin.SlowLogReset(b.ctx).Err()) {
		return nil
	}
	run := &SpikeRun{Messages: n, Partitions: partitions, Subscribers: b.opts.Subscribers, PublishRate: float64(sample) / d.Seconds()}
	lat, rate, due := b.dueAtOnce(client, pub, spikeTopic, partitions, n, 0, payload, run.PublishRate, name)
	if lat == nil {
		return nil
	}
	run.Lateness, run.Rate = lat, rate
	if run.Slowest, err = b.slowest(time.Time{}); b.failed("SLOWLOG GET", err) {
		return nil
	}
	if run.SlowestAfter, err = b.slowest(due); b.failed("SLOWLOG GET", err) {
		return nil
	}
	if run.Over10, err = b.slowEntries(); b.failed("SLOWLOG GET", err) {
		return nil
	}
	progress("   slowest call from the first publish: %s; from the due time: %s", run.Slowest, run.SlowestAfter)
	if len(run.Over10) > 0 {
		calls := make([]string, len(run.Over10))
		for i, e := range run.Over10 {
			calls[i] = fmt.Sprintf("%s %.1f ms", e.Call, e.Ms)
		}
		progress("   calls of 10 ms or more (first %d, oldest first): %s", len(calls), strings.Join(calls, "; "))
	}
	return run
}

// backlogRows adds the ladder's figures to the table, each size against
// the smallest.
func (b *bench) backlogRows() {
	steps := b.rep.Backlog
	if len(steps) == 0 {
		return
	}
	first := steps[0]
	ref := "at " + count(first.Size)
	for _, s := range steps {
		at := " at backlog " + count(s.Size)
		peers := func(v *float64) []Peer {
			if s == first {
				return nil
			}
			return []Peer{peer(ref, v)}
		}
		b.rep.row("7", "Redis memory per waiting message"+at, "B/msg", "≤ 200 B", ptr(s.BytesPerMsg), peers(ptr(first.BytesPerMsg))...)
		pubRow := fmt.Sprintf("publish delayed %v, 500 per call × 8", b.opts.BacklogDue)
		b.rep.row("7", pubRow+at, "msg/s", "≥ 0.8× the smallest backlog", s.PublishRate, peers(first.PublishRate)...)
		b.rep.row("7", pubRow+", backlog topic against a topic with no backlog"+at, "msg/s", "≥ 0.8×", s.PublishRate,
			peer("topic with no backlog, same Redis", s.EmptyPublishRate))
		b.rep.row("7", pubRow+", Redis CPU a message, backlog topic against a topic with no backlog"+at, "µs", "≤ 1.25×", s.PublishCPUUsec,
			peer("topic with no backlog, same Redis", s.EmptyPublishCPUUsec))
		if s.PublishClientUsec != nil {
			b.rep.row("7", pubRow+", the publisher's CPU a message, backlog topic against a topic with no backlog"+at, "µs", "", s.PublishClientUsec,
				peer("topic with no backlog, same process", s.EmptyPublishClientUsec))
		}
		b.rep.row("7", "promote (Manager alone)"+at, "msg/s", "", s.PromoteRate, peers(first.PromoteRate)...)
		b.rep.row("7", "promotion: script time per message"+at, "µs", "flat", ptr(s.PromoteScriptUsec), peers(ptr(first.PromoteScriptUsec))...)
		b.rep.row("7", "due delivery, due time to ack"+at, "msg/s", "≥ 0.8× the smallest backlog", s.DeliveryRate, peers(first.DeliveryRate)...)
		b.rep.row("7", "slowest call (SLOWLOG) while measuring"+at, "ms", "≤ 10 ms", ptr(s.Slowest.Ms))
		if s.FarCalls != nil {
			b.rep.row("7", "far publish calls of 500 from one goroutine, slowest script run (SLOWLOG)"+at, "ms", "≤ 10 ms", ptr(s.FarCalls.MaxMs))
		}
		if l := s.Lookups; l != nil {
			for _, r := range []struct {
				what string
				p99  float64
			}{{"Find", l.FindP99}, {"Reschedule", l.ReschedP99}, {"Cancel", l.CancelP99}} {
				b.rep.row("7", fmt.Sprintf("%s of a far message by UUID, p99"+at, r.what), "ms", "≤ 1 ms", ptr(r.p99))
			}
		}
	}
}

// limitRedis caps Redis memory at -max-memory with noeviction (an over-full
// run fails with OOM instead of swapping the machine) and logs calls over
// slowlogThreshold; it returns what restores the previous settings.
func (b *bench) limitRedis() (func(), error) {
	set := map[string]string{
		"maxmemory":               strconv.FormatInt(b.opts.MaxMemory, 10),
		"maxmemory-policy":        "noeviction",
		"slowlog-log-slower-than": strconv.FormatInt(slowlogThreshold.Microseconds(), 10),
		"slowlog-max-len":         strconv.Itoa(slowlogMaxLen),
	}
	old := map[string]string{}
	restore := func() {
		for k, v := range old {
			_ = b.admin.ConfigSet(b.ctx, k, v).Err()
		}
	}
	for k, v := range set {
		was, err := b.admin.ConfigGet(b.ctx, k).Result()
		if err != nil {
			restore()
			return nil, err
		}
		if err := b.admin.ConfigSet(b.ctx, k, v).Err(); err != nil {
			restore()
			return nil, err
		}
		old[k] = was[k]
	}
	return restore, nil
}

// settledMemory returns used_memory once Redis has freed the buffers of
// connections that just went idle.
func (b *bench) settledMemory() (int64, error) {
	time.Sleep(200 * time.Millisecond)
	return usedMemory(b.ctx, b.admin)
}

// slowest returns the slowest call SLOWLOG holds from since on, leaving out
// the bench's own administration (FLUSHALL, INFO, CONFIG, SLOWLOG).
func (b *bench) slowest(since time.Time) (SlowCall, error) {
	var s SlowCall
	logs, err := b.admin.SlowLogGet(b.ctx, -1).Result()
	if err != nil {
		return s, err
	}
	for _, l := range logs {
		if len(l.Args) == 0 || l.Time.Before(since) {
			continue
		}
		switch strings.ToLower(l.Args[0]) {
		case "flushall", "flushdb", "info", "config", "slowlog":
			continue
		}
		s.Calls++
		if l.Duration >= 10*time.Millisecond {
			s.Over10++
		}
		if ms := float64(l.Duration) / float64(time.Millisecond); ms > s.Ms {
			s.Ms, s.Command = ms, describeCall(l.Args)
		}
	}
	return s, nil
}

// describeCall names a logged call: the command, and for a script its
// hash prefix and its keys without the prefix and topic (the part after
// "}:"), which tell the scripts apart.
func describeCall(args []string) string {
	cmd := strings.ToLower(args[0])
	if (cmd != "evalsha" && cmd != "eval") || len(args) < 3 {
		return cmd
	}
	name := args[1]
	if cmd == "evalsha" && len(name) == 40 {
		name = name[:8]
	} else {
		name = "script"
	}
	n, err := strconv.Atoi(args[2])
	if err != nil {
		return cmd + " " + name
	}
	var keys []string
	for _, k := range args[3:min(len(args), 3+n, 6)] {
		if _, rest, ok := strings.Cut(k, "}:"); ok {
			k = rest
		}
		keys = append(keys, k)
	}
	more := ""
	if n > len(keys) {
		more = ", …"
	}
	return fmt.Sprintf("%s %s (%d keys: %s%s)", cmd, name, n, strings.Join(keys, ", "), more)
}

func partitionsLabel(n int) string {
	if n == 1 {
		return "1 partition"
	}
	return fmt.Sprintf("%d partitions", n)
}
