// Command bench measures this adapter side by side with
// watermill-redisstream, Watermill's in-memory GoChannel and asynq on one
// local redis-server, and writes a markdown table, PNG charts and raw JSON.
//
//	go run . [-quick] [-redis 127.0.0.1:PORT] [-out results] [-only 1,4]
//
// See README.md for what each scenario measures.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
)

// options are the sizes of a run (flags; -quick shrinks the ones not set).
type options struct {
	Messages    int           `json:"messages"`
	Payloads    []int         `json:"payloads"`
	Subscribers int           `json:"subscribers"`
	EndToEnd    int           `json:"end_to_end"`
	Steady      time.Duration `json:"steady"`
	Rates       []int         `json:"rates"`
	Burst       int           `json:"burst"`
	Schedule    int           `json:"schedule"`
	Memory      int           `json:"memory"`
	// Scenario 7: the backlog sizes of the ladder, messages measured at
	// each, and the Redis memory limit (bytes) that stops the ladder.
	Backlogs   []int         `json:"backlogs"`
	Scaling    int           `json:"scaling"`
	BacklogDue time.Duration `json:"backlog_due"`
	// BacklogKeyed gives every message of the ladder's fills a business
	// key of its own ("order-<n>"), as the seeds' headline case does.
	BacklogKeyed bool `json:"backlog_keyed,omitempty"`
	// BacklogCold: each step's publish rounds run before the backlog's far
	// filter is rebuilt, as right after a restart of every process over a
	// far tier that no scheduler has seen since it outgrew its filter.
	BacklogCold bool `json:"backlog_cold,omitempty"`
	// Far2: the publishers store far messages in format 2, as this
	// release does while a process of release 0.2.0 lives
	// (store.SetWriteFar2); format 3 otherwise.
	Far2       bool          `json:"far2,omitempty"`
	MaxMemory  int64         `json:"max_memory"`
	Idle       time.Duration `json:"idle"`
	IdleTopics int           `json:"idle_topics"`
	// Scenario 9 (Redis Cluster): messages per publish/subscribe run,
	// messages promoted, Managers of the extra promotion run.
	ClusterN        int `json:"cluster_n"`
	ClusterSchedule int `json:"cluster_schedule"`
	ClusterManagers int `json:"cluster_managers"`
	// Scenario 10: messages due at one instant, and the partition count of
	// its second run (1: no second run).
	Spike           int `json:"spike"`
	SpikePartitions int `json:"spike_partitions"`
	// Scenario 11: the topic counts, the idle window (two BlockTimes by
	// default, so every subscription reads twice) and the steady rate.
	TopicCounts []int         `json:"topic_counts"`
	TopicsIdle  time.Duration `json:"topics_idle"`
	TopicsRate  int           `json:"topics_rate"`
	// Scenario 12: the big tenant's messages, the small tenants and the
	// messages of each, the subscriber counts of the fairness runs; the
	// messages of each cost run and the group counts.
	GroupsBig   int   `json:"groups_big"`
	GroupsSmall int   `json:"groups_small"`
	GroupsEach  int   `json:"groups_each"`
	GroupsSubs  []int `json:"groups_subs"`
	GroupsN     int   `json:"groups_n"`
	GroupCounts []int `json:"group_counts"`
	// Scenario 13: the one-topic rates, the many-topics step's rate and
	// topic count, and each run's measured window.
	CostRates    []int         `json:"cost_rates"`
	CostManyRate int           `json:"cost_many_rate"`
	CostTopics   int           `json:"cost_topics"`
	CostWindow   time.Duration `json:"cost_window"`
	// CostSkip are systems scenario 13 leaves out (-cost-skip), for A/B
	// runs of one system against the redisstream baseline.
	CostSkip []string `json:"cost_skip,omitempty"`
	// CostContextTimeouts sets go-redis's ContextTimeoutEnabled on the
	// clients of scenario 13 (-cost-context-timeouts): redisdelay's Publish
	// then runs its script in the caller's goroutine.
	CostContextTimeouts bool `json:"cost_context_timeouts,omitempty"`
}

// scenario is a part of the bench; throughput covers two numbers because
// the subscribe figures consume the backlog the publish figures leave.
type scenario struct {
	numbers []int
	title   string
	run     func(*bench)
}

var scenarios = []scenario{
	{[]int{1, 2}, "publish and subscribe throughput", (*bench).throughput},
	{[]int{3}, "end-to-end delayed throughput", (*bench).endToEnd},
	{[]int{4}, "lateness", (*bench).lateness},
	{[]int{5}, "scheduling rate", (*bench).scheduling},
	{[]int{6}, "memory per waiting message", (*bench).memory},
	{[]int{7}, "scaling with the waiting backlog", (*bench).backlogLadder},
	{[]int{8}, "idle cost", (*bench).idle},
	{[]int{9}, "scaling on Redis Cluster", (*bench).clusterScaling},
	{[]int{10}, "midnight spike", (*bench).spike},
	{[]int{11}, "topics on one default client", (*bench).topicScaling},
	{[]int{12}, "groups: fairness and cost", (*bench).groups},
	{[]int{13}, "cost at steady rates", (*bench).cost},
}

// bench is the state shared by the scenarios.
type bench struct {
	ctx    context.Context
	opts   options
	addr   string
	admin  *redis.Client // INFO, FLUSHALL, CONFIG RESETSTAT
	logger watermill.LoggerAdapter
	rep    *Report
	keys   atomic.Int64 // business keys given by the keyed ladder (fillKeys)
	sample []string     // UUIDs of the last fill's sample (fillSample)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		quick   = flag.Bool("quick", false, "small sizes of everything, for a smoke test (about 2 minutes)")
		addr    = flag.String("redis", "", "use this loopback redis-server (it is FLUSHALLed) instead of starting one")
		out     = flag.String("out", "results", "directory for results.md, results.json and the charts")
		redraw  = flag.String("redraw", "", "measure nothing: write results.md and the charts of this results.json into -out")
		only    = flag.String("only", "", "comma-separated scenario numbers to run (default: all)")
		opts    options
		rates   = flag.String("rates", "1000,10000", "steady rates of the lateness scenario, messages/s")
		sizes   = flag.String("payloads", "16,256", "payload sizes of the throughput scenarios, bytes")
		ladder  = flag.String("backlogs", "10000,5000000,20000000,50000000", "waiting backlogs of the ladder, grown in one Redis (scenario 7)")
		tcounts = flag.String("topics", "1,100,1000,10000", "topic counts of one Subscriber (scenario 11)")
		gsubs   = flag.String("groups-subs", "1,4", "subscriber counts of the fairness runs (scenario 12)")
		gcounts = flag.String("group-counts", "1,100,10000", "group counts of the cost runs (scenario 12)")
		crates  = flag.String("cost-rates", "100,1000,5000,10000", "steady rates of the one-topic cost runs, messages/s (scenario 13)")
		cskip   = flag.String("cost-skip", "", "comma-separated systems scenario 13 leaves out (redisstream, redisdelay, asynq): for quicker A/B runs")
		maxMem  = flag.Float64("max-memory", 12, "GB of Redis memory (maxmemory, noeviction) the ladder stops short of (scenario 7)")
		quickOf = map[string]string{}
	)
	intFlag := func(p *int, name string, def, quickDef int, usage string) {
		flag.IntVar(p, name, def, usage)
		quickOf[name] = strconv.Itoa(quickDef)
	}
	durFlag := func(p *time.Duration, name string, def, quickDef time.Duration, usage string) {
		flag.DurationVar(p, name, def, usage)
		quickOf[name] = quickDef.String()
	}
	intFlag(&opts.Messages, "n", 200_000, 10_000, "messages per publish and subscribe run (scenarios 1, 2)")
	intFlag(&opts.Subscribers, "subs", 4, 4, "subscribers in one consumer group for the 'several' figures and the delivery scenarios")
	intFlag(&opts.EndToEnd, "e2e", 100_000, 20_000, "messages of the end-to-end delayed run (scenario 3)")
	durFlag(&opts.Steady, "steady", 10*time.Second, time.Second, "duration of each steady-rate lateness run (scenario 4)")
	intFlag(&opts.Burst, "burst", 100_000, 10_000, "messages due at the same instant (scenario 4)")
	intFlag(&opts.Schedule, "schedule", 500_000, 50_000, "due messages promoted (scenario 5)")
	intFlag(&opts.Memory, "memory", 1_000_000, 50_000, "waiting messages stored per system (scenario 6)")
	quickOf["backlogs"] = "10000,100000"
	intFlag(&opts.Scaling, "scaling", 200_000, 20_000, "messages published, promoted and delivered at each backlog (scenario 7)")
	durFlag(&opts.BacklogDue, "backlog-due", time.Millisecond, time.Millisecond, "delay of the messages published at each backlog (scenario 7): from 5 s on, each publish looks its UUID up in the far index")
	flag.BoolVar(&opts.CostContextTimeouts, "cost-context-timeouts", false, "scenario 13's clients end socket waits at their context's deadline (go-redis's ContextTimeoutEnabled); the default client does not")
	flag.BoolVar(&opts.BacklogKeyed, "backlog-keyed", false, "give every message of the ladder's fills a business key of its own, order-<n> (scenario 7)")
	flag.BoolVar(&opts.BacklogCold, "backlog-cold", false, "publish into each backlog before its far filter is rebuilt, as right after a restart of every process over a far tier no scheduler has seen (scenario 7)")
	flag.BoolVar(&opts.Far2, "far2", false, "publishers store far messages in the far tier's format 2, as while a process of release 0.2.0 runs (format 3 otherwise)")
	flag.Bool("far3", true, "ignored: format 3 is the default since storage level 3 (kept so that earlier steps' commands in bench/README.md run)")
	durFlag(&opts.Idle, "idle", time.Minute, 5*time.Second, "idle measurement per system (scenario 8)")
	intFlag(&opts.IdleTopics, "idle-topics", 100, 100, "idle topics, one subscriber each (scenario 8)")
	intFlag(&opts.ClusterN, "cluster-n", 300_000, 5_000, "messages per publish and subscribe run on each cluster setup (scenario 9)")
	intFlag(&opts.ClusterSchedule, "cluster-schedule", 1_000_000, 10_000, "due messages promoted on each cluster setup (scenario 9)")
	intFlag(&opts.ClusterManagers, "cluster-managers", 3, 3, "Managers of the extra promotion run on 3 masters, 8 partitions (scenario 9; 1 skips it)")
	intFlag(&opts.Spike, "spike", 1_000_000, 20_000, "messages due at one instant (scenario 10)")
	intFlag(&opts.SpikePartitions, "spike-partitions", 8, 8, "partitions of the spike's second run (scenario 10; 1 skips it)")
	durFlag(&opts.TopicsIdle, "topics-idle", time.Minute, 5*time.Second, "idle measurement at each topic count (scenario 11)")
	intFlag(&opts.TopicsRate, "topics-rate", 1000, 1000, "steady rate of scenario 11's lateness runs, messages/s, for -steady")
	quickOf["topics"] = "1,100"
	intFlag(&opts.GroupsBig, "groups-big", 100_000, 10_000, "immediate messages of the big tenant's burst (scenario 12)")
	intFlag(&opts.GroupsSmall, "groups-small", 100, 100, "small tenants publishing after the burst (scenario 12)")
	intFlag(&opts.GroupsEach, "groups-each", 10, 10, "messages of each small tenant (scenario 12)")
	intFlag(&opts.GroupsN, "groups-n", 100_000, 10_000, "messages of each cost run, published and consumed end to end (scenario 12)")
	intFlag(&opts.CostManyRate, "cost-many-rate", 1000, 1000, "steady rate of the many-topics cost runs, messages/s over all topics (scenario 13)")
	intFlag(&opts.CostTopics, "cost-topics", 1000, 100, "topics of the many-topics cost runs (scenario 13; 0 skips them)")
	durFlag(&opts.CostWindow, "cost-window", 10*time.Second, 2*time.Second, "measured window of each cost run, after a 3 s warm-up (scenario 13)")
	quickOf["cost-rates"] = "100,1000"
	flag.Parse()
	store.SetWriteFar2(opts.Far2)
	if *redraw != "" {
		return redrawReport(*redraw, *out)
	}
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range quickOf {
			if !set[name] {
				if err := flag.Set(name, v); err != nil {
					return err
				}
			}
		}
	}
	var err error
	if opts.Rates, err = parseInts(*rates); err != nil {
		return fmt.Errorf("-rates: %w", err)
	}
	if opts.Payloads, err = parseInts(*sizes); err != nil {
		return fmt.Errorf("-payloads: %w", err)
	}
	if opts.Backlogs, err = parseInts(*ladder); err != nil {
		return fmt.Errorf("-backlogs: %w", err)
	}
	if opts.TopicCounts, err = parseInts(*tcounts); err != nil {
		return fmt.Errorf("-topics: %w", err)
	}
	if opts.GroupsSubs, err = parseInts(*gsubs); err != nil {
		return fmt.Errorf("-groups-subs: %w", err)
	}
	if opts.GroupCounts, err = parseInts(*gcounts); err != nil {
		return fmt.Errorf("-group-counts: %w", err)
	}
	if opts.CostRates, err = parseInts(*crates); err != nil {
		return fmt.Errorf("-cost-rates: %w", err)
	}
	if opts.CostSkip, err = parseCostSkip(*cskip); err != nil {
		return err
	}
	if opts.CostWindow < time.Second {
		return fmt.Errorf("-cost-window: %v is too short to measure a steady rate: give 1s or more", opts.CostWindow)
	}
	slices.Sort(opts.Backlogs)
	opts.Backlogs = slices.Compact(opts.Backlogs)
	if opts.BacklogDue <= 0 {
		return fmt.Errorf("-backlog-due: %v is not a delay: the ladder's publish rounds must wait (1ms by default; the benchmark issue's harness: 15s)", opts.BacklogDue)
	}
	if *maxMem <= 0 {
		return fmt.Errorf("-max-memory: %v is not a positive number of GB", *maxMem)
	}
	opts.MaxMemory = int64(*maxMem * 1e9)
	selected, err := parseInts(*only)
	if err != nil {
		return fmt.Errorf("-only: %w", err)
	}

	var server *redisServer
	if *addr != "" {
		server, err = externalRedis(*addr)
	} else {
		server, err = startRedis()
	}
	if err != nil {
		return err
	}
	defer server.stop()
	defer stopClusters()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		server.stop()
		stopClusters()
		os.Exit(130)
	}()

	ctx := context.Background()
	// FLUSHALL of a multi-million-message backlog blocks Redis for seconds.
	admin := redis.NewClient(&redis.Options{Addr: server.addr, ReadTimeout: 2 * time.Minute})
	defer admin.Close()
	b := &bench{
		ctx:    ctx,
		opts:   opts,
		addr:   server.addr,
		admin:  admin,
		logger: errorLogger{watermill.NewSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))},
		rep: &Report{Meta: Meta{
			Command:  strings.Join(append([]string{"go run ."}, os.Args[1:]...), " "),
			Started:  time.Now(),
			Machine:  machine(),
			Go:       runtime.Version(),
			Redis:    server.version(ctx),
			Versions: moduleVersions(),
			Sizes:    opts,
		}},
	}
	progress("%s at %s", serverLabel(b.rep.Meta.Redis), server.addr)
	for _, s := range scenarios {
		if len(selected) > 0 && !slices.ContainsFunc(s.numbers, func(n int) bool { return slices.Contains(selected, n) }) {
			continue
		}
		progress("== %v %s", s.numbers, s.title)
		start := time.Now()
		s.run(b)
		progress("   %s took %.0fs", s.title, time.Since(start).Seconds())
	}
	_ = flush(ctx, admin)
	b.rep.Meta.Seconds = time.Since(b.rep.Meta.Started).Seconds()

	md := b.rep.markdown()
	fmt.Print(md)
	if err := b.rep.write(*out, md); err != nil {
		return err
	}
	progress("wrote %s/results.md, results.json and the charts", *out)
	return nil
}

// measure runs fn, which returns the duration of its measured part, and
// records the run with the Redis CPU and commands it cost. It returns
// messages per second of that part, or nil (the error recorded) on failure.
func (b *bench) measure(name string, messages int, fn func() (time.Duration, error)) *float64 {
	if b.failed(name, b.admin.ConfigResetStat(b.ctx).Err()) {
		return nil
	}
	cpu0, err := cpuSeconds(b.ctx, b.admin)
	if b.failed(name, err) {
		return nil
	}
	start := time.Now()
	d, err := fn()
	wall := time.Since(start)
	if b.failed(name, err) {
		return nil
	}
	cpu1, err := cpuSeconds(b.ctx, b.admin)
	if b.failed(name, err) {
		return nil
	}
	stats, err := commandStats(b.ctx, b.admin)
	if b.failed(name, err) {
		return nil
	}
	run := &Run{
		Name:     name,
		Messages: messages,
		Seconds:  d.Seconds(),
		Rate:     float64(messages) / d.Seconds(),
		RedisCPU: (cpu1 - cpu0) / wall.Seconds() * 100,
		CPUTime:  cpu1 - cpu0,
	}
	_, run.ScriptUsec = scriptCalls(stats)
	for _, s := range stats {
		if len(run.Commands) == 5 {
			break
		}
		if s.Command == "info" || s.Command == "config|resetstat" {
			continue
		}
		s.PerMsg = float64(s.Calls) / float64(messages)
		s.UsecMsg = float64(s.Usec) / float64(messages)
		run.Commands = append(run.Commands, s)
	}
	b.rep.Runs = append(b.rep.Runs, run)
	progress("%-60s %10s msg/s (%s in %.2fs, Redis CPU %.0f%%)", name, formatNumber(run.Rate), count(messages), run.Seconds, run.RedisCPU)
	return &run.Rate
}

// errorLogger logs errors only (the Router and the Pub/Subs log every start
// and stop), leaving out the context cancellations some report while closing.
type errorLogger struct{ watermill.LoggerAdapter }

func (l errorLogger) Error(msg string, err error, fields watermill.LogFields) {
	if !errors.Is(err, context.Canceled) {
		l.LoggerAdapter.Error(msg, err, fields)
	}
}

func (l errorLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return errorLogger{l.LoggerAdapter.With(fields)}
}

// failed records err, if any, against what and reports whether there was one.
func (b *bench) failed(what string, err error) bool {
	if err == nil {
		return false
	}
	b.rep.errorf("%s: %v", what, err)
	return true
}

// flush empties Redis before a measurement.
func (b *bench) flush() error {
	return flush(b.ctx, b.admin)
}

// progress prints a line to stderr; stdout gets only the results.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "  "+format+"\n", args...)
}

// count prints 10000 as 10k and 5000000 as 5M.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%100_000 == 0:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	case n >= 1000 && n%100 == 0:
		return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
	}
	return strconv.Itoa(n)
}

// parseCostSkip parses -cost-skip: system names of scenario 13, or
// prefixes of them ("asynq" for "asynq default").
func parseCostSkip(s string) ([]string, error) {
	var skip []string
	for _, name := range strings.Split(s, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.ContainsFunc(costSystems, func(sys costSystem) bool { return strings.HasPrefix(sys.name, name) }) {
			return nil, fmt.Errorf("-cost-skip: no system of scenario 13 is named %q: give redisstream, redisdelay or asynq", name)
		}
		skip = append(skip, name)
	}
	return skip, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// machine describes the CPU the bench ran on.
func machine() string {
	model := runtime.GOARCH
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d logical CPUs, %s", model, runtime.NumCPU(), runtime.GOOS)
}

// moduleVersions returns the versions of the compared libraries this binary
// was built with.
func moduleVersions() map[string]string {
	v := map[string]string{}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	for _, d := range info.Deps {
		switch d.Path {
		case "github.com/ThreeDotsLabs/watermill", "github.com/ThreeDotsLabs/watermill-redisstream",
			"github.com/hibiken/asynq", "github.com/redis/go-redis/v9":
			v[d.Path] = d.Version
		}
	}
	return v
}

// redrawReport writes results.md and the charts of a saved results.json
// (for example after a change to the charts) into dir.
func redrawReport(path, dir string) error {
	js, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep Report
	if err := json.Unmarshal(js, &rep); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return rep.write(dir, rep.markdown())
}
