package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// hotTopic is the one topic of the cluster scenario.
const hotTopic = "hot"

// clusterSubscribers is the number of subscribers in one consumer group of
// the cluster scenario's subscribe figure (as scenario 2's "several").
const clusterSubscribers = 4

func init() {
	sectionTitles["9"] = "9. Scaling on Redis Cluster: 1 vs 3 masters, 1 vs 8 partitions, one hot topic"
	sectionTitles["9b"] = "9b. CPU of each run of scenario 9 (% of one core; the machine has 2 cores = 200%, shared by every Redis node and the bench)"
}

// clusterSetup is one combination of scenario 9.
type clusterSetup struct{ masters, partitions int }

func (s clusterSetup) String() string {
	m := "masters"
	if s.masters == 1 {
		m = "master"
	}
	return fmt.Sprintf("%d %s, P=%d", s.masters, m, s.partitions)
}

// clusterFigures are the rates measured on one setup.
type clusterFigures struct {
	publish, delayed, subscribe, promote, promoteMany *float64
	spread                                            string // partitions per master
}

// clusterScaling measures scenario 9: on a 1-master and a 3-master Redis
// Cluster started by the bench, with the hot topic in 1 and in 8
// partitions, the publish rates (immediate and delayed, one message per
// call from 64 goroutines), the subscribe rate through a Router (4
// subscribers in one group) and the promotion rate of one Manager (and of
// several on 3 masters with 8 partitions). Ratios come from this one run.
func (b *bench) clusterScaling() {
	figs := map[clusterSetup]*clusterFigures{}
	for _, masters := range []int{1, 3} {
		progress("starting a Redis Cluster of %d master(s)", masters)
		c, err := startCluster(b.ctx, masters)
		if b.failed(fmt.Sprintf("start a %d-master cluster", masters), err) {
			continue
		}
		progress("cluster at %s", strings.Join(c.addrs, " "))
		for _, p := range []int{1, 8} {
			s := clusterSetup{masters, p}
			f := &clusterFigures{spread: b.partitionSpread(c, p)}
			figs[s] = f
			progress("-- %s (partitions per master: %s)", s, f.spread)
			f.publish, f.subscribe = b.clusterPublishConsume(c, s)
			f.delayed = b.clusterPublishDelayed(c, s)
			f.promote = b.clusterPromote(c, s, 1)
			if masters == 3 && p == 8 && b.opts.ClusterManagers > 1 {
				f.promoteMany = b.clusterPromote(c, s, b.opts.ClusterManagers)
			}
		}
		c.stop()
	}

	one1, one8 := clusterSetup{1, 1}, clusterSetup{1, 8}
	three1, three8 := clusterSetup{3, 1}, clusterSetup{3, 8}
	get := func(s clusterSetup, pick func(*clusterFigures) *float64) *float64 {
		if f := figs[s]; f != nil {
			return pick(f)
		}
		return nil
	}
	label := func(s clusterSetup) string {
		if f := figs[s]; f != nil && s.masters > 1 {
			return fmt.Sprintf("%s (partitions per master %s)", s, f.spread)
		}
		return s.String()
	}
	metrics := []struct {
		name string
		pick func(*clusterFigures) *float64
	}{
		{fmt.Sprintf("publish immediate, 1 per call, %s", count(b.opts.ClusterN)), func(f *clusterFigures) *float64 { return f.publish }},
		{fmt.Sprintf("publish delayed (delay.For 1h), 1 per call, %s", count(b.opts.ClusterN)), func(f *clusterFigures) *float64 { return f.delayed }},
		{fmt.Sprintf("subscribe, %d subscribers in one group, %s", clusterSubscribers, count(b.opts.ClusterN)), func(f *clusterFigures) *float64 { return f.subscribe }},
		{fmt.Sprintf("promote %s due messages, 1 Manager", count(b.opts.ClusterSchedule)), func(f *clusterFigures) *float64 { return f.promote }},
	}
	for _, m := range metrics {
		v := func(s clusterSetup) *float64 { return get(s, m.pick) }
		b.rep.row("9", m.name+" · "+label(one1), "msg/s", "", v(one1))
		b.rep.row("9", m.name+" · "+label(one8), "msg/s", "", v(one8), peer(one1.String(), v(one1)))
		b.rep.row("9", m.name+" · "+label(three1), "msg/s", "", v(three1), peer(one1.String(), v(one1)))
		b.rep.row("9", m.name+" · "+label(three8), "msg/s", "", v(three8),
			peer(one8.String(), v(one8)), peer(three1.String(), v(three1)))
	}
	if b.opts.ClusterManagers > 1 {
		b.rep.row("9", fmt.Sprintf("promote %s due messages, %d Managers · %s", count(b.opts.ClusterSchedule), b.opts.ClusterManagers, label(three8)), "msg/s", "",
			get(three8, func(f *clusterFigures) *float64 { return f.promoteMany }),
			peer("1 Manager, "+three8.String(), get(three8, func(f *clusterFigures) *float64 { return f.promote })))
	}
}

// partitionSpread says how many of the hot topic's p partitions each master
// serves, e.g. "3/3/2".
func (b *bench) partitionSpread(c *redisCluster, p int) string {
	per := make([]int, len(c.addrs))
	for i := range p {
		key := waitingKeyOf(hotTopic, i)
		slot, err := c.admins[0].ClusterKeySlot(b.ctx, key).Result()
		if err != nil {
			return "?"
		}
		node, err := c.nodeOfSlot(b.ctx, slot)
		if err != nil {
			return "?"
		}
		per[node]++
	}
	parts := make([]string, len(per))
	for i, n := range per {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, "/")
}

// waitingKey is the sorted set of a topic's waiting messages, as the
// package README documents the key layout.
func waitingKey(topic string) string {
	return redisdelay.DefaultKeyPrefix + ":{" + topic + "}:waiting"
}

// waitingKeyOf is the sorted set of waiting messages of one partition of a
// topic: partition 0 keeps the layout of an unpartitioned topic, partition
// n>0 has the hash tag {topic~n} (the library's key layout).
func waitingKeyOf(topic string, partition int) string {
	if partition == 0 {
		return waitingKey(topic)
	}
	n := strconv.Itoa(partition)
	return redisdelay.DefaultKeyPrefix + ":{" + topic + "~" + n + "}:p" + n + ":waiting"
}

// clusterPublisher empties the cluster and returns a client of it and a
// Publisher for the setup's partitions (nil after a failure, reported), and
// what closes both.
func (b *bench) clusterPublisher(c *redisCluster, s clusterSetup) (*redis.ClusterClient, *redisdelay.Publisher, func()) {
	if b.failed("flush cluster", c.flush(b.ctx)) {
		return nil, nil, nil
	}
	client := c.client()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, Partitions: s.partitions}, b.logger)
	if b.failed("publisher", err) {
		_ = client.Close()
		return nil, nil, nil
	}
	return client, pub, func() {
		_ = pub.Close()
		_ = client.Close()
	}
}

// clusterPublishConsume creates 4 subscribers of one group (embedded
// schedulers on, as in scenario 2) and their group, measures publishing N
// immediate messages one per call from 64 goroutines, then consuming them
// through a Router with an ack-only handler.
func (b *bench) clusterPublishConsume(c *redisCluster, s clusterSetup) (pubRate, subRate *float64) {
	client, pub, done := b.clusterPublisher(c, s)
	if pub == nil {
		return nil, nil
	}
	defer done()
	var subs []message.Subscriber
	defer func() {
		for _, sub := range subs {
			_ = sub.Close()
		}
	}()
	for i := range clusterSubscribers {
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
			Client:        client,
			ConsumerGroup: consumerGroup,
			Consumer:      fmt.Sprintf("c%d", i),
			Partitions:    s.partitions,
		}, b.logger)
		if b.failed("subscriber", err) {
			return nil, nil
		}
		subs = append(subs, sub)
		if b.failed("initialize", sub.SubscribeInitialize(hotTopic)) {
			return nil, nil
		}
	}
	n := b.opts.ClusterN
	payload := randomPayload(16)
	pubRate = b.measureCluster(c, fmt.Sprintf("cluster publish immediate 16 B · %s", s), n, func(func()) (time.Duration, error) {
		return publishWatermill(pub, []string{hotTopic}, n, 1, payload, 0)
	})
	if pubRate == nil {
		return nil, nil
	}
	subRate = b.measureCluster(c, fmt.Sprintf("cluster subscribe %d× 16 B · %s", clusterSubscribers, s), n, func(mark func()) (time.Duration, error) {
		return consume(b, subs, []string{hotTopic}, n, mark)
	})
	return pubRate, subRate
}

// clusterPublishDelayed measures publishing N messages delayed by an hour,
// one per call from 64 goroutines.
func (b *bench) clusterPublishDelayed(c *redisCluster, s clusterSetup) *float64 {
	_, pub, done := b.clusterPublisher(c, s)
	if pub == nil {
		return nil
	}
	defer done()
	n := b.opts.ClusterN
	payload := randomPayload(16)
	return b.measureCluster(c, fmt.Sprintf("cluster publish delayed 16 B · %s", s), n, func(func()) (time.Duration, error) {
		return publishWatermill(pub, []string{hotTopic}, n, 1, payload, farFuture)
	})
}

// clusterPromote publishes the scheduling backlog due in 1 ms (untimed,
// batches of 100: each batch lands in one partition, the batches spread
// over all), waits until all are due, starts managers Managers (no
// subscriber runs, so no other scheduler) and measures the promotion rate:
// the messages moved between the first poll that sees some moved and the
// poll that sees none waiting, over that time.
func (b *bench) clusterPromote(c *redisCluster, s clusterSetup, managers int) *float64 {
	client, pub, done := b.clusterPublisher(c, s)
	if pub == nil {
		return nil
	}
	defer done()
	n := b.opts.ClusterSchedule
	if _, err := publishWatermill(pub, []string{hotTopic}, n, batchSize, randomPayload(16), time.Millisecond); b.failed("publish due messages", err) {
		return nil
	}
	time.Sleep(10 * time.Millisecond) // all due
	name := fmt.Sprintf("cluster promote %s due, %d Manager(s) · %s", count(n), managers, s)
	var moved int64
	rate := b.measureCluster(c, name, n, func(mark func()) (time.Duration, error) {
		d, m, err := promoteCluster(b, client, s.partitions, managers, int64(n), mark)
		moved = m
		return d, err
	})
	if rate != nil && moved > 0 {
		// measureCluster divides all n by the time from first to last; the
		// messages counted are those moved in that interval.
		r := *rate * float64(moved) / float64(n)
		b.rep.Runs[len(b.rep.Runs)-1].Rate = r
		rate = &r
	}
	return rate
}

// promoteCluster starts managers Managers for the hot topic and polls the
// waiting sets of its partitions every 2 ms. It returns the time from the
// first poll that saw messages moved to the poll that saw none left (when
// it calls mark), and how many were moved in between.
func promoteCluster(b *bench, client *redis.ClusterClient, partitions, managers int, total int64, mark func()) (time.Duration, int64, error) {
	var stops []func() error
	defer func() {
		for _, stop := range stops {
			_ = stop()
		}
	}()
	for range managers {
		mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: client, Topics: []string{hotTopic}}, b.logger)
		if err != nil {
			return 0, 0, err
		}
		stopped := make(chan error, 1)
		go func() { stopped <- mgr.Run(b.ctx) }()
		stops = append(stops, func() error { return errors.Join(mgr.Close(), <-stopped) })
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var (
		first      time.Time
		firstLeft  int64
		last       = int64(-1)
		lastMove   = time.Now()
		started    = time.Now()
		waitingSum = func() (int64, error) {
			pipe := client.Pipeline()
			cmds := make([]*redis.IntCmd, partitions)
			for i := range cmds {
				cmds[i] = pipe.ZCard(b.ctx, waitingKeyOf(hotTopic, i))
			}
			if _, err := pipe.Exec(b.ctx); err != nil {
				return 0, err
			}
			var sum int64
			for _, c := range cmds {
				sum += c.Val()
			}
			return sum, nil
		}
	)
	for {
		waiting, err := waitingSum()
		if err != nil {
			return 0, 0, err
		}
		now := time.Now()
		if first.IsZero() && waiting < total {
			first, firstLeft = now, waiting
			progress("   first promotion seen %.0f ms after starting the Manager(s), %d left", now.Sub(started).Seconds()*1000, waiting)
		}
		if waiting == 0 {
			mark()
			return now.Sub(first), firstLeft, nil
		}
		if waiting != last {
			last, lastMove = waiting, now
		} else if now.Sub(lastMove) > stallTimeout {
			return 0, 0, fmt.Errorf("promotion stalled with %d messages waiting", waiting)
		}
		<-tick.C
	}
}

// cpuSnapshot is the CPU used so far by each node, the bench process, the
// other processes and the machine.
type cpuSnapshot struct {
	at          time.Time
	nodes       []float64
	self        float64
	others      map[int]float64
	busy, total float64
	err         error
}

func (c *redisCluster) snapshot(b *bench, exclude map[int]bool) cpuSnapshot {
	s := cpuSnapshot{others: processTicks(exclude), self: selfCPU()}
	s.busy, s.total = machineCPU()
	s.nodes, s.err = c.cpuSeconds(b.ctx)
	s.at = time.Now()
	return s
}

// measureCluster is measure for a cluster: it records the run with the
// CPU of every node, of the bench process (the Go client, the library and
// the harness), of the other processes and of the whole machine, and
// returns msg/s of fn's measured part (nil on failure). The CPU figures
// cover the time from fn's start until it calls mark (when its measured
// part is over, before closing what it started), or until it returns.
func (b *bench) measureCluster(c *redisCluster, name string, messages int, fn func(mark func()) (time.Duration, error)) *float64 {
	for _, a := range c.admins {
		if b.failed(name, a.ConfigResetStat(b.ctx).Err()) {
			return nil
		}
	}
	exclude := map[int]bool{}
	for _, cmd := range c.cmds {
		exclude[cmd.Process.Pid] = true
	}
	s0 := c.snapshot(b, exclude)
	if b.failed(name, s0.err) {
		return nil
	}
	var s1 cpuSnapshot
	marked := false
	d, err := fn(func() { s1, marked = c.snapshot(b, exclude), true })
	if b.failed(name, err) {
		return nil
	}
	if !marked {
		s1 = c.snapshot(b, exclude)
	}
	if b.failed(name, s1.err) {
		return nil
	}
	stats, err := c.commandStats(b.ctx)
	if b.failed(name, err) {
		return nil
	}
	wall := s1.at.Sub(s0.at).Seconds()
	var redisTotal float64
	self := (s1.self - s0.self) / wall * 100
	peers := []Peer{peer("bench process (Go)", ptr(self))}
	var perNode []string
	for i := range s0.nodes {
		pct := (s1.nodes[i] - s0.nodes[i]) / wall * 100
		redisTotal += pct
		peers = append(peers, peer("Redis node "+strconv.Itoa(i+1), ptr(pct)))
		perNode = append(perNode, fmt.Sprintf("%.0f%%", pct))
	}
	others := otherCPUSeconds(s0.others, s1.others) / wall * 100
	peers = append(peers, peer("Redis total", ptr(redisTotal)), peer("bench + Redis", ptr(self+redisTotal)),
		peer("other processes", ptr(others)))
	if s1.total > s0.total {
		peers = append(peers, peer("machine busy (/proc/stat, tick-sampled)", ptr((s1.busy-s0.busy)/(s1.total-s0.total)*200)))
	}
	run := &Run{
		Name:     name,
		Messages: messages,
		Seconds:  d.Seconds(),
		Rate:     float64(messages) / d.Seconds(),
		RedisCPU: redisTotal,
	}
	for _, s := range stats {
		if len(run.Commands) == 5 {
			break
		}
		if s.Command == "info" || s.Command == "config|resetstat" || strings.HasPrefix(s.Command, "cluster") {
			continue
		}
		s.PerMsg = float64(s.Calls) / float64(messages)
		s.UsecMsg = float64(s.Usec) / float64(messages)
		run.Commands = append(run.Commands, s)
	}
	b.rep.Runs = append(b.rep.Runs, run)
	b.rep.Rows = append(b.rep.Rows, Row{Section: "9b", Figure: name, Unit: "% of a core", Peers: peers, NoRatio: true})
	progress("%-60s %10s msg/s (%s in %.2fs, Redis CPU %s, bench %.0f%%, others %.0f%%)", name, formatNumber(run.Rate), count(messages), run.Seconds,
		strings.Join(perNode, " + "), self, others)
	return &run.Rate
}

// selfCPU returns the CPU seconds the bench process has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// machineCPU returns the busy and total jiffies of all CPUs (/proc/stat),
// or zeros where it cannot be read.
func machineCPU() (busy, total float64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, f := range fields[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i >= 8 { // guest and guest_nice are counted in user already
			break
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// processTicks returns the CPU time (utime + stime, in clock ticks of
// 1/100 s) of every process but the bench and the given ones
// (/proc/PID/stat), to tell how much of the machine other processes took.
func processTicks(exclude map[int]bool) map[int]float64 {
	out := map[int]float64{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || exclude[pid] {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces: fields after ")".
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseFloat(f[11], 64) // field 14, utime
		s, _ := strconv.ParseFloat(f[12], 64) // field 15, stime
		out[pid] = u + s
	}
	return out
}

// otherCPUSeconds is the CPU time other processes used between two
// processTicks snapshots (processes that started in between count whole;
// those that ended in between are missed).
func otherCPUSeconds(before, after map[int]float64) float64 {
	var ticks float64
	for pid, t := range after {
		ticks += t - before[pid]
	}
	return ticks / 100
}
