package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

type driver struct {
	c     config
	start time.Time

	redis  *redistest.Server
	proxy  *proxy
	direct *redis.Client // verification reads: straight to Redis
	via    *redis.Client // the publisher: through the proxy
	insp   *redisdelay.Inspector
	l      *ledger

	sup       *supervisor
	consumers []*slot
	managers  []*slot

	published      atomic.Int64
	publishRetries atomic.Int64
	consumerKills  atomic.Int64
	livenessKills  atomic.Int64
	restartMu      sync.Mutex // one consumer stop-and-restart at a time
	consumerStops  atomic.Int64
	managerKills   atomic.Int64
	proxyCuts      atomic.Int64
	redisRestarts  atomic.Int64
	streamMax      atomic.Int64
	publishing     atomic.Bool

	mu       sync.Mutex
	failures []string // why the run fails
}

func (d *driver) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.mu.Lock()
	d.failures = append(d.failures, msg)
	d.mu.Unlock()
	d.logf("FAIL: %s", msg)
}

func (d *driver) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chaos: %5.1fs "+format+"\n", append([]any{time.Since(d.start).Seconds()}, args...)...)
}

// key is a key of partition part of the topic (see internal/store/keys.go).
func (d *driver) key(part int, suffix string) string {
	if part == 0 {
		return keyPrefix + ":{" + topic + "}:" + suffix
	}
	n := strconv.Itoa(part)
	return keyPrefix + ":{" + topic + "~" + n + "}:p" + n + ":" + suffix
}

// streamLen is the length of the topic's ready streams, summed over its
// partitions.
func (d *driver) streamLen(ctx context.Context) (int64, error) {
	var total int64
	for part := range d.c.partitions {
		n, err := d.direct.XLen(ctx, d.key(part, "stream")).Result()
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func runDriver(c config) int {
	d := &driver{c: c, start: time.Now()}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := d.run(ctx); err != nil {
		d.fail("%v", err)
	}
	if len(d.failures) > 0 {
		fmt.Fprintf(os.Stderr, "chaos: FAILED (%d problem(s)):\n", len(d.failures))
		for _, f := range d.failures {
			fmt.Fprintln(os.Stderr, "  -", strings.ReplaceAll(f, "\n", "\n    "))
		}
		return 1
	}
	return 0
}

func (d *driver) run(ctx context.Context) error {
	c := d.c
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "redisdelay-chaos-")
	if err != nil {
		return err
	}
	defer func() {
		if c.keep {
			d.logf("kept %s", dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	}()

	// Deferred in this order, cleanup runs: children, proxy, Redis, dir.
	if d.redis, err = startRedis(c.redisServer, dir); err != nil {
		return err
	}
	defer d.redis.Kill()
	if d.proxy, err = startProxy(d.redis.Addr); err != nil {
		return err
	}
	defer d.proxy.close()
	// The driver is the load, not the system under test: its publishers
	// (each with a Publish in flight) and its checks get a connection each.
	d.direct = redis.NewClient(&redis.Options{Addr: d.redis.Addr, PoolSize: 8})
	defer d.direct.Close()
	d.via = redis.NewClient(&redis.Options{Addr: d.proxy.addr(), PoolSize: c.publishers + 4})
	defer d.via.Close()
	if d.insp, err = redisdelay.NewInspector(redisdelay.InspectorConfig{Client: d.direct, KeyPrefix: keyPrefix}); err != nil {
		return err
	}
	d.l = newLedger(c.n, fmt.Sprintf("%08x-%04x-4%03x-8%03x", rand.Uint32(), rand.Uint32N(1<<16), rand.Uint32N(1<<12), rand.Uint32N(1<<12)),
		c.groups > 0 && c.groupConc > 0)

	d.sup = &supervisor{exe: exe, dir: dir, onLog: d.l.addLog, args: []string{
		"-addr", d.proxy.addr(),
		"-subs", strconv.Itoa(c.subs),
		"-fail", strconv.FormatFloat(c.fail, 'g', -1, 64),
		"-hang", strconv.FormatFloat(c.hang, 'g', -1, 64),
		"-handler-timeout", c.handlerTimeout.String(),
		"-work", c.work.String(),
		"-max-attempts", strconv.Itoa(c.maxAttempts),
		"-visibility", c.visibility.String(),
		"-retry-delay", c.retryDelay.String(),
		"-batch", strconv.Itoa(c.batch),
		"-partitions", strconv.Itoa(c.partitions),
		"-ordered=" + strconv.FormatBool(c.ordered),
		"-group-concurrency", strconv.Itoa(c.groupConc),
	}}
	for i := 0; i < 2; i++ {
		d.managers = append(d.managers, d.sup.slot("manager", "m"+strconv.Itoa(i)))
	}
	for i := 0; i < c.consumers; i++ {
		d.consumers = append(d.consumers, d.sup.slot("consumer", "c"+strconv.Itoa(i)))
	}
	all := append(append([]*slot(nil), d.managers...), d.consumers...)
	defer d.sup.closeAll(all)
	for _, sl := range all {
		if err := sl.start(); err != nil {
			return err
		}
	}
	d.logf("%s on %s (AOF, appendfsync always), proxy on %s, %d managers, %d consumers × %d subscriptions, dir %s",
		d.redis.Bin(), d.redis.Addr, d.proxy.addr(), len(d.managers), c.consumers, c.subs, dir)
	if c.groups > 0 {
		d.logf("messages in %d groups, GroupConcurrency %d", c.groups, c.groupConc)
	}
	if err := d.waitForGroup(ctx); err != nil {
		return err
	}

	// Background work, stopped before the final checks.
	bg, stopBg := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopBg(); wg.Wait() }()
	goBg := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(bg) }()
	}
	pollStop := make(chan struct{})
	pollDone := make(chan struct{})
	go func() { defer close(pollDone); d.pollLoop(pollStop) }()
	defer func() {
		select {
		case <-pollStop:
		default:
			close(pollStop)
		}
		<-pollDone
	}()
	goBg(d.sampleLoop)
	goBg(d.progressLoop)
	monkey, stopMonkey := context.WithCancel(bg)
	monkeyDone := make(chan struct{})
	go func() {
		defer close(monkeyDone)
		probeDone := make(chan struct{})
		go func() { defer close(probeDone); d.livenessProbe(monkey) }()
		d.killConsumers(monkey)
		<-probeDone
	}()
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); d.faults(bg) }()
	defer func() { stopBg(); stopMonkey(); <-monkeyDone; <-faultsDone }()

	// Publish, then drain.
	d.publishing.Store(true)
	err = d.publish(ctx)
	d.publishing.Store(false)
	if err != nil {
		return err
	}
	d.logf("published %d messages (%d publish retries); draining", c.n, d.publishRetries.Load())
	deadline := time.Now().Add(c.drain)
	settled := false
	for !settled {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			break
		}
		sleep(ctx, 500*time.Millisecond)
		select {
		case <-faultsDone:
		default:
			continue // every fault must have happened
		}
		if d.l.accounted.Load() < int64(c.n) {
			continue
		}
		settled, _ = d.quiescent(ctx)
	}
	if !settled {
		accounted := d.l.accounted.Load()
		_, why := d.quiescent(ctx)
		if accounted < int64(c.n) {
			d.fail("drain deadline (%s) passed with %d of %d messages neither acked nor dead-lettered", c.drain, int64(c.n)-accounted, c.n)
		} else {
			d.fail("drain deadline (%s) passed: every message is accounted for, but Redis still holds messages (%s): stuck", c.drain, why)
		}
		// Diagnose now, before stopping the consumers hands back what they hold.
		d.diagnose(ctx)
	} else {
		d.logf("every message acked or dead-lettered and nothing left in Redis")
	}
	stopMonkey()
	<-monkeyDone

	// The managers trim every second: give them a moment to trim what was
	// acknowledged last, then stop every child gracefully.
	bound := int64(c.n/100 + 1000)
	for t := time.Now(); time.Since(t) < 10*time.Second; {
		if n, err := d.streamLen(ctx); err == nil && n <= 200 {
			break
		}
		sleep(ctx, 250*time.Millisecond)
	}
	d.stopChildren(all)
	close(pollStop)
	<-pollDone
	if err := d.l.poll(ctx, d.insp, c.maxAttempts); err != nil {
		d.fail("final read of the event logs and dead letters: %v", err)
	}
	streamEnd, err := d.streamLen(ctx)
	if err != nil {
		return fmt.Errorf("final XLEN: %w", err)
	}
	storeMax(&d.streamMax, streamEnd)

	r := d.l.results(c.maxAttempts)
	for _, p := range d.l.problems {
		d.fail("%s", p)
	}
	for _, u := range d.sup.unexpectedExits() {
		d.fail("%s", u)
	}
	d.scanChildOutput(dir)
	if r.lost > 0 {
		d.fail("%d message(s) lost (neither acked nor dead-lettered), e.g. %s", r.lost, d.uuids(r.lostIdx, 20))
	}
	if r.early > 0 {
		var ex []string
		for _, i := range r.earlyIdx {
			ex = append(ex, fmt.Sprintf("%s (%s early, delay %s)", d.l.uuid(i),
				time.Duration(d.l.pubStart[i]+int64(d.l.delayUs[i])*1000-d.l.first[i]), time.Duration(d.l.delayUs[i])*time.Microsecond))
		}
		d.fail("%d message(s) delivered before their due time: %s", r.early, strings.Join(ex, ", "))
	}
	if r.overAttempts > 0 {
		d.fail("%d message(s) delivered more than MaxAttempts (%d) times", r.overAttempts, c.maxAttempts)
	}
	if streamEnd > bound {
		d.fail("ready stream not bounded: %d entries left at the end, more than n/100+1000 = %d", streamEnd, bound)
	}
	if d.consumerKills.Load() == 0 || d.managerKills.Load() == 0 || d.proxyCuts.Load() == 0 || d.redisRestarts.Load() == 0 {
		d.fail("not every fault happened (consumer kills %d, manager kills %d, proxy cuts %d, Redis restarts %d)",
			d.consumerKills.Load(), d.managerKills.Load(), d.proxyCuts.Load(), d.redisRestarts.Load())
	}
	d.logf("deliveries=%d hung_handlers=%d graceful_consumer_stops=%d liveness_kills=%d dead_letters=%d %v",
		d.l.deliveries.Load(), d.l.hangs.Load(), d.consumerStops.Load(), d.livenessKills.Load(), d.l.deadEntries, d.l.deadReasons)
	// The group checks need every message settled: else the run failed
	// already, and diagnose showed the group states.
	groups := ""
	if c.groups > 0 {
		groups = fmt.Sprintf(" groups=%d group_concurrency=%d", c.groups, c.groupConc)
	}
	if c.groups > 0 && settled {
		groups += fmt.Sprintf(" group_state_left=%d", d.groupStateLeft(ctx))
	}
	if c.groups > 0 && c.groupConc > 0 && settled {
		cc := d.l.groupOverlaps(func(i int) int { return i % c.groups }, c.groupConc, d.start)
		for _, e := range cc.examples {
			d.fail("GroupConcurrency %d exceeded: %s", c.groupConc, e)
		}
		if cc.violations > len(cc.examples) {
			d.fail("GroupConcurrency %d exceeded %d times in all (the first %d above)", c.groupConc, cc.violations, len(cc.examples))
		}
		d.logf("group cap check: %d messages' last runs compared, %d left out (retried, reclaimed, handed back, hung or dead); at most %d of one group at once",
			cc.checked, cc.excluded, cc.most)
		groups += fmt.Sprintf(" cap_checked=%d cap_most=%d cap_exceeded=%d", cc.checked, cc.most, cc.violations)
	}
	fmt.Printf("chaos: messages=%d lost=%d early=%d duplicates=%d dead=%d max_lateness=%.2fs stream_len_end=%d stream_len_max=%d consumer_kills=%d manager_kills=%d proxy_cuts=%d redis_restarts=%d publish_retries=%d%s elapsed=%s\n",
		c.n, r.lost, r.early, r.duplicates, r.dead, time.Duration(r.maxLateNs).Seconds(), streamEnd, d.streamMax.Load(),
		d.consumerKills.Load(), d.managerKills.Load(), d.proxyCuts.Load(), d.redisRestarts.Load(), d.publishRetries.Load(),
		groups, time.Since(d.start).Round(time.Second))
	return nil
}

func (d *driver) uuids(idx []int, most int) string {
	var s []string
	for _, i := range idx[:min(len(idx), most)] {
		s = append(s, d.l.uuid(i))
	}
	return strings.Join(s, " ")
}

// waitForGroup waits until a consumer created the consumer group, so the
// first messages are not published before anyone listens (they would not
// be lost either way: a new group reads the stream from its start).
func (d *driver) waitForGroup(ctx context.Context) error {
	for t := time.Now(); time.Since(t) < 30*time.Second; sleep(ctx, 100*time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		groups, err := d.direct.XInfoGroups(ctx, d.key(d.c.partitions-1, "stream")).Result() // the last one a consumer creates
		if err == nil && len(groups) > 0 {
			return nil
		}
	}
	return errors.New("no consumer created the consumer group within 30s (see the consumers' stderr with -keep)")
}

// publish publishes the n messages from c.publishers goroutines, at most
// c.rate per second, retrying each until Redis takes it.
func (d *driver) publish(ctx context.Context) error {
	c := d.c
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
		Client: d.via, KeyPrefix: keyPrefix, PublishTimeout: 3 * time.Second, Partitions: c.partitions,
	}, nil)
	if err != nil {
		return err
	}
	defer pub.Close()
	var next atomic.Int64
	t0 := time.Now()
	interval := float64(time.Second) / c.rate
	maxUs := uint32(c.maxDelay / time.Microsecond)
	errs := make(chan error, c.publishers)
	var wg sync.WaitGroup
	for w := 0; w < c.publishers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= c.n || ctx.Err() != nil {
					return
				}
				sleep(ctx, time.Until(t0.Add(time.Duration(float64(i)*interval))))
				msg := message.NewMessage(d.l.uuid(i), []byte(strconv.Itoa(i)))
				var us uint32
				switch r := rand.Float64(); {
				case r < c.far:
					us = 125_000_000 + rand.Uint32N(25_000_000) // the far tier (see internal/store/far.go), due before the drain deadline
				case r >= c.far+c.zeroDelay:
					us = 1 + rand.Uint32N(maxUs) // (0, max-delay], with sub-ms parts
				}
				delay.Message(msg, delay.For(time.Duration(us)*time.Microsecond))
				if g := c.groupOf(i); g != "" {
					redisdelay.SetGroup(msg, g)
				}
				d.l.delayUs[i] = us
				d.l.pubStart[i] = time.Now().UnixNano()
				for {
					err := pub.Publish(topic, msg)
					if err == nil {
						break
					}
					if errors.Is(err, redisdelay.ErrDuplicateMessage) || errors.Is(err, redisdelay.ErrInvalidDelay) ||
						errors.Is(err, redisdelay.ErrMessageTooLarge) || errors.Is(err, redisdelay.ErrInvalidTopic) {
						errs <- fmt.Errorf("publish %s: %w (not a transient error)", msg.UUID, err)
						return
					}
					if ctx.Err() != nil {
						return
					}
					// Safe to repeat: a delayed message still waiting is not
					// stored twice; an immediate one may be delivered twice
					// (counted as a duplicate).
					d.publishRetries.Add(1)
					sleep(ctx, 100*time.Millisecond)
				}
				d.published.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// pollLoop reads the event logs and dead letters four times a second until
// stop is closed.
func (d *driver) pollLoop(stop <-chan struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	lastErr := time.Time{}
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := d.l.poll(ctx, d.insp, d.c.maxAttempts)
		cancel()
		if err != nil && time.Since(lastErr) > 5*time.Second { // expected while Redis restarts
			lastErr = time.Now()
			d.logf("poll: %v", err)
		}
	}
}

// sampleLoop records the longest ready stream, once a second.
func (d *driver) sampleLoop(ctx context.Context) {
	for ctx.Err() == nil {
		if n, err := d.streamLen(ctx); err == nil {
			storeMax(&d.streamMax, n)
		}
		sleep(ctx, time.Second)
	}
}

func (d *driver) progressLoop(ctx context.Context) {
	for {
		sleep(ctx, 5*time.Second)
		if ctx.Err() != nil {
			return
		}
		phase := "drain"
		if d.publishing.Load() {
			phase = "publish"
		}
		where := "stats unavailable"
		if st, err := d.insp.Stats(ctx, topic); err == nil {
			where = fmt.Sprintf("waiting=%d stream=%d", st.Waiting, st.Stream)
			for _, g := range st.Groups {
				where += fmt.Sprintf(" ready=%d pending=%d retry=%d dead=%d consumers=%d", g.Ready, g.Pending, g.Retry, g.Dead, g.Consumers)
				if d.c.groups > 0 {
					where += fmt.Sprintf(" grouped=%d active_groups=%d", g.Grouped, g.ActiveGroups)
				}
			}
		}
		d.logf("%s published=%d/%d acked=%d dead=%d accounted=%d deliveries=%d | %s | hangs=%d | kills: consumers=%d (+%d SIGTERM, %d liveness) managers=%d proxy_cuts=%d redis=%d publish_retries=%d",
			phase, d.published.Load(), d.c.n, d.l.ackedN.Load(), d.l.deadN.Load(), d.l.accounted.Load(), d.l.deliveries.Load(),
			where, d.l.hangs.Load(), d.consumerKills.Load(), d.consumerStops.Load(), d.livenessKills.Load(), d.managerKills.Load(), d.proxyCuts.Load(), d.redisRestarts.Load(), d.publishRetries.Load())
	}
}

// killConsumers SIGKILLs a random consumer every kill-min to kill-max (or,
// for a fraction -graceful of them, stops it with SIGTERM, so it hands its
// messages back) and restarts it a moment later, until ctx ends. It keeps
// going while draining: only a process's end frees the message of a hung
// handler.
func (d *driver) killConsumers(ctx context.Context) {
	for {
		sleep(ctx, d.c.killMin+rand.N(d.c.killMax-d.c.killMin+1))
		if ctx.Err() != nil {
			return
		}
		sl := d.consumers[rand.IntN(len(d.consumers))]
		graceful := rand.Float64() < d.c.graceful
		d.restart(sl, func() *proc {
			if graceful {
				p, ok := sl.stop(15 * time.Second)
				if !ok {
					d.fail("consumer %s did not stop within 15s of SIGTERM", sl.name)
				}
				d.consumerStops.Add(1)
				return p
			}
			d.consumerKills.Add(1)
			return sl.kill()
		})
	}
}

// restart ends a consumer's process with end and starts a new one in its
// place a moment later, unless end ended nothing (returns nil) or the slot
// was restarted meanwhile (see slot.replace): a second process in the slot
// would be an orphan that no fault, probe or stop reaches.
func (d *driver) restart(sl *slot, end func() *proc) {
	d.restartMu.Lock()
	defer d.restartMu.Unlock()
	p := end()
	if p == nil {
		return
	}
	time.Sleep(100*time.Millisecond + rand.N(900*time.Millisecond))
	if err := sl.replace(p); err != nil {
		d.fail("restart consumer %s: %v", sl.name, err)
	}
}

// livenessProbe SIGKILLs a consumer whose handler has hung for -liveness,
// as an external liveness probe would in production. Off by default: the
// consumers' HandlerTimeout gives up on a hung handler by itself. Without
// one (-handler-timeout -1), an ordered subscription's hung handler holds
// its whole partition, not one message, until a random kill finds its
// process (23s seen with 3 consumers): the probe bounds that.
func (d *driver) livenessProbe(ctx context.Context) {
	if d.c.liveness <= 0 {
		return
	}
	for ctx.Err() == nil {
		sleep(ctx, 250*time.Millisecond)
		for _, sl := range d.consumers {
			p := sl.current()
			if p == nil {
				continue
			}
			since, hung := d.l.hungSince(filepath.Join(d.sup.dir, p.name+".events"))
			if !hung || time.Since(since) < d.c.liveness || ctx.Err() != nil {
				continue
			}
			d.restart(sl, func() *proc {
				if sl.current() != p {
					// Logged, so a run's log shows every decision of the
					// probe (a silent no-op once hid an orphan).
					d.logf("liveness: %s hung for %s, already replaced by a random kill", p.name, d.c.liveness)
					return nil
				}
				d.logf("liveness: %s hung for %s; SIGKILL", p.name, d.c.liveness)
				d.livenessKills.Add(1)
				return sl.kill()
			})
		}
	}
}

// faults runs the one-off faults, one after the other, as publishing
// progresses: a manager SIGKILL at 30%, a proxy cut at 50%, a Redis SIGKILL
// and restart at 75%.
func (d *driver) faults(ctx context.Context) {
	at := func(fraction float64) bool {
		for ctx.Err() == nil && float64(d.published.Load()) < fraction*float64(d.c.n) {
			sleep(ctx, 50*time.Millisecond)
		}
		return ctx.Err() == nil
	}
	if !at(0.3) {
		return
	}
	m := d.managers[0]
	d.logf("SIGKILL manager %s", m.name)
	killed := m.kill()
	d.managerKills.Add(1)
	sleep(ctx, time.Second)
	if err := m.replace(killed); err != nil {
		d.fail("restart manager: %v", err)
	}

	if !at(0.5) {
		return
	}
	cut := 2*time.Second + rand.N(time.Second)
	d.logf("cutting every proxied connection for %s", cut.Round(time.Millisecond))
	d.proxy.cut()
	d.proxyCuts.Add(1)
	time.Sleep(cut)
	d.proxy.restore()

	if !at(0.75) {
		return
	}
	d.logf("SIGKILL %s", filepath.Base(d.redis.Bin()))
	d.redis.Kill()
	d.redisRestarts.Add(1)
	time.Sleep(500 * time.Millisecond)
	t := time.Now()
	if err := d.redis.Start(); err != nil {
		d.fail("restart Redis: %v", err)
		return
	}
	d.logf("%s restarted from its AOF in %s", filepath.Base(d.redis.Bin()), time.Since(t).Round(time.Millisecond))
}

// quiescent reports whether Redis holds nothing for the group any more:
// nothing waiting, nothing in retry, every ready entry read and acked, no
// redelivery left, in any partition; otherwise what it still holds.
func (d *driver) quiescent(ctx context.Context) (bool, string) {
	var waiting, retry, redo, pending, grouped int64
	unread := false
	for part := range d.c.partitions {
		pipe := d.direct.Pipeline()
		// Grouped messages due and queued in their groups, not yet picked
		// (fair.lua's count "\0n"; absent: none).
		q := pipe.HGet(ctx, d.fair(part), "\x00n")
		w := pipe.ZCard(ctx, d.key(part, "waiting"))
		r := pipe.ZCard(ctx, d.key(part, "g:"+group+":retry"))
		rd := pipe.XLen(ctx, d.key(part, "g:"+group+":redo"))
		p := pipe.XPending(ctx, d.key(part, "stream"), group)
		info := pipe.XInfoStream(ctx, d.key(part, "stream"))
		groups := pipe.XInfoGroups(ctx, d.key(part, "stream"))
		cmds, _ := pipe.Exec(ctx)
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
				return false, fmt.Sprintf("partition %d: %v", part, err)
			}
		}
		if n, err := q.Int64(); err == nil {
			grouped += n
		} else if !errors.Is(err, redis.Nil) {
			return false, fmt.Sprintf("partition %d: queued grouped messages: %v", part, err)
		}
		last := ""
		for _, g := range groups.Val() {
			if g.Name == group {
				last = g.LastDeliveredID
			}
		}
		waiting, retry, redo, pending = waiting+w.Val(), retry+r.Val(), redo+rd.Val(), pending+p.Val().Count
		unread = unread || last != info.Val().LastGeneratedID
	}
	why := fmt.Sprintf("waiting=%d retry=%d redelivery=%d pending=%d unread_in_stream=%v grouped=%d", waiting, retry, redo, pending, unread, grouped)
	return waiting == 0 && retry == 0 && redo == 0 && pending == 0 && !unread && grouped == 0, why
}

// scanChildOutput fails the run for a data race report (a -race build),
// panic or fatal error in any child's stderr: those would otherwise vanish
// with a SIGKILLed child and the temporary directory.
func (d *driver) scanChildOutput(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.stderr"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
			if i := bytes.Index(b, []byte(bad)); i >= 0 {
				d.fail("%s: %q at byte %d:\n%s", filepath.Base(f), bad, i, b[i:min(len(b), i+3000)])
				break
			}
		}
	}
}

// stopChildren stops every child gracefully (SIGTERM), in parallel.
func (d *driver) stopChildren(all []*slot) {
	var wg sync.WaitGroup
	for _, sl := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok := sl.stop(15 * time.Second); !ok {
				d.logf("%s did not stop within 15s of SIGTERM; killed", sl.name)
			}
		}()
	}
	wg.Wait()
	d.sup.mu.Lock()
	d.sup.closed = true
	d.sup.mu.Unlock()
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
