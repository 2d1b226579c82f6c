package redisdelay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/levels"
	"github.com/redisdelay/watermill-redisdelay/internal/loglimit"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// opTimeout bounds one Redis operation of a subscription that must not
// hang (lease renewal, a flush of queued acknowledgements, a hand-back), and
// the flush and the hand-back a subscription makes after its context is
// gone (while closing).
const opTimeout = 5 * time.Second

// Subscriber consumes messages of a consumer group. Each Subscribe call is an
// independent consumer in the group: it receives one message at a time and
// the next only after the previous one is acked or nacked (acks reach Redis
// asynchronously, in batches: see "Delivery" in the package documentation).
// Safe for concurrent use.
type Subscriber struct {
	config SubscriberConfig
	keys   store.Keys
	logger watermill.LoggerAdapter
	now    func() time.Time

	closing   context.Context // cancelled by Close
	close     context.CancelFunc
	closeOnce sync.Once
	subs      sync.WaitGroup

	policy store.GroupPolicy // the group's policy, as init.lua stores it for reclaim

	mu          sync.Mutex
	closed      bool
	initialized map[string]bool
	sched       *scheduler
	scheduled   map[string]int // topic -> subscriptions that need its scheduling

	ticks <-chan struct{} // closed when the schedule ticks stopped (see startTicks)

	limiter  *loglimit.Limiter // repeated errors of all subscriptions
	goneOnce sync.Once         // the client was closed: logged once

	// The connections shared with the other components on the client
	// (internal/store/hub.go): background commands go through redis.
	hub         *store.Hub
	redis       *store.Gated
	bellsDenied atomic.Bool // Redis refuses them: subscriptions poll (see pollEvery)

	// Subscriptions waiting for their bell -> when they last read or were
	// peeked at (see sweep).
	idleMu sync.Mutex
	idle   map[*subscription]time.Time
	// The sweep runs while subscriptions run (active of them, under mu):
	// quiet ends it, and sweepDone is closed once it returned (see
	// activate), so that nothing of a Subscriber whose subscriptions all
	// ended talks to Redis, closed or not.
	active    int
	quiet     context.CancelFunc
	sweepDone chan struct{}

	// Test hooks (export_test.go): ackGate runs before each flush of the
	// acker goroutine; unheld counts lease renewals that found entries
	// pending for a subscription that it does not hold, renewals those
	// that ran (skipped ones excluded).
	ackGate  func(context.Context)
	unheld   atomic.Int64
	renewals atomic.Int64
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber. A nil logger logs nothing.
func NewSubscriber(config SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	s := &Subscriber{
		config:      config,
		keys:        store.Keys{Prefix: config.KeyPrefix},
		logger:      logger,
		now:         time.Now,
		initialized: map[string]bool{},
		scheduled:   map[string]int{},
		idle:        map[*subscription]time.Time{},
		policy:      groupPolicy(config),
		limiter:     loglimit.New(),
		hub:         store.AcquireHub(config.Client),
	}
	s.redis = store.NewGated(s.hub)
	s.closing, s.close = context.WithCancel(context.Background())
	return s, nil
}

// SubscribeInitialize creates the consumer group for the topic if it does not
// exist, so messages published from now on are kept for it. A new group
// starts with the messages still in the topic's ready stream.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return s.initialize(context.Background(), topic)
}

// initialize registers the topic with its partition count (failing on a
// mismatch) and creates the consumer group on every partition, once per
// topic, or again after forget.
func (s *Subscriber) initialize(ctx context.Context, topic string) error {
	s.mu.Lock()
	done := s.initialized[topic]
	s.mu.Unlock()
	if done {
		return nil
	}
	parts := s.partitions(topic)
	if _, err := registerTopic(ctx, s.redis, s.keys, topic, parts, "SubscriberConfig"); err != nil {
		return err
	}
	group := s.config.ConsumerGroup
	for part := range parts {
		sh := s.keys.Shard(topic, part)
		if _, err := store.InitGroup(ctx, s.redis, sh, group, s.policy); err != nil {
			return wrap(err, "create consumer group %q for partition %d of topic %q", group, part, topic)
		}
	}
	s.mu.Lock()
	s.initialized[topic] = true
	s.mu.Unlock()
	return nil
}

// partitions is the configured partition count of a topic.
func (s *Subscriber) partitions(topic string) int {
	return partitionCount(s.config.Partitions, s.config.TopicPartitions, topic)
}

// Subscribe starts a consumer of the topic in the subscriber's consumer
// group, one per partition of the topic, all delivering to the returned
// channel. The channel is closed when ctx is cancelled or the Subscriber is
// closed; messages it fetched but did not get acked by then are handed back
// to the group at once. Either way, once the channel is closed nothing of
// the subscription uses Redis: the topic's scheduling, unless another
// subscription of the Subscriber needs it, has ended and released its
// lease, so another process takes the topic over at once.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.subs.Add(1)
	s.mu.Unlock()

	if err := s.initialize(ctx, topic); err != nil {
		s.subs.Done()
		return nil, err
	}
	parts := s.partitions(topic)
	s.activate()
	if !s.config.DisableScheduler {
		s.schedule(topic, parts)
	}

	out := make(chan *message.Message)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	var wg sync.WaitGroup
	// The consumer's name says which storage level it reads: the storage
	// level scan (internal/levels) tells a live consumer of an older
	// release by a name without it.
	consumer := store.NameAtLevel(s.config.Consumer+"-"+watermill.NewUUID(), store.LevelNewest)
	lvl := levels.Acquire(s.config.Client, s.keys.Prefix, "subscriber", s.logger)
	var order *balance
	if s.config.Ordered {
		order = newBalance(parts)
		heartbeat := s.join(ctx, order, topic, consumer)
		wg.Add(1)
		go func() {
			defer wg.Done()
			heartbeat()
		}()
	}
	for part := range parts {
		m := newSubMetrics(s.config.Metrics, topic, s.config.ConsumerGroup)
		sub := &subscription{
			s:        s,
			topic:    topic,
			part:     part,
			shard:    s.keys.Shard(topic, part),
			consumer: consumer,
			lvl:      lvl,
			out:      out,
			leases:   leases{renewNow: make(chan struct{}, 1)},
			reads:    reads{bell: make(chan struct{}, 1)},
			flow:     flow{wake: make(chan struct{}, 1), slotWake: make(chan struct{}, 1)},
			order:    newOrdering(order),
			acks:     acks{m: m, wake: make(chan struct{}, 1)},
			m:        m,
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub.run(ctx)
		}()
	}
	go func() {
		defer s.subs.Done()
		wg.Wait()
		// Before the channel closes, however the subscription ended
		// (Close, or its ctx): its scheduling ends, leases released.
		if !s.config.DisableScheduler {
			s.unschedule(topic)
		}
		s.deactivate()
		lvl.Release()
		stop()
		cancel()
		close(out)
	}()
	return out, nil
}

// activate counts a subscription that starts, starting the sweep and the
// watch of the notification channels' grant (watchGrant) with the first.
func (s *Subscriber) activate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active++; s.active > 1 {
		return
	}
	ctx, quiet := context.WithCancel(s.closing)
	done := make(chan struct{})
	s.quiet, s.sweepDone = quiet, done
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.sweep(ctx)
	}()
	go func() {
		defer wg.Done()
		s.watchGrant(ctx)
	}()
	go func() {
		wg.Wait()
		close(done)
	}()
}

// deactivate counts a subscription that ended; after the last, it ends
// the sweep and the watch of the channels' grant and returns once they
// returned (a peek or a probe under way runs to its end). A subscription
// starting meanwhile starts them again.
func (s *Subscriber) deactivate() {
	s.mu.Lock()
	s.active--
	quiet, done := s.quiet, s.sweepDone
	if s.active > 0 {
		quiet = nil
	} else {
		s.quiet, s.sweepDone = nil, nil
	}
	s.mu.Unlock()
	if quiet != nil {
		quiet()
		<-done
	}
}

// schedule starts scheduling the topic for a subscription, unless another
// subscription already needs it; unschedule ends that.
func (s *Subscriber) schedule(topic string, parts int) {
	// Under mu, so an unschedule cannot remove what this adds.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sched == nil {
		config := ManagerConfig{Client: s.config.Client, KeyPrefix: s.config.KeyPrefix, CheckInterval: s.config.CheckInterval, Metrics: s.config.Metrics}
		config.setDefaults()
		s.sched = newScheduler(config, s.logger)
		s.sched.gone = s.clientGone
		s.sched.start(s.closing, false, s.hub)
		// The schedules' ticks end with the scheduler (see unschedule).
		s.ticks = startTicks(s.sched.ctx, s.sched, s.logger)
	}
	s.scheduled[topic]++
	s.sched.add(topic, parts)
}

// unschedule ends the scheduling of the topic when the last subscription
// that needed it ended, and returns once its loops ended, their leases
// released, so a process that ends then leaves none behind (another
// scheduler would wait for it to expire). After the Subscriber's last
// scheduled topic the scheduler stops: its schedule ticks and ACL watch
// too. A subscription starting meanwhile starts another.
func (s *Subscriber) unschedule(topic string) {
	s.mu.Lock()
	if s.scheduled[topic]--; s.scheduled[topic] > 0 {
		s.mu.Unlock()
		return
	}
	delete(s.scheduled, topic)
	sched, ticks := s.sched, s.ticks
	wait := sched.remove(topic)
	last := len(s.scheduled) == 0
	if last {
		s.sched, s.ticks = nil, nil
	}
	s.mu.Unlock()
	wait()
	if last {
		sched.stop()
		<-ticks
	}
}

// clientGone stops every subscription and the scheduler when the Redis
// client was closed under them (nothing would work again), logging it once.
func (s *Subscriber) clientGone(topic string) {
	s.goneOnce.Do(func() {
		s.logger.Error(fmt.Sprintf("redisdelay: the Redis client was closed while subscribed to topic %q; "+
			"close the Subscriber before its client. Subscriptions stopped", topic), redis.ErrClosed, nil)
	})
	s.close()
}

// Close stops every subscription, hands back the messages they hold, and
// returns once all their channels are closed. It does not close the Redis
// client. Calling it again is a no-op.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.close()
		s.subs.Wait()
		s.mu.Lock()
		sched, ticks := s.sched, s.ticks
		s.mu.Unlock()
		if sched != nil {
			sched.stop()
			<-ticks
		}
		s.hub.Release()
	})
	return nil
}

const (
	nackFailed  nackKind = iota // a failed attempt (or an undecodable entry)
	nackSnoozed                 // Snooze: requeued with its attempt unchanged
	nackExpired                 // past its deadline: buried, never delivered
)
