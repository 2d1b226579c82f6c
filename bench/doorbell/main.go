// Command doorbell is a feasibility study (issue 51): it measures, in one
// process and one run, the Redis cost per message of a "doorbell" wake-up
// design (a per-group sorted set of partitions rung by publishers, one
// BZMPOP connection per process, one fetch script per woken partition that
// promotes due delayed messages and reads a batch) against the
// watermill-redisstream baseline (XADD, one blocking XREADGROUP connection
// per topic, XACK).
//
// It talks to a local redis-server only (127.0.0.1 or ::1) and FLUSHALLs it
// between runs: start a throw-away server for it.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed publish.lua
var publishLua string

//go:embed fetch.lua
var fetchLua string

const (
	group    = "g"
	consumer = "c1"
)

type step struct {
	rate, topics, streamTopics int
}

type result struct {
	system     string
	step       step
	rep        int
	delivered  int64
	redisUs    float64 // Redis CPU µs per delivered message
	cmds       float64 // Redis commands per delivered message
	clientUs   float64 // process CPU µs per delivered message
	conns      int
	p50, p99   float64 // lateness ms (delayed: delivery - due; immediate: delivery - publish)
	max        float64
	early      int
	cmdDetails map[string]float64
}

var (
	addr       = flag.String("addr", "127.0.0.1:6420", "redis address (loopback only; the server is FLUSHALLed)")
	ratesFlag  = flag.String("steps", "100x1,1000x1,5000x1,1000x1000", "steps: rate x topics, comma separated")
	streamCap  = flag.Int("stream-topics", 10, "the baseline runs on at most this many topics (one blocking connection each)")
	warm       = flag.Duration("warmup", 3*time.Second, "warm-up before the window")
	window     = flag.Duration("window", 10*time.Second, "measured window")
	reps       = flag.Int("reps", 2, "repetitions of each step (systems alternate inside each)")
	delay      = flag.Duration("delay", time.Second, "delay of delayed messages")
	publishers = flag.Int("publishers", 4, "publishing goroutines")
	count      = flag.Int("count", 100, "doorbell fetch batch (XREADGROUP COUNT)")
	ackWait    = flag.Duration("ack-wait", 20*time.Millisecond, "doorbell: piggyback acks on the next fetch, or flush them after this long")
	systemsF   = flag.String("systems", "stream,doorbell,doorbell-delayed", "systems to run, in this order; a doorbell system may end in @DURATION (e.g. doorbell@2ms): its consumer lingers that long after a wake-up or a due time before fetching, to batch")
	verbose    = flag.Bool("v", false, "print the top commands per run")
)

func main() {
	flag.Parse()
	if err := checkAddr(*addr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	steps, err := parseSteps(*ratesFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: *addr, Protocol: 2})
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		os.Exit(1)
	}
	systems := strings.Split(*systemsF, ",")
	var all []result
	for rep := 1; rep <= *reps; rep++ {
		for _, st := range steps {
			for _, sys := range systems {
				r, err := run(ctx, admin, sys, st, rep)
				if err != nil {
					fmt.Fprintln(os.Stderr, sys, err)
					os.Exit(1)
				}
				printResult(r)
				all = append(all, r)
			}
		}
	}
	summary(all, steps, systems)
}

func checkAddr(a string) error {
	host, _, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || !(ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback)) {
		return fmt.Errorf("refusing %q: only 127.0.0.1 or ::1 (the server is FLUSHALLed)", a)
	}
	return nil
}

func parseSteps(s string) ([]step, error) {
	var out []step
	for _, p := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(p), "x")
		if !ok {
			return nil, fmt.Errorf("bad step %q (want RATExTOPICS)", p)
		}
		r, err1 := strconv.Atoi(a)
		t, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || r <= 0 || t <= 0 {
			return nil, fmt.Errorf("bad step %q", p)
		}
		out = append(out, step{rate: r, topics: t, streamTopics: min(t, *streamCap)})
	}
	return out, nil
}

// keys of one topic (partition) and of the group; one hash tag for the
// whole prototype (a single node); see README for a Cluster layout.
func kStream(t string) string  { return "{db}:s:" + t }
func kWaiting(t string) string { return "{db}:w:" + t }
func kBodies(t string) string  { return "{db}:b:" + t }

const (
	kBell   = "{db}:bell:" + group
	kTimers = "{db}:timers:" + group
)

func topicName(i int) string { return "t" + strconv.Itoa(i) }

// stats collected by the consumers.
type stats struct {
	delivered atomic.Int64
	inWindow  atomic.Bool
	mu        sync.Mutex
	lat       []float64 // ms
	early     int
}

func (s *stats) deliver(body string, now time.Time) {
	s.delivered.Add(1)
	if !s.inWindow.Load() {
		return
	}
	d, _, _ := strings.Cut(body, "|")
	due, err := strconv.ParseInt(d, 10, 64)
	if err != nil {
		return
	}
	l := float64(now.UnixMicro()-due) / 1000
	s.mu.Lock()
	s.lat = append(s.lat, l)
	if l < 0 {
		s.early++
	}
	s.mu.Unlock()
}

type snap struct {
	cpuUs  float64
	cmds   map[string]int64
	rusage float64
}

func takeSnap(ctx context.Context, admin *redis.Client) (snap, error) {
	var s snap
	info, err := admin.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return s, err
	}
	s.cmds = map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			s.cpuUs += f * 1e6
		} else if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			s.cpuUs += f * 1e6
		} else if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, fields, _ := strings.Cut(rest, ":")
			for _, f := range strings.Split(fields, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					s.cmds[name] = n
				}
			}
		}
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s.rusage = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
	return s, nil
}

func connCount(ctx context.Context, admin *redis.Client) int {
	l, err := admin.ClientList(ctx).Result()
	if err != nil {
		return -1
	}
	return strings.Count(strings.TrimSpace(l), "\n") + 1 - 1 // minus the admin connection
}

func run(ctx context.Context, admin *redis.Client, sys string, st step, rep int) (result, error) {
	res := result{system: sys, step: st, rep: rep}
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return res, err
	}
	admin.ConfigResetStat(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	topics := st.topics
	if strings.HasPrefix(sys, "stream") {
		topics = st.streamTopics
	}
	for i := 0; i < topics; i++ {
		if err := admin.XGroupCreateMkStream(ctx, kStream(topicName(i)), group, "$").Err(); err != nil {
			return res, err
		}
	}
	pub := redis.NewClient(&redis.Options{Addr: *addr, Protocol: 2, PoolSize: *publishers, MinIdleConns: 0})
	defer pub.Close()
	s := &stats{}
	var wg sync.WaitGroup
	var publish func(ctx context.Context, seq int64, now time.Time) error
	base, lingerS, _ := strings.Cut(sys, "@")
	var linger time.Duration
	if lingerS != "" {
		l, err := time.ParseDuration(lingerS)
		if err != nil {
			return res, err
		}
		linger = l
	}
	switch base {
	case "stream":
		for i := 0; i < topics; i++ {
			wg.Add(1)
			go func(t string) {
				defer wg.Done()
				streamConsumer(ctx, t, s)
			}(topicName(i))
		}
		publish = func(ctx context.Context, seq int64, now time.Time) error {
			t := topicName(int(seq % int64(topics)))
			return pub.XAdd(ctx, &redis.XAddArgs{Stream: kStream(t), Values: []string{"d", body(now.UnixMicro())}}).Err()
		}
	case "doorbell", "doorbell-delayed", "doorbell-delayed-inline":
		delayed := base != "doorbell"
		mode := "d"
		if base == "doorbell-delayed-inline" {
			mode = "D"
		}
		pubScript := redis.NewScript(publishLua)
		if err := pubScript.Load(ctx, pub).Err(); err != nil {
			return res, err
		}
		dc := &doorbellConsumer{stats: s, topics: topics, linger: linger, promote: "1"}
		if mode == "D" {
			dc.promote = "2"
		}
		if err := dc.start(ctx, &wg); err != nil {
			return res, err
		}
		defer dc.close()
		publish = func(ctx context.Context, seq int64, now time.Time) error {
			t := topicName(int(seq % int64(topics)))
			keys := []string{kStream(t), kWaiting(t), kBodies(t), kBell, kTimers}
			if !delayed {
				return pubScript.EvalSha(ctx, pub, keys, "i", now.UnixMilli(), t, body(now.UnixMicro()), "").Err()
			}
			due := now.Add(*delay).UnixMicro()
			score := (due + 999) / 1000 // ms, rounded up: never early
			return pubScript.EvalSha(ctx, pub, keys, mode, score, t, body(due), strconv.FormatInt(seq, 36)).Err()
		}
	default:
		return res, fmt.Errorf("unknown system %q", sys)
	}
	// paced publishers: message seq is due at start + seq/rate
	var seq atomic.Int64
	start := time.Now()
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	var pwg sync.WaitGroup
	var pubErr atomic.Value
	for g := 0; g < *publishers; g++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for pubCtx.Err() == nil {
				n := seq.Add(1) - 1
				at := start.Add(time.Duration(float64(n) / float64(st.rate) * float64(time.Second)))
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
				}
				if err := publish(pubCtx, n, time.Now()); err != nil && pubCtx.Err() == nil {
					pubErr.Store(err)
					return
				}
			}
		}()
	}
	time.Sleep(*warm)
	s.inWindow.Store(true)
	d0 := s.delivered.Load()
	a, err := takeSnap(ctx, admin)
	if err != nil {
		return res, err
	}
	time.Sleep(*window - 500*time.Millisecond)
	res.conns = connCount(ctx, admin)
	time.Sleep(500 * time.Millisecond)
	b, err := takeSnap(ctx, admin)
	if err != nil {
		return res, err
	}
	d1 := s.delivered.Load()
	s.inWindow.Store(false)
	stopPub()
	pwg.Wait()
	cancel()
	wg.Wait()
	if e := pubErr.Load(); e != nil {
		return res, e.(error)
	}
	n := d1 - d0
	res.delivered = n
	if n == 0 {
		return res, errors.New("nothing delivered in the window")
	}
	fn := float64(n)
	res.redisUs = (b.cpuUs - a.cpuUs) / fn
	res.clientUs = (b.rusage - a.rusage) / fn
	res.cmdDetails = map[string]float64{}
	var total int64
	for k, v := range b.cmds {
		if k == "info" || k == "client|list" {
			continue // the measurement's own
		}
		dv := v - a.cmds[k]
		total += dv
		if dv > 0 {
			res.cmdDetails[k] = float64(dv) / fn
		}
	}
	res.cmds = float64(total) / fn
	s.mu.Lock()
	sort.Float64s(s.lat)
	if len(s.lat) > 0 {
		res.p50 = s.lat[len(s.lat)*50/100]
		res.p99 = s.lat[min(len(s.lat)-1, len(s.lat)*99/100)]
		res.max = s.lat[len(s.lat)-1]
	}
	res.early = s.early
	s.mu.Unlock()
	return res, nil
}

const pad = "................................................................"

func body(dueUs int64) string { return strconv.FormatInt(dueUs, 10) + "|" + pad }

// streamConsumer is the watermill-redisstream read loop: its own connection,
// XREADGROUP BLOCK COUNT 10, then XACK of what it read.
func streamConsumer(ctx context.Context, t string, s *stats) {
	c := redis.NewClient(&redis.Options{Addr: *addr, Protocol: 2, PoolSize: 1})
	defer c.Close()
	key := kStream(t)
	for ctx.Err() == nil {
		r, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{key, ">"}, Count: 10, Block: 100 * time.Millisecond}).Result()
		if err != nil {
			continue
		}
		now := time.Now()
		var ids []string
		for _, st := range r {
			for _, m := range st.Messages {
				b, _ := m.Values["d"].(string)
				s.deliver(b, now)
				ids = append(ids, m.ID)
			}
		}
		if len(ids) > 0 {
			c.XAck(ctx, key, group, ids...)
		}
	}
}

// doorbellConsumer: one process, one BZMPOP connection on the group's
// doorbell, one connection for fetch scripts (pipelined per wake-up).
type doorbellConsumer struct {
	stats   *stats
	topics  int
	linger  time.Duration
	promote string       // fetch.lua's promote mode: "1" bodies in the hash, "2" inline
	bellID  int64        // CLIENT ID of the blocking connection
	seq     atomic.Int64 // number of the BZMPOP in flight (odd: blocked)
	bell    *redis.Client
	work    *redis.Client
	fetch   *redis.Script
	timers  map[string]int64     // partition -> local due time (ms) of its next waiting message
	acks    map[string][]string  // partition -> ids to ack with its next fetch
	ackAt   map[string]time.Time // partition -> when its oldest unsent ack arrived
}

func (d *doorbellConsumer) start(ctx context.Context, wg *sync.WaitGroup) error {
	d.bell = redis.NewClient(&redis.Options{Addr: *addr, Protocol: 2, PoolSize: 1, ReadTimeout: 5 * time.Second})
	d.work = redis.NewClient(&redis.Options{Addr: *addr, Protocol: 2, PoolSize: 1})
	d.fetch = redis.NewScript(fetchLua)
	if err := d.fetch.Load(ctx, d.work).Err(); err != nil {
		return err
	}
	id, err := d.bell.ClientID(ctx).Result()
	if err != nil {
		return err
	}
	d.bellID = id
	d.timers = map[string]int64{}
	d.acks = map[string][]string{}
	d.ackAt = map[string]time.Time{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.loop(ctx)
	}()
	return nil
}

func (d *doorbellConsumer) close() {
	d.bell.Close()
	d.work.Close()
}

type job struct {
	part    string
	promote bool
}

func (d *doorbellConsumer) loop(ctx context.Context) {
	nextSweep := time.Now().Add(time.Second)
	for ctx.Err() == nil {
		now := time.Now()
		nowMs := now.UnixMilli()
		var jobs []job
		// local timers that are due (plus linger)
		for p, due := range d.timers {
			if due+d.linger.Milliseconds() <= nowMs {
				delete(d.timers, p)
				jobs = append(jobs, job{p, true})
			}
		}
		if len(jobs) > 0 {
			d.run(ctx, jobs)
			continue
		}
		// acks waiting too long for a piggyback: flush them
		var flush []string
		for p, t := range d.ackAt {
			if now.Sub(t) >= *ackWait {
				flush = append(flush, p)
			}
		}
		if len(flush) > 0 {
			pipe := d.work.Pipeline()
			for _, p := range flush {
				pipe.XAck(ctx, kStream(p), group, d.acks[p]...)
				delete(d.acks, p)
				delete(d.ackAt, p)
			}
			_, _ = pipe.Exec(ctx)
			continue
		}
		// orphan sweep: partitions whose due time passed long ago and that no live process
		// holds (the process that popped their ring died); one command a second
		if now.After(nextSweep) {
			nextSweep = now.Add(time.Second)
			ps, _ := d.work.ZRangeByScore(ctx, kTimers, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(nowMs-200, 10), Count: 100}).Result()
			for _, p := range ps {
				if _, held := d.timers[p]; !held {
					d.timers[p] = nowMs
				}
			}
			continue
		}
		// block on the doorbell until the earliest thing we know of
		wake := nextSweep
		for _, due := range d.timers {
			if t := time.UnixMilli(due + d.linger.Milliseconds()); t.Before(wake) {
				wake = t
			}
		}
		for _, t := range d.ackAt {
			if t2 := t.Add(*ackWait); t2.Before(wake) {
				wake = t2
			}
		}
		timeout := time.Until(wake)
		if timeout < time.Millisecond {
			time.Sleep(timeout) // too close to block on Redis for
			continue
		}
		// Redis times blocked clients out only when its event loop wakes up (hz 10: up to
		// 100 ms late on an idle server), so a local timer ends the block itself with
		// CLIENT UNBLOCK (one command) at the due time; the server timeout is a backstop.
		my := d.seq.Add(1) // odd: blocked
		unblock := time.AfterFunc(timeout, func() {
			// retry: the BZMPOP may not have reached Redis yet (CLIENT UNBLOCK answers 0)
			for d.seq.Load() == my && ctx.Err() == nil {
				n, _ := d.work.ClientUnblock(ctx, d.bellID).Result()
				if n == 1 {
					return
				}
				time.Sleep(200 * time.Microsecond)
			}
		})
		v, err := d.bell.Do(ctx, "BZMPOP", strconv.FormatFloat((timeout+50*time.Millisecond).Seconds(), 'f', 3, 64), 1, kBell, "MIN", "COUNT", 1000).Result()
		d.seq.Add(1)
		unblock.Stop()
		if err != nil {
			continue // redis.Nil: timeout or unblocked
		}
		nowMs = time.Now().UnixMilli()
		for _, pr := range popped(v) {
			if pr.score <= float64(nowMs) {
				jobs = append(jobs, job{pr.member, false})
				continue
			}
			// a future ring: BZMPOP popped it anyway. Keep it locally (the durable copy is
			// in the timers zset, written by the publisher) and wake up for it ourselves;
			// re-adding it to the doorbell would make BZMPOP return at once: a busy loop.
			if due, ok := d.timers[pr.member]; !ok || int64(pr.score) < due {
				d.timers[pr.member] = int64(pr.score)
			}
		}
		if len(jobs) > 0 {
			if d.linger > 0 {
				time.Sleep(d.linger) // batch: let more messages arrive before the fetch
			}
			d.run(ctx, jobs)
		}
	}
}

type pop struct {
	member string
	score  float64
}

func popped(v any) []pop {
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return nil
	}
	els, _ := arr[1].([]any)
	var out []pop
	for _, e := range els {
		pair, _ := e.([]any)
		if len(pair) != 2 {
			continue
		}
		m, _ := pair[0].(string)
		var sc float64
		switch x := pair[1].(type) {
		case string:
			sc, _ = strconv.ParseFloat(x, 64)
		case float64:
			sc = x
		}
		out = append(out, pop{m, sc})
	}
	return out
}

// run pipelines one fetch script per partition, hands the messages out, and
// queues their acks for the partition's next fetch.
func (d *doorbellConsumer) run(ctx context.Context, jobs []job) {
	nowMs := time.Now().UnixMilli()
	pipe := d.work.Pipeline()
	cmds := make([]*redis.Cmd, len(jobs))
	for i, j := range jobs {
		acks := d.acks[j.part]
		args := make([]any, 0, 7+len(acks))
		promote := "0"
		if j.promote {
			promote = d.promote
		}
		args = append(args, group, consumer, *count, nowMs, promote, j.part, len(acks))
		for _, a := range acks {
			args = append(args, a)
		}
		delete(d.acks, j.part)
		delete(d.ackAt, j.part)
		cmds[i] = d.fetch.EvalSha(ctx, pipe, []string{kStream(j.part), kWaiting(j.part), kBodies(j.part), kBell, kTimers}, args...)
	}
	_, _ = pipe.Exec(ctx)
	now := time.Now()
	for i, j := range jobs {
		v, err := cmds[i].Result()
		if err != nil {
			continue
		}
		arr, _ := v.([]any)
		if len(arr) != 2 {
			continue
		}
		if s, _ := arr[0].(string); s != "-1" {
			if nd, err := strconv.ParseFloat(s, 64); err == nil {
				if cur, ok := d.timers[j.part]; !ok || int64(nd) < cur {
					d.timers[j.part] = int64(nd)
				}
			}
		}
		entries, _ := arr[1].([]any)
		for _, e := range entries {
			ent, _ := e.([]any)
			if len(ent) != 2 {
				continue
			}
			id, _ := ent[0].(string)
			fields, _ := ent[1].([]any)
			if len(fields) == 2 {
				b, _ := fields[1].(string)
				d.stats.deliver(b, now)
			}
			// the handler acks at once; the ack rides on the partition's next fetch
			if len(d.acks[j.part]) == 0 {
				d.ackAt[j.part] = now
			}
			d.acks[j.part] = append(d.acks[j.part], id)
		}
	}
}

func printResult(r result) {
	fmt.Printf("rep %d  %5d/s x %4d topics  %-16s delivered %6d  redis %6.1f µs/msg  cmds %5.2f/msg  client %6.1f µs/msg  conns %3d  lat p50 %6.2f p99 %6.2f max %7.2f ms  early %d\n",
		r.rep, r.step.rate, r.step.topics, r.system, r.delivered, r.redisUs, r.cmds, r.clientUs, r.conns, r.p50, r.p99, r.max, r.early)
	if *verbose {
		type kv struct {
			k string
			v float64
		}
		var l []kv
		for k, v := range r.cmdDetails {
			l = append(l, kv{k, v})
		}
		sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v })
		var b strings.Builder
		for _, x := range l {
			fmt.Fprintf(&b, " %s=%.2f", x.k, x.v)
		}
		fmt.Println("      commands/msg:" + b.String())
	}
}

func summary(all []result, steps []step, systems []string) {
	fmt.Println()
	fmt.Println("| step | system | rep | redis µs/msg | ratio vs stream | cmds/msg | client µs/msg | conns | lateness p50/p99/max ms | early |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, st := range steps {
		for _, r := range all {
			if r.step != st {
				continue
			}
			ratio := "-"
			for _, b := range all {
				if b.step == st && b.rep == r.rep && b.system == "stream" && r.system != "stream" {
					ratio = fmt.Sprintf("%.2f×", r.redisUs/b.redisUs)
				}
			}
			name := fmt.Sprintf("%d/s × %d", st.rate, st.topics)
			if r.system == "stream" && st.streamTopics != st.topics {
				name += fmt.Sprintf(" (stream on %d)", st.streamTopics)
			}
			fmt.Printf("| %s | %s | %d | %.1f | %s | %.2f | %.1f | %d | %.2f / %.2f / %.2f | %d |\n",
				name, r.system, r.rep, r.redisUs, ratio, r.cmds, r.clientUs, r.conns, r.p50, r.p99, r.max, r.early)
		}
	}
	_ = systems
}
