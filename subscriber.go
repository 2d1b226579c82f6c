package redisdelay

import (
	"context"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/consumption"
	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Subscriber consumes messages of a consumer group. Each Subscribe call is an
// independent consumer in the group: it receives one message at a time and
// the next only after the previous one is acked or nacked (acks reach Redis
// asynchronously, in batches: see "Delivery" in the package documentation).
// Safe for concurrent use.
type Subscriber struct {
	config SubscriberConfig
	keys   store.Keys
	logger watermill.LoggerAdapter

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

	goneOnce sync.Once // the client was closed: logged once

	// The connections shared with the other components on the client
	// (internal/store/hub.go): background commands go through redis.
	hub   *store.Hub
	redis *store.Gated

	consume *consumption.Subscriber // the subscriptions
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
		initialized: map[string]bool{},
		scheduled:   map[string]int{},
		policy:      groupPolicy(config),
		hub:         store.AcquireHub(config.Client),
	}
	s.redis = store.NewGated(s.hub)
	s.closing, s.close = context.WithCancel(context.Background())
	cc := consumptionConfig(config)
	cc.ClientGone, cc.Reinitialize = s.clientGone, s.reinitialize
	s.consume = consumption.New(s.closing, cc, s.hub, s.redis, logger)
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

// reinitialize creates the topic's consumer group again (see initialize).
func (s *Subscriber) reinitialize(ctx context.Context, topic string) error {
	s.mu.Lock()
	delete(s.initialized, topic)
	s.mu.Unlock()
	return s.initialize(ctx, topic)
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
	if !s.config.DisableScheduler {
		s.schedule(topic, parts)
	}

	out := make(chan *message.Message)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	wait := s.consume.Start(ctx, topic, parts, out)
	go func() {
		defer s.subs.Done()
		wait()
		// Before the channel closes, however the subscription ended
		// (Close, or its ctx): its scheduling ends, leases released.
		if !s.config.DisableScheduler {
			s.unschedule(topic)
		}
		stop()
		cancel()
		close(out)
	}()
	return out, nil
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

// groupPolicy is what schedulers need to reclaim the group's messages on
// their own (they may run in a Manager that never saw this config): the
// limits and the retry delays per attempt, with RetryDelay evaluated for
// the first attempts (the last value repeats).
func groupPolicy(c SubscriberConfig) store.GroupPolicy {
	p := store.GroupPolicy{
		MaxAttempts: c.MaxAttempts, Visibility: c.VisibilityTimeout, MaxDead: c.MaxDeadLetters,
		IdleTimeout: c.ConsumerIdleTimeout, Concurrency: c.GroupConcurrency,
		RateMessages: c.GroupRateLimit.Messages, RatePer: c.GroupRateLimit.Per,
	}
	if c.RetryDelay != nil {
		n := 64
		if c.MaxAttempts > 0 {
			n = min(c.MaxAttempts, n)
		}
		for attempt := 1; attempt <= n; attempt++ {
			p.RetryDelays = append(p.RetryDelays, meta.RoundUpMs(c.RetryDelay(attempt)))
		}
	}
	return p
}

// consumptionConfig is what the subscriptions read of c (defaults set).
func consumptionConfig(c SubscriberConfig) consumption.Config {
	cc := consumption.Config{
		Client: c.Client, Keys: store.Keys{Prefix: c.KeyPrefix}, ConsumerGroup: c.ConsumerGroup, Consumer: c.Consumer,
		BlockTime: c.BlockTime, VisibilityTimeout: c.VisibilityTimeout, HandlerTimeout: c.HandlerTimeout, CloseTimeout: c.CloseTimeout,
		BatchSize: c.BatchSize, MaxAttempts: c.MaxAttempts, MaxDeadLetters: c.MaxDeadLetters, RetryDelay: c.RetryDelay,
		Ordered: c.Ordered, DropExpired: c.ExpiredMessages == DropExpired,
		Concurrency: c.Concurrency, TopicConcurrency: c.TopicConcurrency,
		RateLimit: consumption.Rate(c.RateLimit),
	}
	if len(c.TopicRateLimits) > 0 {
		cc.TopicRateLimits = make(map[string]consumption.Rate, len(c.TopicRateLimits))
		for topic, l := range c.TopicRateLimits {
			cc.TopicRateLimits[topic] = consumption.Rate(l)
		}
	}
	if m := c.Metrics; m != nil {
		group := c.ConsumerGroup
		cc.Metrics = func(topic string) consumption.SubscriptionMetrics {
			if rec := m.Subscription(topic, group); rec != nil {
				return rec
			}
			return nil // not a nil SubscriptionMetrics in a non-nil interface
		}
	}
	return cc
}
