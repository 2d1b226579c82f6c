package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Manager runs the scheduling of topics in a process of its own: it moves due
// messages from the waiting sets to the ready streams and due retries back to
// their consumer groups, and trims acknowledged entries from the streams.
// Subscribers do the same for their topics unless
// SubscriberConfig.DisableScheduler is set. Any number of Managers and
// subscribers may schedule the same topic: one at a time does the work,
// holding the topic's lease in Redis, and another takes over when it stops
// (see SubscriberConfig.DisableScheduler). Should two work at once (after a
// pause longer than the lease), nothing is lost or delivered twice: every
// move is one atomic Redis script.
//
// Due times are compared by Redis's clock only, so a Manager whose host
// clock is off still fires on time.
type Manager struct {
	config  ManagerConfig
	logger  watermill.LoggerAdapter
	sched   *scheduler
	running chan struct{}

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewManager returns a Manager; call Run to start it. A nil logger logs nothing.
func NewManager(config ManagerConfig, logger watermill.LoggerAdapter) (*Manager, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Manager{
		config:  config,
		logger:  logger,
		sched:   newScheduler(config, logger),
		running: make(chan struct{}),
		done:    make(chan struct{}),
	}, nil
}

// Run schedules until ctx is cancelled or Close is called, then returns nil.
// It returns an error if the Manager was already started.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return errors.New("redisdelay: Manager.Run called twice: create a Manager per Run")
	}
	m.started = true
	ctx, m.cancel = context.WithCancel(ctx)
	m.mu.Unlock()
	defer close(m.done)

	static := len(m.config.Topics) > 0
	m.sched.start(ctx, !static)
	close(m.running)
	m.logger.Info("redisdelay manager running", watermill.LogFields{"topics": m.config.Topics})

	m.discoverTopics(ctx, static)
	m.sched.stop()
	return nil
}

// discoverTopics schedules every partition of the configured topics, or
// without a list of every topic in the registry, now and every
// CheckInterval, until ctx ends: partitions are read from Redis, so a
// topic that gets its partition count later is scheduled whole. Wake-ups of
// unknown topics add them sooner.
func (m *Manager) discoverTopics(ctx context.Context, static bool) {
	t := time.NewTicker(m.config.CheckInterval)
	defer t.Stop()
	for {
		if err := m.discover(ctx, static); err != nil && ctx.Err() == nil {
			m.logger.Error("redisdelay: cannot list topics", err, nil)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Manager) discover(ctx context.Context, static bool) error {
	topics := m.config.Topics
	if !static {
		var err error
		if topics, err = m.config.Client.SMembers(ctx, m.sched.keys.topics()).Result(); err != nil {
			return err
		}
		topics = slices.DeleteFunc(topics, func(t string) bool { return validateTopic(t) != nil })
	}
	parts, err := storedPartitions(ctx, m.config.Client, m.sched.keys, topics...)
	if err != nil {
		return err
	}
	for i, topic := range topics {
		m.sched.add(topic, parts[i])
	}
	return nil
}

// Running is closed once Run has started scheduling.
func (m *Manager) Running() chan struct{} {
	return m.running
}

// Close stops a running Manager and waits until Run has returned. It does not
// close the Redis client. Calling it again, or before Run, is a no-op.
func (m *Manager) Close() error {
	m.mu.Lock()
	started, cancel := m.started, m.cancel
	m.mu.Unlock()
	if !started {
		return nil
	}
	cancel()
	<-m.done
	return nil
}

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
type scheduler struct {
	client    redis.UniversalClient
	keys      keys
	logger    watermill.LoggerAdapter
	interval  time.Duration
	lease     time.Duration
	owner     string
	batch     int
	trim      time.Duration
	retention time.Duration
	metrics   *Metrics

	mu       sync.Mutex
	ctx      context.Context
	cancel   context.CancelFunc
	pubsub   *redis.PubSub
	discover bool                  // add partitions that wake-ups name (a Manager with no topic list)
	loops    map[shard]chan string // a loop per scheduled partition: its wake-ups
	balances map[string]*balance   // topics of several partitions: their leases held
	wg       sync.WaitGroup
}

// pubsubHealthCheck is how often an idle wake-up subscription pings Redis
// (go-redis's default, 3s, costs 0.33 calls/s per scheduler).
const pubsubHealthCheck = 30 * time.Second

// groupsRefresh is how often a scheduler lists a topic's consumer groups
// again even though their number did not change (a group deleted and
// another created in between).
const groupsRefresh = time.Minute

// newScheduler returns a scheduler configured like a Manager (config has its
// defaults set).
func newScheduler(config ManagerConfig, logger watermill.LoggerAdapter) *scheduler {
	return &scheduler{
		client: config.Client, keys: keys{prefix: config.KeyPrefix}, logger: logger,
		interval: config.CheckInterval, lease: leaseTime(config.CheckInterval), owner: uuid.NewString(),
		batch: config.BatchSize, trim: config.TrimInterval, retention: config.Retention, metrics: config.Metrics,
		loops: map[shard]chan string{}, balances: map[string]*balance{},
	}
}

// leaseTime is how long a topic's scheduling lease lasts after each tick of
// its holder, which ticks at least every check interval: half an interval
// (at least 100ms) of slack.
func leaseTime(interval time.Duration) time.Duration {
	return interval + max(interval/2, 100*time.Millisecond)
}

// start opens the wake-up subscription: a pattern over every topic when
// discover is set, otherwise one channel per added topic.
func (s *scheduler) start(ctx context.Context, discover bool) {
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.discover = discover
	if discover {
		s.pubsub = s.client.PSubscribe(s.ctx, s.keys.wakePattern())
	} else {
		s.pubsub = s.client.Subscribe(s.ctx)
	}
	// Subscription confirmations come again after every reconnect: wake-ups
	// published while the connection was down are lost, so every loop of
	// the (re)subscribed channels ticks once then.
	// The health check pings an idle subscription; a connection found dead
	// late only delays what the check interval bounds anyway.
	ch := s.pubsub.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(pubsubHealthCheck))
	s.warnEviction()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for m := range ch {
			switch m := m.(type) {
			case *redis.Message:
				topic, part, ok := s.keys.partitionOfWake(m.Channel)
				if !ok {
					continue
				}
				if s.discover && validateTopic(topic) == nil && part < maxPartitions {
					s.addPartition(topic, part)
				}
				s.wake(s.keys.shard(topic, part), m.Payload)
			case *redis.Subscription:
				if m.Kind != "subscribe" && m.Kind != "psubscribe" {
					continue
				}
				if topic, part, ok := s.keys.partitionOfWake(m.Channel); ok && m.Kind == "subscribe" {
					s.wake(s.keys.shard(topic, part), wakeResubscribed)
					continue
				}
				s.mu.Lock()
				shards := make([]shard, 0, len(s.loops))
				for sh := range s.loops {
					shards = append(shards, sh)
				}
				s.mu.Unlock()
				for _, sh := range shards {
					s.wake(sh, wakeResubscribed)
				}
			}
		}
	}()
}

// wake passes a wake-up to the loop of a partition, if it runs. A loop has one
// pending wake-up at most; one that matters more replaces a pending one that
// matters less, so a standby never misses that the lease was released.
func (s *scheduler) wake(sh shard, kind string) {
	s.mu.Lock()
	wake := s.loops[sh]
	s.mu.Unlock()
	if wake == nil {
		return
	}
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
// set and the retries of every consumer group registered for it.
func (s *scheduler) addPartition(topic string, part int) {
	sh := s.keys.shard(topic, part)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.loops[sh]; ok || s.ctx.Err() != nil {
		return
	}
	wake := make(chan string, 1)
	s.loops[sh] = wake
	if !s.discover {
		if err := s.pubsub.Subscribe(s.ctx, sh.wake()); err != nil {
			s.logger.Error("redisdelay: cannot subscribe to wake-ups; falling back to the check interval", err,
				partitionFields(topic, part))
		}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.loop(topic, part, wake)
	}()
}

// partitionFields identify a partition in logs.
func partitionFields(topic string, part int) watermill.LogFields {
	f := watermill.LogFields{"topic": topic}
	if part > 0 {
		f["partition"] = part
	}
	return f
}

func (s *scheduler) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	_ = s.pubsub.Close()
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

func (s *scheduler) loop(topic string, part int, wake <-chan string) {
	ctx := s.ctx
	sh := s.keys.shard(topic, part)
	fields := partitionFields(topic, part)
	var (
		groups      []string
		listed      time.Time // when groups was read
		relist      = true    // read groups before the next tick
		held        bool      // this scheduler holds the topic's lease
		declined    bool      // the last tick declined the free lease (see balance.mayTake)
		lastTrim    = time.Now()
		nextReclaim = map[string]time.Time{}
		failures    int
	)
	// Released even when this scheduler does not know it holds the lease:
	// a tick whose reply was lost (cancelled by Close) may have taken it.
	// The script releases only the caller's own lease.
	defer s.release(sh, fields)
	defer s.metrics.forget(sh)
	var lastBeat time.Time // partition 0: the scheduler's last heartbeat in the topic's list
	defer func() {
		if b := s.balanceOf(topic); b != nil {
			if held {
				b.owned.Add(-1)
			}
			if part == 0 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second) // else it expires
				_ = b.beat(ctx, s.client, []string{sh.schedulers(), sh.leaseCounts()}, s.owner, 0)
				cancel()
			}
		}
	}()
	// With Go 1.23 timer semantics (go.mod), Stop and Reset leave no stale
	// tick behind, so the timer is reused without draining.
	timer := time.NewTimer(s.interval)
	defer timer.Stop()

	for ctx.Err() == nil {
		var t tick
		started := time.Now()
		err := func() error {
			if relist || time.Since(listed) >= groupsRefresh {
				g, err := s.client.SMembers(ctx, sh.groups()).Result()
				if err != nil {
					return fmt.Errorf("list the consumer groups: %w", err)
				}
				groups, listed, relist = g, time.Now(), false
			}
			take := true
			if b := s.balanceOf(topic); b != nil {
				if part == 0 && time.Since(lastBeat) >= s.interval/2 {
					if err := b.beat(ctx, s.client, []string{sh.schedulers(), sh.leaseCounts()}, s.owner, 3*s.interval); err != nil {
						return fmt.Errorf("renew the scheduler's membership: %w", err)
					}
					lastBeat = time.Now()
				}
				if cur := b.owned.Load(); held && b.surplus(cur) && b.owned.CompareAndSwap(cur, cur-1) {
					// the released wake-up makes a standby take over at once
					s.release(sh, fields)
					held = false
					s.logger.Debug("redisdelay: gave the partition up to another scheduler", fields)
				}
				take = held || b.mayTake(b.owned.Load(), declined)
			}
			var err error
			if t, err = s.promote(ctx, sh, fields, groups, take); err != nil {
				return err
			}
			declined = t.declined
			if t.groups != len(groups) {
				relist = true
				if t.held {
					t.wait = 0 // schedule the new group's retries now
				}
			}
			if !t.held {
				if held {
					s.logger.Debug("redisdelay: another scheduler took over the topic", fields)
					s.counted(topic, -1)
				}
				held = false
				return nil
			}
			if !held {
				held = true
				s.counted(topic, 1)
				clear(nextReclaim) // reclaim at once what a previous holder left
				s.logger.Debug("redisdelay: scheduling the topic", fields)
			}
			cleanup := time.Since(lastTrim) >= s.trim
			for _, g := range groups {
				if !cleanup && started.Before(nextReclaim[g]) {
					continue
				}
				vis, err := s.reclaim(ctx, sh, fields, g, cleanup)
				if err != nil {
					return err
				}
				// From the tick's start: the next tick starts later than one
				// interval after it, so a pace of one interval is kept.
				nextReclaim[g] = started.Add(reclaimEvery(vis, s.interval))
			}
			if cleanup {
				lastTrim = time.Now()
				return s.trimStream(ctx, sh, fields)
			}
			return nil
		}()
		wait := t.wait
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait = backoff(failures, s.interval)
			s.logger.Error("redisdelay: scheduling failed; retrying", err,
				fields.Add(watermill.LogFields{"retry_in": wait.String()}))
		} else {
			failures = 0
		}
		if wait == 0 {
			continue
		}

		timer.Reset(wait)
	sleep:
		select {
		case <-ctx.Done():
			return
		case kind := <-wake:
			if kind == wakeGroup {
				relist = true
			}
			if !held && kind != wakeRelease {
				goto sleep // a standby has nothing to do until the lease ends
			}
			timer.Stop()
		case <-timer.C:
		}
		s.logger.Trace("redisdelay: scheduler woke", fields)
	}
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
	wait     time.Duration // until the next tick
	held     bool          // the caller holds the topic's lease
	declined bool          // the lease was free and the caller was not to take it
	groups   int           // consumer groups registered for the topic
}

// promote takes or extends the topic's lease and, when held, moves what is
// due and returns how long to sleep: until the next due message, capped at
// the check interval; 0 when more is due now. A standby sleeps until the
// lease expires, at most the check interval.
func (s *scheduler) promote(ctx context.Context, sh shard, fields watermill.LogFields, groups []string, take bool) (tick, error) {
	mayTake := "1"
	if !take {
		mayTake = "0"
	}
	k := make([]string, 0, 8+3*len(groups))
	k = append(k, sh.lease(), sh.groups(), sh.waiting(), sh.bodies(), sh.stream(), sh.bkeys(), sh.bkeyOf(), sh.prio())
	for _, g := range groups {
		k = append(k, sh.retry(g), sh.retryBodies(g), sh.redelivery(g))
	}
	res, err := promoteScript.Run(ctx, s.client, k, s.batch, s.owner, s.lease.Milliseconds(), mayTake).Int64Slice()
	if err != nil {
		return tick{}, fmt.Errorf("promote due messages: %w", err)
	}
	moved, wait, missing := res[0], res[1], res[2]
	s.metrics.promotedTick(sh, fields["topic"].(string), moved, wait, res[4] == 1)
	t := tick{held: res[4] == 1, declined: res[4] == 0 && wait == -1, groups: int(res[3]), wait: s.interval}
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
func (s *scheduler) release(sh shard, fields watermill.LogFields) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // else it expires
	defer cancel()
	err := unleaseScript.Run(ctx, s.client, []string{sh.lease()}, s.owner, sh.wake(), wakeRelease).Err()
	if err != nil {
		s.logger.Error("redisdelay: cannot release the scheduling lease; another scheduler takes over when it expires", err, fields)
	}
}

// reclaim takes back the group's messages held past its visibility timeout
// by consumers that stopped extending their lease, and with cleanup removes
// consumers idle past the group's idle timeout. It returns the group's
// visibility timeout.
func (s *scheduler) reclaim(ctx context.Context, sh shard, fields watermill.LogFields, g string, cleanup bool) (time.Duration, error) {
	flag := "0"
	if cleanup {
		flag = "1"
	}
	res, err := reclaimScript.Run(ctx, s.client,
		[]string{sh.stream(), sh.redelivery(g), sh.retry(g), sh.retryBodies(g), sh.dead(g), sh.meta(g)},
		g, 1000, sh.wake(), flag).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("reclaim messages of group %q: %w", g, err)
	}
	requeued, buried, evicted, missing, removed := res[0], res[1], res[2], res[3], res[4]
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
	return time.Duration(res[5]) * time.Millisecond, nil
}

func (s *scheduler) trimStream(ctx context.Context, sh shard, fields watermill.LogFields) error {
	res, err := trimScript.Run(ctx, s.client, []string{sh.stream()}, s.retention.Milliseconds()).Int64Slice()
	if err != nil {
		return fmt.Errorf("trim the ready stream: %w", err)
	}
	fields = fields.Add(watermill.LogFields{"count": res[0]})
	switch {
	case res[0] > 0 && res[1] == 1:
		s.logger.Info("redisdelay: removed ready messages older than Retention from a topic no consumer group reads", fields)
	case res[0] > 0:
		s.logger.Debug("redisdelay: trimmed acknowledged entries", fields)
	}
	return nil
}
