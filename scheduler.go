package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// scheduler runs one loop per topic that promotes due messages, sleeping
// until the next due time (by Redis's clock), a wake-up published by a
// script that created an earlier due time, or the check interval.
//
// Only one scheduler per topic works at a time: the one holding the topic's
// lease (a key in the topic's hash slot, taken and extended by each tick of
// the holder, released on stop). The others stand by, calling Redis once per
// check interval at most, and take over when the lease expires (a holder
// that died: within about 1.5 check intervals) or is released (at once).
// The lease only saves work: every move is atomic, so schedulers that both
// believe they hold it (after a pause longer than the lease) stay correct.
//
// The scheduler listens, on its client's hub (internal/store/hub.go), to the wake
// channel of each partition it schedules, by name: no pattern, so an ACL
// granting the channels &<prefix>:* suffices, and wake-ups of unknown
// topics reach it not. A loop
// whose partition holds nothing to schedule for a TrimInterval retires (see
// idle.lua); the next wake-up of the partition starts it again, so idle
// topics cost nothing but their subscription.
type scheduler struct {
	client    redis.UniversalClient // as configured; commands go through redis
	keys      store.Keys
	logger    watermill.LoggerAdapter
	interval  time.Duration
	lease     time.Duration
	owner     string
	batch     int
	trim      time.Duration
	retention time.Duration
	metrics   *schedMetrics
	limiter   *logLimiter        // repeated errors of all partitions
	gone      func(topic string) // called when the client was closed under the scheduler

	// Set by start: the client's hub, through which commands go (redis)
	// and notifications come (l).
	hub   *store.Hub
	redis *store.Gated
	l     *store.Listener

	mu       sync.Mutex
	ctx      context.Context
	cancel   context.CancelFunc
	discover bool                               // listen to topic registrations (a Manager with no topic list)
	known    map[store.Shard]partition          // scheduled partitions: l listens to their wake channels
	loops    map[store.Shard]chan string        // a loop per partition with work: its wake-ups
	stops    map[store.Shard]context.CancelFunc // ends a loop
	balances map[string]*balance                // topics of several partitions: their leases held
	running  map[*loopRun]partition             // loops not yet returned (retired ones until their end ran)
	refresh  chan struct{}                      // a topic was registered (discover only)
	ticks    chan struct{}                      // wakes the tick loop of the schedules (see startTicks)
	denied   atomic.Bool                        // Redis refuses the wake-up subscription (see watchACL)
	wg       sync.WaitGroup
}

// partition names one partition of a topic.
type partition struct {
	topic string
	part  int
}

// loopRun is a loop of a partition; done is closed once it returned, its
// end (lease released) done.
type loopRun struct{ done chan struct{} }

// groupsRefresh is how often a scheduler lists a topic's consumer groups
// again even though their number did not change (a group deleted and
// another created in between).
const groupsRefresh = time.Minute

// newScheduler returns a scheduler configured like a Manager (config has its
// defaults set).
func newScheduler(config ManagerConfig, logger watermill.LoggerAdapter) *scheduler {
	return &scheduler{
		client: config.Client, keys: store.Keys{Prefix: config.KeyPrefix}, logger: logger,
		interval: config.CheckInterval, lease: leaseTime(config.CheckInterval), owner: watermill.NewUUID(),
		batch: config.BatchSize, trim: config.TrimInterval, retention: config.Retention, metrics: newSchedMetrics(config.Metrics),
		known: map[store.Shard]partition{}, loops: map[store.Shard]chan string{}, stops: map[store.Shard]context.CancelFunc{},
		running:  map[*loopRun]partition{},
		balances: map[string]*balance{}, refresh: make(chan struct{}, 1), ticks: make(chan struct{}, 1), limiter: newLogLimiter(),
	}
}

// leaseTime is how long a topic's scheduling lease lasts after each tick of
// its holder, which ticks at least every check interval: half an interval
// (at least 100ms) of slack.
func leaseTime(interval time.Duration) time.Duration {
	return interval + max(interval/2, 100*time.Millisecond)
}

// start starts listening to the schedules' wake-ups on the client's hub
// (and with discover to topic registrations); partitions are added later.
func (s *scheduler) start(ctx context.Context, discover bool, h *store.Hub) {
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.discover = discover
	s.hub, s.redis = h, store.NewGated(h)
	s.l = &store.Listener{Fn: s.notified}
	// Before listening: the channels of a refused prefix are held back
	// (see channelGrant), and a refused SUBSCRIBE would slow the hub's
	// pub/sub connection for every listener. A probe that fails otherwise
	// (Redis unreachable) is left to watchACL.
	probe, cancel := context.WithTimeout(s.ctx, time.Second)
	_ = h.ChannelsGranted(probe, s.keys.Prefix)
	cancel()
	for _, c := range s.ownChannels() {
		h.Listen(c, s.l)
	}
	s.warnEviction()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.watchACL()
	}()
}

// ownChannels are the channels the scheduler listens to whatever it
// schedules.
func (s *scheduler) ownChannels() []string {
	channels := []string{s.keys.Schedules().Wake()}
	if s.discover {
		channels = append(channels, s.keys.Registered())
	}
	return channels
}

// notified handles a note of one of the scheduler's channels. The
// confirmation of a (re)subscription counts as a message: what was
// published while the channel was not subscribed is lost, so every loop
// of a (re)subscribed wake channel ticks once then, retired ones included.
func (s *scheduler) notified(n store.Note) {
	switch n.Channel {
	case s.keys.Registered():
		s.registered()
	case s.keys.Schedules().Wake():
		s.wakeTicks()
	default:
		if topic, part, ok := s.keys.PartitionOfWake(n.Channel); ok {
			kind := n.Payload
			if n.Subscribed {
				kind = wakeResubscribed
			}
			s.wakeOrStart(s.keys.Shard(topic, part), kind)
		}
	}
}

// registered tells a discovering Manager that a topic was registered.
func (s *scheduler) registered() {
	if !s.discover {
		return
	}
	select {
	case s.refresh <- struct{}{}:
	default:
	}
}

// wakeTicks wakes the tick loop of the schedules: a schedule's next tick
// was set.
func (s *scheduler) wakeTicks() {
	select {
	case s.ticks <- struct{}{}:
	default:
	}
}

// wakeOrStart passes a wake-up to the loop of a partition, or starts the
// loop of a scheduled partition whose loop retired. A released lease
// starts nothing: it concerns standbys, and a retired loop stands by for
// nothing.
func (s *scheduler) wakeOrStart(sh store.Shard, kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if wake := s.loops[sh]; wake != nil {
		passWake(wake, kind)
		return
	}
	if p, ok := s.known[sh]; ok && kind != wakeRelease && s.ctx.Err() == nil {
		// The partition was idle when its loop retired, and this is the
		// first change since: no housekeeping is due yet. Unless wake-ups
		// may have been lost meanwhile (resubscribed).
		s.startLoop(sh, p, kind != wakeResubscribed)
	}
}

// wake passes a wake-up to the loop of a partition, if it runs. A loop has one
// pending wake-up at most; one that matters more replaces a pending one that
// matters less, so a standby never misses that the lease was released.
func (s *scheduler) wake(sh store.Shard, kind string) {
	// Under mu: a loop retires under mu when no wake-up is pending, so
	// none is passed to a loop that has just retired.
	s.mu.Lock()
	defer s.mu.Unlock()
	if wake := s.loops[sh]; wake != nil {
		passWake(wake, kind)
	}
}

// passWake passes a wake-up to a loop's channel (see wake). Called with
// s.mu held.
func passWake(wake chan string, kind string) {
	select {
	case wake <- kind:
		return
	default:
	}
	select {
	case pending := <-wake:
		if wakeRank(pending) > wakeRank(kind) {
			kind = pending
		}
	default:
	}
	select {
	case wake <- kind:
	default: // another wake-up got in meanwhile: the loop wakes either way
	}
}

// wakeRank orders wake-ups by what a loop would lose by missing one.
func wakeRank(kind string) int {
	switch kind {
	case wakeRelease:
		return 3
	case wakeGroup:
		return 2
	case wakeResubscribed:
		return 1
	}
	return 0
}

// add starts scheduling the first parts partitions of a topic, each once.
// Schedulers share the partitions of a topic evenly (see balance): each
// takes a free lease only while it holds no more than the others.
func (s *scheduler) add(topic string, parts int) {
	if parts > 1 {
		s.mu.Lock()
		if b := s.balances[topic]; b == nil || b.parts < parts {
			b = newBalance(parts)
			if old := s.balances[topic]; old != nil {
				b.owned.Store(old.owned.Load())
			}
			s.balances[topic] = b
		}
		s.mu.Unlock()
	}
	for part := range parts {
		s.addPartition(topic, part)
	}
}

// addPartition starts scheduling a partition of a topic, once: its waiting
// set and the retries of every consumer group registered for it. Once
// added, its loop runs while the partition has work (see retire).
func (s *scheduler) addPartition(topic string, part int) {
	sh := s.keys.Shard(topic, part)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.known[sh]; ok || s.ctx.Err() != nil {
		return
	}
	p := partition{topic: topic, part: part}
	s.known[sh] = p
	s.hub.Listen(sh.Wake(), s.l)
	s.startLoop(sh, p, false)
}

// remove stops scheduling every partition of a topic: their loops end and
// their wake channels are unsubscribed. The returned func waits until the
// loops returned, their leases released: call it without holding a lock
// the loops take.
func (s *scheduler) remove(topic string) (wait func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var runs []*loopRun
	for r, p := range s.running {
		if p.topic == topic {
			runs = append(runs, r) // retired ones too: their end may run still
		}
	}
	wait = func() {
		for _, r := range runs {
			<-r.done
		}
	}
	for sh, p := range s.known {
		if p.topic != topic {
			continue
		}
		delete(s.known, sh)
		s.hub.Unlisten(sh.Wake(), s.l)
		if stop := s.stops[sh]; stop != nil {
			stop()
		}
		delete(s.loops, sh)
		delete(s.stops, sh)
	}
	return wait
}

// startLoop starts the loop of a partition; quiet delays its first trim
// and idle check by a TrimInterval (see loop). Called with s.mu held.
func (s *scheduler) startLoop(sh store.Shard, p partition, quiet bool) {
	ctx, stop := context.WithCancel(s.ctx)
	wake := make(chan string, 1)
	s.loops[sh] = wake
	s.stops[sh] = stop
	r := &loopRun{done: make(chan struct{})}
	s.running[r] = p
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.running, r)
			s.mu.Unlock()
			close(r.done)
		}()
		defer stop()
		s.loop(ctx, p.topic, p.part, wake, quiet)
	}()
}

// restartRetired starts the loops of the scheduled partitions whose loop
// retired: Redis refuses the wake-ups that would start them.
func (s *scheduler) restartRetired() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sh, p := range s.known {
		if s.loops[sh] == nil && s.ctx.Err() == nil {
			s.startLoop(sh, p, false)
		}
	}
}

// retire ends the loop of a partition found idle, unless a wake-up came in
// meanwhile, or Redis was found to refuse the wake-ups (checked under the
// lock restartRetired takes after setting denied, so a loop cannot retire
// between that restart and its own check). It reports whether the loop is
// to return.
func (s *scheduler) retire(sh store.Shard, wake chan string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.denied.Load() || s.loops[sh] != wake || len(wake) > 0 {
		return false
	}
	delete(s.loops, sh)
	delete(s.stops, sh)
	return true
}

// partitionFields identify a partition in logs.
func partitionFields(topic string, part int) watermill.LogFields {
	f := watermill.LogFields{"topic": topic}
	if part > 0 {
		f["partition"] = part
	}
	return f
}

// stop ends the loops, which release their leases, and stops listening;
// it returns once nothing of the scheduler runs.
func (s *scheduler) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.mu.Lock()
	for _, c := range s.ownChannels() {
		s.hub.Unlisten(c, s.l)
	}
	for sh := range s.known {
		s.hub.Unlisten(sh.Wake(), s.l)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Wake-up kinds (the payload on a topic's wake channel).
const (
	wakeGroup   = "g" // a consumer group was created
	wakeRelease = "l" // the lease was released: a standby should take over
	// (Re)subscribed to the wake channel: wake-ups may have been lost while
	// the connection was down. Sent by the scheduler to itself.
	wakeResubscribed = "s"
)

// loop schedules one partition until ctx ends, the client is closed
// under it, or it retires (see retire). A quiet loop (one woken after it
// retired) trims and checks for idleness first after a TrimInterval, not
// at its first tick.
func (s *scheduler) loop(ctx context.Context, topic string, part int, wake chan string, quiet bool) {
	l := &partLoop{
		s: s, topic: topic, part: part, sh: s.keys.Shard(topic, part), fields: partitionFields(topic, part), wake: wake,
		relist: true, nextReclaim: map[string]time.Time{},
	}
	if quiet {
		l.lastTrim, l.lastIdle = time.Now(), time.Now()
	}
	defer l.end()
	// With Go 1.23 timer semantics (go.mod), Stop and Reset leave no stale
	// tick behind, so the timer is reused without draining.
	timer := time.NewTimer(s.interval)
	defer timer.Stop()

	for ctx.Err() == nil {
		t, err := l.tick(ctx)
		wait := t.wait
		if err != nil {
			var stop bool
			if wait, stop = l.failed(ctx, err); stop {
				return
			}
		} else {
			l.failures = 0
		}
		if wait == 0 {
			continue
		}
		if err == nil && l.retireIfIdle(ctx) {
			return
		}
		if !l.sleep(ctx, timer, wait) {
			return
		}
		s.logger.Trace("redisdelay: scheduler woke", l.fields)
	}
}

// partLoop is the state of a scheduler's loop over one partition.
type partLoop struct {
	s      *scheduler
	topic  string
	part   int
	sh     store.Shard
	fields watermill.LogFields
	wake   chan string

	groups   []string
	listed   time.Time // when groups was read
	relist   bool      // read groups before the next tick
	held     bool      // this scheduler holds the topic's lease
	extended time.Time // when a tick last took or renewed it (at the tick's start)
	declined bool      // the last tick declined the free lease (see balance.mayTake)
	// When the partition was last trimmed, and checked for work (see
	// retire): zero at the loop's start, so its first tick trims and
	// checks, and a loop started for a partition with nothing to do (a
	// Subscriber's first subscription to a quiet topic) retires at once.
	lastTrim    time.Time
	lastIdle    time.Time
	lastBeat    time.Time // partition 0: the scheduler's last heartbeat in the topic's list
	nextReclaim map[string]time.Time
	failures    int
}

// end runs when the loop ends. The lease is released even when this
// scheduler does not know it holds it: a tick whose reply was lost
// (cancelled by Close) may have taken it. The script releases only the
// caller's own lease.
func (l *partLoop) end() {
	s := l.s
	if b := s.balanceOf(l.topic); b != nil {
		if l.held {
			b.owned.Add(-1)
		}
		if l.part == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second) // else it expires
			_ = b.beat(ctx, s.redis, store.TopicSchedulers(l.sh), s.owner, 0)
			cancel()
		}
	}
	s.metrics.forget(l.sh)
	s.release(l.sh, l.fields)
}

// tick promotes what is due when this scheduler holds (or takes) the
// lease, then reclaims and trims when their time has come.
func (l *partLoop) tick(ctx context.Context) (tick, error) {
	started := time.Now()
	if err := l.listGroups(ctx); err != nil {
		return tick{}, err
	}
	take, err := l.balance(ctx)
	if err != nil {
		return tick{}, err
	}
	// The lease is renewed once half its spare time (beyond the check
	// interval, within which the next tick comes) has passed, not at every
	// tick: a tick within the interval renews it before it expires.
	extend := time.Since(l.extended) >= (l.s.lease-l.s.interval)/2
	t, err := l.s.promote(ctx, l.sh, l.fields, l.groups, take, extend)
	if err != nil {
		return t, err
	}
	if t.held && (extend || !l.held) {
		l.extended = started
	}
	if t.held && t.far >= 0 {
		// A failure here must not keep the rest of the tick (reclaim, trim)
		// from running: it is logged, and the next tick tries again.
		done, err := l.s.unpackFar(ctx, l.sh, l.fields, t.farFormat, t.far)
		if err != nil && ctx.Err() == nil {
			l.s.limiter.errorf(l.s.logger, "redisdelay: cannot unpack far messages; retrying at the next tick", err, l.fields)
		}
		if done {
			t.wait = 0 // promote what came in, unpack the rest
		}
	}
	l.declined = t.declined
	if t.groups != len(l.groups) {
		l.relist = true
		if t.held {
			t.wait = 0 // schedule the new group's retries now
		}
	}
	if !l.holds(t.held) {
		return t, nil
	}
	if err := l.reclaimAndTrim(ctx, started); err != nil {
		return t, err
	}
	if t.empty && t.wait > 0 {
		t.wait = l.emptyWait(t.wait)
	}
	return t, nil
}

// emptyWait is how long the loop of a partition with nothing scheduled
// sleeps: until its next reclaim, trim or idle check, since whatever
// schedules something wakes it (a publish, a retry, a new group). It
// ticks every check interval all the same where wake-ups may not come
// (Redis refuses their channel), and in a topic of several partitions,
// where its scheduler's heartbeat (partition 0) and share of the leases
// are kept each check interval. The lease lapses meanwhile: the next tick
// takes it again, or a standby has it by then (it only saves work).
func (l *partLoop) emptyWait(wait time.Duration) time.Duration {
	s := l.s
	if s.denied.Load() || s.balanceOf(l.topic) != nil {
		return wait
	}
	next := l.lastTrim
	if l.lastIdle.Before(next) {
		next = l.lastIdle
	}
	next = next.Add(s.trim)
	for _, g := range l.groups {
		if r := l.nextReclaim[g]; r.Before(next) {
			next = r
		}
	}
	return max(time.Until(next), wait)
}

// listGroups reads the topic's consumer groups when they may have changed,
// and once per groupsRefresh.
func (l *partLoop) listGroups(ctx context.Context) error {
	if !l.relist && time.Since(l.listed) < groupsRefresh {
		return nil
	}
	g, err := store.Groups(ctx, l.s.redis, l.sh)
	if err != nil {
		return fmt.Errorf("list the consumer groups: %w", err)
	}
	l.groups, l.listed, l.relist = g, time.Now(), false
	return nil
}

// balance shares the leases of a topic of several partitions among its
// schedulers: it renews this scheduler's heartbeat (partition 0), gives
// the lease up when the scheduler holds more than its share, and reports
// whether the tick may take a free lease.
func (l *partLoop) balance(ctx context.Context) (take bool, err error) {
	s := l.s
	b := s.balanceOf(l.topic)
	if b == nil {
		return true, nil
	}
	if l.part == 0 && time.Since(l.lastBeat) >= s.interval/2 {
		if err := b.beat(ctx, s.redis, store.TopicSchedulers(l.sh), s.owner, 3*s.interval); err != nil {
			return false, fmt.Errorf("renew the scheduler's membership: %w", err)
		}
		l.lastBeat = time.Now()
	}
	if cur := b.owned.Load(); l.held && b.surplus(cur) && b.owned.CompareAndSwap(cur, cur-1) {
		// the released wake-up makes a standby take over at once
		s.release(l.sh, l.fields)
		l.held = false
		s.logger.Debug("redisdelay: gave the partition up to another scheduler", l.fields)
	}
	return l.held || b.mayTake(b.owned.Load(), l.declined), nil
}

// holds records whether this scheduler holds the lease after a tick, and
// returns it.
func (l *partLoop) holds(held bool) bool {
	s := l.s
	switch {
	case !held && l.held:
		s.logger.Debug("redisdelay: another scheduler took over the topic", l.fields)
		s.counted(l.topic, -1)
	case held && !l.held:
		s.counted(l.topic, 1)
		clear(l.nextReclaim) // reclaim at once what a previous holder left
		s.logger.Debug("redisdelay: scheduling the topic", l.fields)
	}
	l.held = held
	return held
}

// reclaimAndTrim reclaims the messages of dead consumers of each group
// whose time has come (a quarter of its visibility timeout), and once per
// TrimInterval of every group, removing idle consumers, then trims the
// ready stream.
func (l *partLoop) reclaimAndTrim(ctx context.Context, started time.Time) error {
	s := l.s
	cleanup := time.Since(l.lastTrim) >= s.trim
	for _, g := range l.groups {
		if !cleanup && started.Before(l.nextReclaim[g]) {
			continue
		}
		vis, err := s.reclaim(ctx, l.sh, l.fields, g, cleanup)
		if err != nil {
			return err
		}
		// From the tick's start: the next tick starts later than one
		// interval after it, so a pace of one interval is kept.
		l.nextReclaim[g] = started.Add(reclaimEvery(vis, s.interval))
	}
	if !cleanup {
		return nil
	}
	l.lastTrim = time.Now()
	return s.trimStream(ctx, l.sh, l.fields)
}

// failed handles a failed tick: it returns the pause before the next, or
// stop when the loop must end (ctx ended, or the client was closed).
func (l *partLoop) failed(ctx context.Context, err error) (wait time.Duration, stop bool) {
	s := l.s
	if ctx.Err() != nil {
		return 0, true
	}
	if store.IsClientClosed(err) && s.gone != nil {
		s.gone(l.topic)
		return 0, true
	}
	l.failures++
	wait = backoff(l.failures, s.interval)
	s.limiter.errorf(s.logger, "redisdelay: scheduling failed; retrying", err,
		l.fields.Add(watermill.LogFields{"retry_in": wait.String()}))
	return wait, false
}

// retireIfIdle checks once per TrimInterval, after the tick's trim (same
// pace), whether what reclaim and trim left is nothing to schedule; it
// reports whether the loop retired then. A scheduler that Redis refuses
// the wake-ups retires no loop: none would start again.
func (l *partLoop) retireIfIdle(ctx context.Context) bool {
	s := l.s
	if time.Since(l.lastIdle) < s.trim || s.denied.Load() {
		return false
	}
	l.lastIdle = time.Now()
	idle, err := s.idle(ctx, l.sh, l.groups)
	if err != nil && ctx.Err() == nil {
		s.logger.Error("redisdelay: cannot check whether the partition is idle", err, l.fields)
	}
	if idle {
		if s.retire(l.sh, l.wake) {
			s.logger.Debug("redisdelay: nothing to schedule; the partition's loop retires until a wake-up", l.fields)
			return true
		}
		// A wake-up came meanwhile (at a loop's start, the confirmation
		// of its wake channel's subscription): check again after the tick
		// it calls for.
		l.lastIdle = time.Time{}
	}
	return false
}

// sleep waits wait, or less when a wake-up calls for a tick. A standby has
// nothing to do until the lease ends, so only a release wakes it. It
// returns false when ctx ended.
func (l *partLoop) sleep(ctx context.Context, timer *time.Timer, wait time.Duration) bool {
	timer.Reset(wait)
	for {
		select {
		case <-ctx.Done():
			return false
		case kind := <-l.wake:
			if kind == wakeGroup {
				l.relist = true
			}
			if !l.held && kind != wakeRelease {
				continue
			}
			timer.Stop()
			return true
		case <-timer.C:
			return true
		}
	}
}

// idle runs idle.lua: whether the partition holds nothing to schedule, and
// if so marks it dormant, so the next publish wakes the schedulers.
func (s *scheduler) idle(ctx context.Context, sh store.Shard, groups []string) (bool, error) {
	return store.Idle(ctx, s.redis, sh, groups, s.retention)
}

// balanceOf returns the balance of a topic of several partitions, or nil.
func (s *scheduler) balanceOf(topic string) *balance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.balances[topic]
}

// counted records that the scheduler took (1) or lost (-1) a lease of the
// topic.
func (s *scheduler) counted(topic string, n int32) {
	if b := s.balanceOf(topic); b != nil {
		b.owned.Add(n)
	}
}

// reclaimEvery is how often a group is checked for messages of dead
// consumers: a quarter of its visibility timeout, at least the check
// interval. The check runs on the first tick after that (ticks come at
// least every check interval), so a message is reclaimed at most a quarter
// of the timeout plus a check interval after the timeout ran out.
func reclaimEvery(vis, interval time.Duration) time.Duration {
	return max(vis/4, interval)
}

// tick is what one promote call found.
type tick struct {
	wait      time.Duration // until the next tick
	held      bool          // the caller holds the topic's lease
	declined  bool          // the lease was free and the caller was not to take it
	groups    int           // consumer groups registered for the topic
	far       int64         // the far bucket due for unpacking; -1: none
	farFormat int           // its format (see internal/store/far.go)
	empty     bool          // held, and nothing waits or is due to be retried
}

// promote takes or extends the topic's lease and, when held, moves what is
// due and returns how long to sleep: until the next due message, capped at
// the check interval; 0 when more is due now. A standby sleeps until the
// lease expires, at most the check interval.
func (s *scheduler) promote(ctx context.Context, sh store.Shard, fields watermill.LogFields, groups []string, take, extend bool) (tick, error) {
	r, err := store.Promote(ctx, s.redis, sh, groups, s.batch, s.owner, s.lease, take, extend)
	if err != nil {
		return tick{}, fmt.Errorf("promote due messages: %w", err)
	}
	moved, wait, missing := r.Moved, r.Wait, r.Missing
	s.metrics.promotedTick(sh, fields["topic"].(string), moved, wait, r.Held)
	t := tick{held: r.Held, declined: !r.Held && wait == -1, groups: r.Groups, wait: s.interval, far: r.Far, farFormat: r.FarFormat,
		empty: r.Held && wait == -1 && r.Far < 0}
	if missing > 0 {
		s.logger.Error("redisdelay: waiting messages without a stored body were dropped", nil,
			fields.Add(watermill.LogFields{"count": missing}))
	}
	if moved > 0 {
		s.logger.Trace("redisdelay: promoted due messages", fields.Add(watermill.LogFields{"count": moved}))
	}
	if !t.held && wait >= 0 {
		wait += 1000 // just after the lease expires (-1: it has no expiry)
	}
	if wait >= 0 && time.Duration(wait)*time.Microsecond < s.interval {
		t.wait = time.Duration(wait) * time.Microsecond
	}
	if t.declined {
		// Left to a scheduler holding fewer leases, which a release wakes
		// at once; if none took it by then, the next tick takes it (see
		// balance.mayTake), a short grace rather than a check interval later.
		t.wait = max(s.interval/10, time.Millisecond)
	}
	return t, nil
}

// release gives up the topic's lease if this scheduler holds it and wakes
// the standbys, so one takes over at once.
func (s *scheduler) release(sh store.Shard, fields watermill.LogFields) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // else it expires
	defer cancel()
	_, err := store.Unlease(ctx, s.redis, sh, s.owner, wakeRelease)
	if err != nil && !store.IsClientClosed(err) {
		s.limiter.errorf(s.logger, "redisdelay: cannot release the scheduling lease; another scheduler takes over when it expires", err, fields)
	}
}

// reclaim takes back the group's messages held past its visibility timeout
// by consumers that stopped extending their lease, and with cleanup removes
// consumers idle past the group's idle timeout. It returns the group's
// visibility timeout.
// reclaimBatch is how many pending entries one reclaim.lua call looks at:
// a few ms of Redis time at most.
const reclaimBatch = 256

func (s *scheduler) reclaim(ctx context.Context, sh store.Shard, fields watermill.LogFields, g string, cleanup bool) (time.Duration, error) {
	// A sweep of a long pending list takes several calls (see reclaim.lua).
	var requeued, buried, evicted, missing, removed int64
	var vis time.Duration
	for pos := store.ReclaimStart; pos.Stream != 0; {
		r, err := store.Reclaim(ctx, s.redis, sh, g, reclaimBatch, cleanup, pos)
		if err != nil {
			return 0, fmt.Errorf("reclaim messages of group %q: %w", g, err)
		}
		requeued, buried, evicted, missing, removed, vis = requeued+r.Requeued, buried+r.Buried, evicted+r.Evicted, missing+r.Missing, removed+r.Removed, r.Vis
		pos = r.Next
	}
	s.metrics.reclaimedTick(fields["topic"].(string), g, requeued, buried)
	fields = fields.Add(watermill.LogFields{"consumer_group": g})
	if requeued+buried > 0 {
		s.logger.Info("redisdelay: reclaimed messages from consumers that stopped responding",
			fields.Add(watermill.LogFields{"requeued": requeued, "dead_lettered": buried}))
	}
	if evicted > 0 {
		s.logger.Error("redisdelay: dead letters full (MaxDeadLetters); evicted the oldest", nil, fields.Add(watermill.LogFields{"evicted": evicted}))
	}
	if missing > 0 {
		s.logger.Error("redisdelay: pending entries without content were dropped", nil, fields.Add(watermill.LogFields{"count": missing}))
	}
	if removed > 0 {
		s.logger.Debug("redisdelay: removed idle consumers", fields.Add(watermill.LogFields{"count": removed}))
	}
	return vis, nil
}

func (s *scheduler) trimStream(ctx context.Context, sh store.Shard, fields watermill.LogFields) error {
	r, err := store.Trim(ctx, s.redis, sh, s.retention)
	if err != nil {
		return fmt.Errorf("trim the ready stream: %w", err)
	}
	fields = fields.Add(watermill.LogFields{"count": r.Removed})
	switch {
	case r.Removed > 0 && r.ByRetention:
		s.logger.Info("redisdelay: removed ready messages older than Retention from a topic no consumer group reads", fields)
	case r.Removed > 0:
		s.logger.Debug("redisdelay: trimmed acknowledged entries", fields)
	}
	return nil
}

// watchACL checks that Redis lets the scheduler's user subscribe to the
// wake channels (see channelGrant). When refused it logs an error naming
// the ACL needed, and keeps a note Inspector.Health reports, refreshed
// while the refusal lasts; once allowed the hub subscribes again to what
// was refused.
func (s *scheduler) watchACL() {
	denied := false
	for {
		err := s.hub.ChannelsGranted(s.ctx, s.keys.Prefix)
		if err == nil {
			s.denied.Store(false)
			if denied {
				s.logger.Info("redisdelay: Redis now allows the subscription to wake-ups", nil)
			}
			return
		}
		if s.ctx.Err() != nil {
			return
		}
		if store.IsNoPerm(err) || errors.Is(err, store.ErrRing) {
			if !s.denied.Swap(true) {
				s.wakeTicks()      // to sleep no longer than the check interval from now on
				s.restartRetired() // nothing could start them again
			}
			detail := fmt.Sprintf("Redis refuses the scheduler %s the subscription to wake-up channels (%v): due messages are moved up to a CheckInterval (%s) late, and topics are found at the registry refresh only; grant its Redis user the channels of the key prefix: ACL SETUSER <user> &%s:*",
				s.owner, err, s.interval, s.keys.Prefix)
			if errors.Is(err, store.ErrRing) {
				detail = fmt.Sprintf("the scheduler %s cannot be woken (%v): due messages are moved up to a CheckInterval (%s) late",
					s.owner, err, s.interval)
			}
			if !denied {
				s.logger.Error("redisdelay: "+detail, err, nil)
				denied = true
			}
			ctx, cancel := context.WithTimeout(s.ctx, time.Second)
			_ = store.DenyWakeUps(ctx, s.redis, s.keys, detail, max(3*s.interval, 3*time.Second))
			cancel()
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(s.interval):
		}
	}
}
