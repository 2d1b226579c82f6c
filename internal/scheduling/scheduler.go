// Package scheduling is the scheduling service: per partition of a topic,
// a loop that moves due messages from the waiting and retry sets to the
// consumer groups (promote.lua), unpacks the far tier, reclaims messages of
// consumers that stopped, and trims the stream. A Manager runs one, and so
// does each Subscriber for its topics (the root package builds it from
// their configs). The recurring schedules (Publisher.Schedule) are another
// feature: see the root package's recurring.go.
package scheduling

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/balance"
	"github.com/redisdelay/watermill-redisdelay/internal/levels"
	"github.com/redisdelay/watermill-redisdelay/internal/loglimit"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Scheduler runs one loop per topic that promotes due messages, sleeping
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
// The scheduler listens, on its client's hub (internal/store/hub.go), to
// the wake channel of each partition it schedules, by name: no pattern, so
// an ACL granting the channels &<prefix>:* suffices, and wake-ups of
// unknown topics do not reach it. A loop whose partition holds nothing to
// schedule for a TrimInterval retires (see idle.lua); the next wake-up of
// the partition starts it again, so idle topics cost nothing but their
// subscription.
type Scheduler struct {
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
	limiter   *loglimit.Limiter  // repeated errors of all partitions
	gone      func(topic string) // called when the client was closed under the scheduler
	readers   Readers            // nil: none (a Manager)

	// The client's hub, through which commands go (redis) and
	// notifications come (l, set by Start).
	hub   *store.Hub
	redis *store.Gated
	l     *store.Listener
	mark  *store.Listener // listens to the wake channels' level marks (listenWake)
	// The scheduler reads the far tier: announced as a reader of its
	// storage level (internal/levels) while it runs.
	lvl *levels.Holder

	mu        sync.Mutex
	ctx       context.Context
	cancel    context.CancelFunc
	discover  bool                               // listen to topic registrations (a Manager with no topic list)
	known     map[store.Shard]partition          // scheduled partitions: l listens to their wake channels
	loops     map[store.Shard]chan string        // a loop per partition with work: its wake-ups
	stops     map[store.Shard]context.CancelFunc // ends a loop
	balances  map[string]*balance.Balance        // topics of several partitions: their leases held
	running   map[*loopRun]partition             // loops not yet returned (retired ones until their end ran)
	refresh   chan struct{}                      // a topic was registered (discover only)
	ticks     chan struct{}                      // wakes the tick loop of the schedules (see startTicks)
	denied    atomic.Bool                        // Redis refuses the wake-up subscription (see watchACL)
	filtering atomic.Bool                        // a far filter is being rebuilt (rebuildFarFilter)
	wg        sync.WaitGroup
}

// loopRun is a loop of a partition; done is closed once it returned, its
// end (lease released) done.
type loopRun struct{ done chan struct{} }

// groupsRefresh is how often a scheduler lists a topic's consumer groups
// again even though their number did not change (a group deleted and
// another created in between).
const groupsRefresh = time.Minute

// Config is what a Scheduler needs: the root package builds it from a
// ManagerConfig (a Subscriber's from its SubscriberConfig), its defaults
// set.
type Config struct {
	// Client is the Redis client as configured: the storage level and the
	// maxmemory policy check use it; commands go through Hub.
	Client redis.UniversalClient
	// Hub is the client's hub (internal/store/hub.go), through which
	// commands go and notifications come.
	Hub  *store.Hub
	Keys store.Keys
	// Logger logs the scheduler's work; nil logs nothing.
	Logger watermill.LoggerAdapter
	// CheckInterval, BatchSize, TrimInterval and Retention are the
	// ManagerConfig fields of the same names.
	CheckInterval time.Duration
	BatchSize     int
	TrimInterval  time.Duration
	Retention     time.Duration
	// Metrics receives the scheduler's work; nil records nothing.
	Metrics Metrics
	// Limiter holds back repeated errors of all partitions; nil: one of
	// the Scheduler's own.
	Limiter *loglimit.Limiter
	// Discover makes the Scheduler listen to topic registrations (a
	// Manager with no topic list): see Refresh.
	Discover bool
	// Gone is called when the client was closed under the scheduler (nil:
	// the loop retries like after any failure).
	Gone func(topic string)
	// Readers, for a Subscriber's scheduler, are its subscriptions: a tick
	// falling due is handed to one waiting for the partition's bell, which
	// runs it with its read (see Readers); nil for a Manager.
	Readers Readers
}

// Readers run a scheduler's tick of a partition in the read of a
// subscription of the same process that waits for the partition's bell:
// one round trip for both, where the scheduler's own call would ring the
// bell and the subscription read after it. ran is false when none took it
// (the scheduler calls promote.lua itself). The consumption package's
// Subscriber implements it.
type Readers interface {
	Promote(ctx context.Context, sh store.Shard, a store.PromoteArgs) (r store.PromoteReply, ran bool, err error)
}

// New returns a Scheduler; call Start to start it.
func New(config Config) *Scheduler {
	limiter := config.Limiter
	if limiter == nil {
		limiter = loglimit.New()
	}
	logger := config.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Scheduler{
		client: config.Client, keys: config.Keys, logger: logger,
		interval: config.CheckInterval, lease: leaseTime(config.CheckInterval), owner: store.NameAtLevel(watermill.NewUUID(), store.LevelNewest),
		batch: config.BatchSize, trim: config.TrimInterval, retention: config.Retention, metrics: newSchedMetrics(config.Metrics),
		gone: config.Gone, readers: config.Readers, discover: config.Discover, hub: config.Hub, redis: store.NewGated(config.Hub),
		known: map[store.Shard]partition{}, loops: map[store.Shard]chan string{}, stops: map[store.Shard]context.CancelFunc{},
		running:  map[*loopRun]partition{},
		balances: map[string]*balance.Balance{}, refresh: make(chan struct{}, 1), ticks: make(chan struct{}, 1), limiter: limiter,
	}
}

// leaseTime is how long a topic's scheduling lease lasts after each tick of
// its holder, which ticks at least every check interval: half an interval
// (at least 100ms) of slack.
func leaseTime(interval time.Duration) time.Duration {
	return interval + max(interval/2, 100*time.Millisecond)
}

// Start starts listening to the schedules' wake-ups on the client's hub
// (and with Config.Discover to topic registrations); partitions are added
// later (Add). The scheduler runs until ctx ends or Stop is called.
func (s *Scheduler) Start(ctx context.Context) {
	s.ctx, s.cancel = context.WithCancel(ctx)
	h := s.hub
	s.lvl = levels.Acquire(s.client, s.keys.Prefix, "scheduler", s.logger)
	s.l = &store.Listener{Fn: s.notified}
	s.mark = &store.Listener{Fn: func(store.Note) {}}
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
func (s *Scheduler) ownChannels() []string {
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
func (s *Scheduler) notified(n store.Note) {
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
func (s *Scheduler) registered() {
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
func (s *Scheduler) wakeTicks() {
	select {
	case s.ticks <- struct{}{}:
	default:
	}
}

// wakeOrStart passes a wake-up to the loop of a partition, or starts the
// loop of a scheduled partition whose loop retired. A released lease
// starts nothing: it concerns standbys, and a retired loop stands by for
// nothing.
func (s *Scheduler) wakeOrStart(sh store.Shard, kind string) {
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
func (s *Scheduler) wake(sh store.Shard, kind string) {
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

// Add starts scheduling the first parts partitions of a topic, each once.
// Schedulers share the partitions of a topic evenly (see balance.Balance): each
// takes a free lease only while it holds no more than the others.
func (s *Scheduler) Add(topic string, parts int) {
	if parts > 1 {
		s.mu.Lock()
		if b := s.balances[topic]; b == nil || b.Parts() < parts {
			b = balance.New(parts)
			if old := s.balances[topic]; old != nil {
				b.Owned().Store(old.Owned().Load())
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
func (s *Scheduler) addPartition(topic string, part int) {
	sh := s.keys.Shard(topic, part)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.known[sh]; ok || s.ctx.Err() != nil {
		return
	}
	p := partition{topic: topic, part: part}
	s.known[sh] = p
	s.listenWake(sh)
	s.startLoop(sh, p, false)
}

// listenWake listens to a partition's wake channel and, first, to its
// level mark (see store.LevelMark): the storage level scan counts the
// schedulers that listen without one.
func (s *Scheduler) listenWake(sh store.Shard) {
	s.hub.Listen(store.LevelMark(sh.Wake()), s.mark)
	s.hub.Listen(sh.Wake(), s.l)
}

func (s *Scheduler) unlistenWake(sh store.Shard) {
	s.hub.Unlisten(sh.Wake(), s.l)
	s.hub.Unlisten(store.LevelMark(sh.Wake()), s.mark)
}

// Remove stops scheduling every partition of a topic: their loops end and
// their wake channels are unsubscribed. The returned func waits until the
// loops returned, their leases released: call it without holding a lock
// the loops take.
func (s *Scheduler) Remove(topic string) (wait func()) {
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
		s.unlistenWake(sh)
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
func (s *Scheduler) startLoop(sh store.Shard, p partition, quiet bool) {
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
func (s *Scheduler) restartRetired() {
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
func (s *Scheduler) retire(sh store.Shard, wake chan string) bool {
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

// Stop ends the loops, which release their leases, and stops listening;
// it returns once nothing of the scheduler runs. Before Start it does
// nothing.
func (s *Scheduler) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.mu.Lock()
	for _, c := range s.ownChannels() {
		s.hub.Unlisten(c, s.l)
	}
	for sh := range s.known {
		s.unlistenWake(sh)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.lvl.Release()
}

// Wake-up kinds (the payload on a topic's wake channel).
const (
	wakeGroup   = "g" // a consumer group was created
	wakeRelease = "l" // the lease was released: a standby should take over
	// (Re)subscribed to the wake channel: wake-ups may have been lost while
	// the connection was down. Sent by the scheduler to itself.
	wakeResubscribed = "s"
)

// balanceOf returns the balance of a topic of several partitions, or nil.
func (s *Scheduler) balanceOf(topic string) *balance.Balance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.balances[topic]
}

// counted records that the scheduler took (1) or lost (-1) a lease of the
// topic.
func (s *Scheduler) counted(topic string, n int32) {
	if b := s.balanceOf(topic); b != nil {
		b.Owned().Add(n)
	}
}

// watchACL checks that Redis lets the scheduler's user subscribe to the
// wake channels (see channelGrant). When refused it logs an error naming
// the ACL needed, and keeps a note Inspector.Health reports, refreshed
// while the refusal lasts; once allowed the hub subscribes again to what
// was refused.
func (s *Scheduler) watchACL() {
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
			// The note is stored before the error is logged, so that Health
			// reports what the log says from the moment it says it.
			ctx, cancel := context.WithTimeout(s.ctx, time.Second)
			_ = store.DenyWakeUps(ctx, s.redis, s.keys, detail, max(3*s.interval, 3*time.Second))
			cancel()
			if !denied {
				s.logger.Error("redisdelay: "+detail, err, nil)
				denied = true
			}
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(s.interval):
		}
	}
}

// Context is the scheduler's context, set by Start: it ends when the
// scheduler stops (what runs beside it, the schedule ticks, ends with it).
func (s *Scheduler) Context() context.Context {
	return s.ctx
}

// Redis is the gated client of the hub through which the scheduler's
// commands go.
func (s *Scheduler) Redis() *store.Gated {
	return s.redis
}

// Refresh receives when a topic was registered (Config.Discover only).
func (s *Scheduler) Refresh() <-chan struct{} {
	return s.refresh
}

// Ticks receives when a schedule's next tick was set: it wakes the tick
// loop of the schedules beside the scheduler.
func (s *Scheduler) Ticks() <-chan struct{} {
	return s.ticks
}

// Denied reports whether Redis refuses the scheduler the subscription to
// the wake-ups (see watchACL).
func (s *Scheduler) Denied() bool {
	return s.denied.Load()
}

// Scheduled is how many partitions the scheduler schedules (their loops
// run or wait for a wake-up).
func (s *Scheduler) Scheduled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.known)
}

// partition names one partition of a topic.
type partition struct {
	topic string
	part  int
}
