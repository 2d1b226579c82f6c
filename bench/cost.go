package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// CostRun is scenario 13 for one system, message kind, rate and topic
// count: what each delivered message cost, measured over a window of steady
// traffic.
type CostRun struct {
	System string `json:"system"`
	Kind   string `json:"kind"` // costImmediate or costDelayed
	Rate   int    `json:"rate"`
	Topics int    `json:"topics"`
	// Messages delivered within the window, and the window's length.
	Messages int     `json:"messages"`
	Seconds  float64 `json:"seconds"`
	// Per delivered message: the server's CPU time (INFO cpu), its commands
	// (INFO commandstats: a script counts once, plus the commands it runs)
	// and the bench process's CPU time (getrusage: the publisher, the
	// subscriber and the harness around them).
	RedisUsec float64 `json:"redis_usec_per_msg"`
	Calls     float64 `json:"calls_per_msg"`
	// Reads and Writes are the server's socket reads and writes per
	// delivered message (INFO stats total_reads_processed,
	// total_writes_processed): at a steady rate each costs a wake-up and
	// system calls, which dominate Redis's CPU for small commands, so they
	// explain a figure that commands alone do not.
	Reads      float64 `json:"reads_per_msg"`
	Writes     float64 `json:"writes_per_msg"`
	ClientUsec float64 `json:"client_usec_per_msg"`
	// ClientAlloc is the bench process's heap allocation per delivered
	// message (bytes) and GCs its garbage collections within the window
	// (runtime/metrics). Over many topics a collection's mark phase delays
	// the goroutines that tick and read by milliseconds, so the rate of
	// collections, set by bytes allocated per message, shows in the tail of
	// lateness and in client CPU.
	ClientAlloc float64 `json:"client_alloc_bytes_per_msg"`
	GCs         int64   `json:"gc_cycles"`
	// RedisBusy is the server's CPU over the window's wall time, % of a core.
	RedisBusy float64 `json:"redis_busy_percent"`
	// Conns is the connections the consuming side's client held at the
	// window's end (CLIENT LIST, by client name; asynq's one client).
	Conns    int           `json:"connections"`
	Lateness *Lateness     `json:"lateness,omitempty"`
	Commands []CommandStat `json:"commands"`
}

// The message kinds of scenario 13.
const (
	costImmediate = "immediate"
	costDelayed   = "delayed 1 s"
)

// costClient names the connections of a system under test in scenario 13.
const costClient = "bench-cost"

// costWarmup is how long traffic flows before the window opens: longer
// than the delay, so messages delayed 1 s are delivered at the rate they
// are published, and long enough for the schedulers' first ticks.
const costWarmup = 3 * time.Second

// costSystem is a system of scenario 13: it publishes message i (payload:
// the tracker's) to topic i mod the topic count, due at due (now for
// immediate ones), one Publish call per message, and hands each delivered
// payload to deliver.
type costSystem struct {
	name string
	// kinds it runs; multi: whether it runs the many-topics step (with
	// manyTopics topics, 0 for the scenario's own count).
	kinds      []string
	multi      bool
	manyTopics int
	open       func(b *bench, topics []string, deliver func([]byte)) (costQueue, error)
}

type costQueue interface {
	publish(i int, topic string, due time.Time, immediate bool, payload []byte) error
	close()
}

var costSystems = []costSystem{
	{name: sysRedisstream, kinds: []string{costImmediate}, multi: true, manyTopics: 10, open: openRedisstreamCost},
	{name: sysRedisdelay, kinds: []string{costImmediate, costDelayed}, multi: true, open: openRedisdelayCost},
	{name: sysAsynq, kinds: []string{costImmediate, costDelayed}, open: openAsynqCost},
}

// cost measures scenario 13: Redis CPU, Redis commands and client CPU per
// delivered message at steady rates, one Publish call per message (paced
// from 64 goroutines), one Subscriber behind a Router with an ack-only
// handler per topic, every client go-redis's default, every library's
// default config: what a service with steady traffic pays, where the
// saturation figures of scenarios 1-2 batch themselves.
//
// watermill-redisstream blocks one connection per topic (its subscriber's
// XREADGROUP BLOCK), so with a default pool it runs the many-topics step
// on 10 topics; asynq has no topics (one default queue), so it runs the
// one-topic steps only.
func (b *bench) cost() {
	type key struct {
		sys, kind    string
		rate, topics int
	}
	runs := map[key]*CostRun{}
	steps := [][2]int{} // rate, topics
	for _, r := range b.opts.CostRates {
		steps = append(steps, [2]int{r, 1})
	}
	if b.opts.CostTopics > 0 {
		steps = append(steps, [2]int{b.opts.CostManyRate, b.opts.CostTopics})
	}
	for _, st := range steps {
		rate, topics := st[0], st[1]
		for _, sys := range costSystems {
			if slices.ContainsFunc(b.opts.CostSkip, func(skip string) bool { return strings.HasPrefix(sys.name, skip) }) {
				continue
			}
			n := topics
			if topics > 1 {
				if !sys.multi {
					continue
				}
				if sys.manyTopics > 0 {
					n = sys.manyTopics
				}
			}
			for _, kind := range sys.kinds {
				name := fmt.Sprintf("cost · %s %s · %s/s · %s topic(s)", sys.name, kind, count(rate), count(n))
				run, err := b.costRun(sys, kind, rate, n)
				if b.failed(name, err) {
					continue
				}
				progress("%-60s Redis %.1f µs (%.0f%% busy), %.1f commands, %.2f/%.2f socket reads/writes, client %.1f µs and %.1f KB per msg, %d GCs, %d conns",
					name, run.RedisUsec, run.RedisBusy, run.Calls, run.Reads, run.Writes, run.ClientUsec, run.ClientAlloc/1e3, run.GCs, run.Conns)
				if l := run.Lateness; l != nil && kind == costDelayed {
					progress("%-60s lateness p50 %.2f ms, p99 %.2f ms, max %.1f ms, %d early", "", l.P50, l.P99, l.Max, l.Early)
				}
				b.rep.Cost = append(b.rep.Cost, run)
				runs[key{sys.name, kind, rate, topics}] = run
			}
		}
	}
	get := func(sys, kind string, rate, topics int, f func(*CostRun) float64) *float64 {
		if r := runs[key{sys, kind, rate, topics}]; r != nil {
			return ptr(f(r))
		}
		return nil
	}
	redisUsec := func(r *CostRun) float64 { return r.RedisUsec }
	calls := func(r *CostRun) float64 { return r.Calls }
	client := func(r *CostRun) float64 { return r.ClientUsec }
	for _, st := range steps {
		rate, topics := st[0], st[1]
		where := fmt.Sprintf("%s/s, 1 topic", count(rate))
		streamNote := ""
		if topics > 1 {
			where = fmt.Sprintf("%s/s over %s topics", count(rate), count(topics))
			streamNote = " (10 topics)"
		}
		for _, kind := range []string{costImmediate, costDelayed} {
			target := "≤ 1.2× redisstream"
			if kind == costDelayed {
				target = "≤ 1.5× redisstream (immediate)"
			}
			if topics > 1 {
				target += "; ≤ 1.2× 1 topic"
			}
			peers := []Peer{peer(sysRedisstream+" immediate"+streamNote, get(sysRedisstream, costImmediate, rate, topics, redisUsec))}
			if topics == 1 {
				peers = append(peers, peer(sysAsynq+" "+kind, get(sysAsynq, kind, rate, topics, redisUsec)))
			} else {
				peers = append(peers, peer("redisdelay at 1 topic", get(sysRedisdelay, kind, rate, 1, redisUsec)))
			}
			b.rep.row("13", fmt.Sprintf("Redis CPU per %s message, %s", kind, where), "µs", target,
				get(sysRedisdelay, kind, rate, topics, redisUsec), peers...)
			cmdTarget := ""
			if rate >= 1000 {
				cmdTarget = "≤ 4"
				if kind == costDelayed {
					cmdTarget = "≤ 6"
				}
			}
			b.rep.row("13", fmt.Sprintf("Redis commands per %s message, %s", kind, where), "commands", cmdTarget,
				get(sysRedisdelay, kind, rate, topics, calls),
				peer(sysRedisstream+" immediate"+streamNote, get(sysRedisstream, costImmediate, rate, topics, calls)))
			b.rep.row("13", fmt.Sprintf("client CPU per %s message, %s", kind, where), "µs", "≤ 1.0× redisstream",
				get(sysRedisdelay, kind, rate, topics, client),
				peer(sysRedisstream+" immediate"+streamNote, get(sysRedisstream, costImmediate, rate, topics, client)))
		}
		if r := runs[key{sysRedisdelay, costDelayed, rate, topics}]; r != nil && r.Lateness != nil && rate == 1000 {
			b.rep.row("13", fmt.Sprintf("lateness p99 of delayed messages, %s", where), "ms", "≤ 5 ms", ptr(r.Lateness.P99))
			b.rep.row("13", fmt.Sprintf("delivered early, %s", where), "messages", "0", ptr(float64(r.Lateness.Early)))
		}
	}
}

// costRun opens sys on topics topics, publishes at rate for the warm-up,
// the window and one more second, measures the window, and waits until
// every message is delivered.
func (b *bench) costRun(sys costSystem, kind string, rate, topics int) (*CostRun, error) {
	if err := b.flush(); err != nil {
		return nil, err
	}
	window := b.opts.CostWindow
	total := int(float64(rate) * (costWarmup + window + time.Second).Seconds())
	t := newTracker(total)
	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("cost-%d", i)
	}
	q, err := sys.open(b, names, t.deliver)
	if err != nil {
		return nil, err
	}
	defer q.close()
	if sys.name == sysRedisdelay {
		// Every subscription reads from the first message on: each waits
		// for its bell (which scenario 11 measures) before traffic starts.
		if err := b.awaitArmed(names); err != nil {
			return nil, err
		}
	}
	immediate := kind == costImmediate
	d := time.Duration(0)
	if !immediate {
		d = time.Second
	}

	type snapshot struct {
		at        time.Time
		cpu       float64
		io        [2]float64 // socket reads and writes
		stats     map[string]CommandStat
		rusage    syscall.Rusage
		gc        [2]uint64 // heap bytes allocated, GC cycles
		delivered int64
	}
	take := func() (snapshot, error) {
		var s snapshot
		var err error
		if s.cpu, err = cpuSeconds(b.ctx, b.admin); err != nil {
			return s, err
		}
		if s.io, err = socketIO(b.ctx, b.admin); err != nil {
			return s, err
		}
		stats, err := commandStats(b.ctx, b.admin)
		if err != nil {
			return s, err
		}
		s.stats = map[string]CommandStat{}
		for _, c := range stats {
			s.stats[c.Command] = c
		}
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &s.rusage)
		s.gc = gcCounters()
		s.delivered, s.at = t.delivered.Load(), time.Now()
		return s, nil
	}

	var (
		snaps   [2]snapshot
		snapErr error
		wg      sync.WaitGroup
	)
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(costWarmup)
		if snaps[0], snapErr = take(); snapErr != nil {
			return
		}
		stop := startCostProfile()
		time.Sleep(window)
		stop()
		snaps[1], snapErr = take()
	}()
	err = paced(total, rate, func(i int) error {
		t.due[i] = time.Now().Add(d).UnixNano()
		p := make([]byte, 16)
		binary.BigEndian.PutUint64(p, uint64(i))
		return q.publish(i, names[i%topics], time.Unix(0, t.due[i]), immediate, p)
	})
	wg.Wait()
	if err := errors.Join(err, snapErr); err != nil {
		return nil, err
	}
	if time.Since(start) > costWarmup+window+3*time.Second {
		return nil, fmt.Errorf("publishing %d messages at %d/s took %s: the publisher cannot keep the rate", total, rate, time.Since(start).Round(time.Millisecond))
	}
	if err := waitFor(t.done, t.delivered.Load, total); err != nil {
		return nil, err
	}

	a, z := snaps[0], snaps[1]
	msgs := float64(z.delivered - a.delivered)
	if msgs <= 0 {
		return nil, fmt.Errorf("nothing delivered within the window")
	}
	wall := z.at.Sub(a.at).Seconds()
	run := &CostRun{
		System: sys.name, Kind: kind, Rate: rate, Topics: topics,
		Messages: int(msgs), Seconds: wall,
		RedisUsec: (z.cpu - a.cpu) * 1e6 / msgs,
		RedisBusy: (z.cpu - a.cpu) / wall * 100,
		Reads:     (z.io[0] - a.io[0]) / msgs,
		Writes:    (z.io[1] - a.io[1]) / msgs,
	}
	used := func(r syscall.Rusage) int64 { return r.Utime.Nano() + r.Stime.Nano() }
	run.ClientUsec = float64(used(z.rusage)-used(a.rusage)) / 1e3 / msgs
	run.ClientAlloc = float64(z.gc[0]-a.gc[0]) / msgs
	run.GCs = int64(z.gc[1] - a.gc[1])
	for name, c := range z.stats {
		switch name {
		case "info", "config|resetstat", "client|list":
			continue
		}
		if n := c.Calls - a.stats[name].Calls; n > 0 {
			usec := c.Usec - a.stats[name].Usec
			run.Calls += float64(n) / msgs
			run.Commands = append(run.Commands, CommandStat{Command: name, Calls: n, Usec: usec, PerMsg: float64(n) / msgs, UsecMsg: float64(usec) / msgs})
		}
	}
	sortCommands(run.Commands)
	if list, err := b.admin.ClientList(b.ctx).Result(); err == nil {
		run.Conns = strings.Count(list, " name="+costClient+" ")
	}
	run.Lateness, _ = t.lateness()
	return run, nil
}

// startCostProfile starts a CPU profile of a cost run's window when
// -cpuprofile asks for one, and returns what stops it.
func startCostProfile() (stop func()) {
	if *cpuProfile == "" {
		return func() {}
	}
	profiles++
	f, err := os.Create(fmt.Sprintf("%s.%d", *cpuProfile, profiles))
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		progress("   cpuprofile: %v", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		progress("   cpuprofile written: %s", f.Name())
	}
}

// costDefaultClient is go-redis's default client, named so that its
// connections can be counted.
func costDefaultClient(b *bench) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: b.addr, ClientName: costClient, ContextTimeoutEnabled: b.opts.CostContextTimeouts})
}

// costRouter runs a Router with one ack-only handler per topic.
func costRouter(b *bench, sub message.Subscriber, topics []string, deliver func([]byte)) (stop func() error, err error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, b.logger)
	if err != nil {
		return nil, err
	}
	for _, tp := range topics {
		router.AddConsumerHandler("ack-"+tp, tp, sub, func(msg *message.Message) error {
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
	return func() error { return errors.Join(router.Close(), <-done) }, nil
}

// watermillCost publishes through a Watermill publisher, delayed messages
// with Watermill's delay metadata.
type watermillCost struct {
	pub     message.Publisher
	closers []func() error
}

func (q *watermillCost) publish(i int, topic string, due time.Time, immediate bool, payload []byte) error {
	msg := message.NewMessage(watermill.NewUUID(), payload)
	if !immediate {
		delay.Message(msg, delay.For(time.Until(due)))
	}
	return q.pub.Publish(topic, msg)
}

func (q *watermillCost) close() {
	for i := len(q.closers) - 1; i >= 0; i-- {
		_ = q.closers[i]()
	}
}

// openWatermillCost opens a Watermill Pub/Sub for scenario 13: a publisher
// on a default client of its own (the publishing service), and a
// subscriber on costDefaultClient (the consuming one, whose connections are
// counted) behind a Router with an ack-only handler per topic.
func openWatermillCost(b *bench, topics []string, deliver func([]byte),
	newPub func(*redis.Client) (message.Publisher, error), newSub func(*redis.Client) (message.Subscriber, error),
) (costQueue, error) {
	pubClient := redis.NewClient(&redis.Options{Addr: b.addr, ContextTimeoutEnabled: b.opts.CostContextTimeouts})
	subClient := costDefaultClient(b)
	q := &watermillCost{closers: []func() error{pubClient.Close, subClient.Close}}
	pub, err := newPub(pubClient)
	if err != nil {
		q.close()
		return nil, err
	}
	q.pub, q.closers = pub, append(q.closers, pub.Close)
	sub, err := newSub(subClient)
	if err != nil {
		q.close()
		return nil, err
	}
	q.closers = append(q.closers, sub.Close)
	stop, err := costRouter(b, sub, topics, deliver)
	if err != nil {
		q.close()
		return nil, err
	}
	q.closers = append(q.closers, stop)
	return q, nil
}

// openRedisdelayCost is what a new user writes: a Publisher and a
// Subscriber with the library's defaults (the Subscriber's embedded
// scheduler included), each on a default client.
func openRedisdelayCost(b *bench, topics []string, deliver func([]byte)) (costQueue, error) {
	return openWatermillCost(b, topics, deliver,
		func(c *redis.Client) (message.Publisher, error) {
			return redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: c}, b.logger)
		},
		func(c *redis.Client) (message.Subscriber, error) {
			return redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: c, ConsumerGroup: consumerGroup}, b.logger)
		})
}

// openRedisstreamCost is watermill-redisstream with its defaults (its
// subscriber's blocking reads take a connection each).
func openRedisstreamCost(b *bench, topics []string, deliver func([]byte)) (costQueue, error) {
	return openWatermillCost(b, topics, deliver,
		func(c *redis.Client) (message.Publisher, error) {
			return redisstream.NewPublisher(redisstream.PublisherConfig{Client: c}, b.logger)
		},
		func(c *redis.Client) (message.Subscriber, error) {
			return redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: c, ConsumerGroup: consumerGroup}, b.logger)
		})
}

// asynqCost is asynq with its defaults (a server on one default queue,
// delayed tasks checked every 5 s) on a default client.
type asynqCost struct {
	redis  *redis.Client
	client *asynq.Client
	server *asynq.Server
}

func openAsynqCost(b *bench, _ []string, deliver func([]byte)) (costQueue, error) {
	rdb := costDefaultClient(b)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{LogLevel: asynq.ErrorLevel})
	err := srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		deliver(t.Payload())
		return nil
	}))
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &asynqCost{redis: rdb, client: asynq.NewClientFromRedisClient(rdb), server: srv}, nil
}

func (q *asynqCost) publish(_ int, _ string, due time.Time, immediate bool, payload []byte) error {
	var opts []asynq.Option
	if !immediate {
		opts = append(opts, asynq.ProcessAt(due))
	}
	_, err := q.client.Enqueue(asynq.NewTask(asynqTaskType, payload), opts...)
	return err
}

func (q *asynqCost) close() {
	q.server.Shutdown()
	_ = q.client.Close()
	_ = q.redis.Close()
}

// sortCommands orders commands by calls, most first.
func sortCommands(cs []CommandStat) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].Calls > cs[j].Calls })
}

// costMarkdown writes every run of scenario 13 as one table, with the
// commands each message cost.
func (r *Report) costMarkdown(sb *strings.Builder) {
	if len(r.Cost) == 0 {
		return
	}
	sb.WriteString("\nEvery run of scenario 13, per delivered message (commands: calls per message, most first):\n\n")
	sb.WriteString("| system | messages | rate | topics | Redis µs | Redis busy | commands | socket reads / writes | client µs | client KB allocated | GCs | connections | lateness p99 | commands per message (calls, µs of command time) |\n")
	sb.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, c := range r.Cost {
		late := ""
		if c.Lateness != nil && c.Kind == costDelayed {
			late = fmt.Sprintf("%.1f ms", c.Lateness.P99)
		}
		var cmds []string
		for _, s := range c.Commands[:min(len(c.Commands), 10)] {
			cmds = append(cmds, fmt.Sprintf("%s %.2f (%.1f µs)", s.Command, s.PerMsg, s.UsecMsg))
		}
		fmt.Fprintf(sb, "| %s | %s | %s/s | %s | %.1f | %.1f%% | %.1f | %.2f / %.2f | %.1f | %.1f | %d | %d | %s | %s |\n",
			c.System, c.Kind, count(c.Rate), count(c.Topics), c.RedisUsec, c.RedisBusy, c.Calls, c.Reads, c.Writes, c.ClientUsec, c.ClientAlloc/1e3, c.GCs, c.Conns, late,
			strings.Join(cmds, ", "))
	}
}

// costCharts draws scenario 13: Redis CPU and commands per message by step.
func (r *Report) costCharts(dir string) error {
	if len(r.Cost) == 0 {
		return nil
	}
	var steps []string
	usec, calls := map[string][]bar{}, map[string][]bar{}
	for _, c := range r.Cost {
		step := fmt.Sprintf("%s/s", count(c.Rate))
		if c.Topics > 1 {
			step += " · many topics"
		}
		if _, ok := usec[step]; !ok {
			steps = append(steps, step)
		}
		label := c.System + " " + c.Kind
		usec[step] = append(usec[step], bar{label, c.RedisUsec})
		calls[step] = append(calls[step], bar{label, c.Calls})
	}
	var u, k []barGroup
	for _, s := range steps {
		u = append(u, barGroup{label: s, bars: usec[s]})
		k = append(k, barGroup{label: s, bars: calls[s]})
	}
	return drawLinearCharts(dir, []namedChart{
		{"cost-redis-cpu.png", "Redis CPU per delivered message at steady rates (µs)", u},
		{"cost-commands.png", "Redis commands per delivered message at steady rates", k},
	})
}

// gcCounters reads the process's heap bytes allocated so far and its
// completed GC cycles.
func gcCounters() [2]uint64 {
	samples := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(samples)
	var out [2]uint64
	for i, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			out[i] = s.Value.Uint64()
		}
	}
	return out
}
