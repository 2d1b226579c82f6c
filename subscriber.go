package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/consumption"
	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Client is the Redis connection. Required. Close never closes it.
	// go-redis's default pool does: whatever the number of topics,
	// partitions and Subscribers, the components sharing a client in a
	// process run at most 3 commands at a time on its pool and hold one
	// pub/sub connection for all their notifications (see
	// docs/operations.md#connections).
	Client redis.UniversalClient

	// KeyPrefix namespaces every Redis key (default DefaultKeyPrefix).
	KeyPrefix string

	// ConsumerGroup names the group this subscriber consumes in. Required.
	// Subscribers of one group compete for messages; every group receives
	// every message. A new group starts with the messages still in the
	// ready stream.
	ConsumerGroup string

	// Consumer prefixes the consumer names of this subscriber's subscriptions
	// (each subscription gets a unique name). Default: the host name.
	Consumer string

	// BatchSize is how many messages a subscription fetches from Redis in one
	// read (default 32). Fetched messages are delivered one at a time; those
	// not delivered when the subscription closes go back to the group at
	// once, and those waiting behind a handler that runs long go back at the
	// next lease renewal (after a third to two thirds of VisibilityTimeout),
	// attempt unchanged, for other consumers to take. With fast handlers a
	// larger batch (256, say) keeps up better with many messages due at once:
	// a read waits behind promotion's scripts in Redis, and a larger batch
	// waits fewer times per message (bench/README, the spike).
	BatchSize int

	// BlockTime is how long an idle subscription waits to be told of new
	// messages before the Subscriber peeks for it anyway (default 30s).
	// Reads never block: a subscription that took all there was waits for
	// its partition's notification, which every script adding messages it
	// reads sends (a publish, promotion of due messages, a redelivery, a
	// hand-back), so new messages come at once however long BlockTime is;
	// Close, the end of the Subscribe context and a Pause or Resume end the
	// wait at once too. So BlockTime only sets what an idle subscription
	// costs Redis: one peek script call per BlockTime, sent in one pipeline
	// with those of the Subscriber's other idle subscriptions, which finds
	// messages added by a writer that sends no notification (an older
	// version of this library) and then wakes the subscription. A
	// subscription that reads checks the group's pause flag at least once
	// per BlockTime (a notification of Pause that was lost is noticed
	// then), and a paused one as often, beside the notification of Resume.
	// Where Redis refuses the client the notification channels (an ACL
	// without &<KeyPrefix>:*, logged once) or the client is a *redis.Ring,
	// idle subscriptions read every 100ms instead. Ordered subscriptions
	// read and check their share of the partitions at least once a second.
	BlockTime time.Duration

	// RetryDelay gives the delay before redelivering a nacked message whose
	// handler set no delay metadata, or a message reclaimed from a consumer
	// that stopped responding; attempt is the attempt that failed (1 for the
	// first delivery). Default (nil): DefaultRetryDelay, an exponential
	// backoff from 1s to 10 minutes with jitter. For immediate redelivery,
	// set func(int) time.Duration { return 0 }.
	//
	// A delay the handler sets on the message it nacks (Watermill's
	// middleware.DelayOnError does, from its own InitialInterval and
	// MaxInterval) takes precedence over RetryDelay; it applies to Nacks
	// only, not to reclaims. An Ordered subscription holds its partition
	// while a nacked message waits for its retry.
	//
	// Apart from random jitter, it must depend on attempt only:
	// NewSubscriber evaluates it for the first attempts (up to
	// MaxAttempts, at most 64) and stores the values in Redis, so a
	// scheduler in another process (a Manager) applies the same delays
	// when it reclaims; later attempts repeat the last value there.
	RetryDelay func(attempt int) time.Duration

	// DisableScheduler turns off the scheduler a Subscriber runs for the
	// topics it subscribes (moving due messages to the ready stream and due
	// retries of its group back to it, reclaiming from dead consumers,
	// trimming, removing idle consumers). Turn it off only when a Manager
	// runs: with neither, nothing delayed becomes due and nothing is
	// reclaimed. With it on, any number of subscribers and Managers may
	// schedule the same topic safely: one of them at a time does the work
	// for the topic (for every consumer group of it) while holding a lease
	// in Redis; the others stand by at the cost of one Redis call per
	// CheckInterval and take over when the holder closes (at once) or
	// stops renewing the lease (it died or lost Redis: within 1.5 ×
	// CheckInterval, plus 100ms at most).
	DisableScheduler bool

	// CheckInterval bounds how long the embedded scheduler sleeps when
	// nothing is due (default 2s). It normally wakes exactly at the next due
	// time, or earlier when a publish or retry creates an earlier one (a
	// wake-up published in Redis), and checks again whenever its wake-up
	// subscription reconnects; this interval is the safety net for a
	// wake-up missed otherwise, and the pace at which the scheduler holding
	// a topic's lease renews it (the lease lasts 1.5 × CheckInterval, at
	// least CheckInterval + 100ms). A topic's scheduler that finds nothing
	// to schedule (nothing waiting, to retry, pending or unread) stops until a
	// wake-up, so an idle topic costs Redis nothing per CheckInterval;
	// while it has work, one script call per CheckInterval at least.
	CheckInterval time.Duration

	// MaxAttempts is how many attempts a message gets in the group before it
	// goes to the group's dead letters (default 16; negative: no limit,
	// retried forever). A Nack and a reclaim after VisibilityTimeout each end
	// an attempt; a hand-back on Close does not. A reclaim cannot tell which
	// of a dead consumer's messages a handler had, so it ends an attempt for
	// every message the consumer held, including up to BatchSize-1 fetched
	// and not yet delivered (with MaxAttempts 1 those go to the dead letters
	// undelivered: use BatchSize 1 then).
	//
	// MaxAttempts, VisibilityTimeout, MaxDeadLetters, ConsumerIdleTimeout
	// and RetryDelay are stored in Redis as the group's policy, which
	// reclaims (by any scheduler) follow: the subscriber of the group that
	// started last sets it, so give every subscriber of a group the same
	// values. Lease renewal follows the stored VisibilityTimeout when it is
	// shorter than the subscriber's own.
	MaxAttempts int

	// VisibilityTimeout is how long a message may stay unacknowledged with
	// no sign of life from its consumer before it is handed to another
	// consumer of the group as a new attempt (after RetryDelay). A live
	// subscription extends the lease of the messages it holds every third
	// of this (default 30s), so a slow handler keeps its message; only a
	// consumer that died or lost Redis for longer than two thirds of it
	// loses them. Schedulers look for such messages when the longest held
	// could have run out, and no more often than every quarter of it (and
	// every CheckInterval), so they are reclaimed at most a quarter of it
	// plus one CheckInterval after it ran out.
	VisibilityTimeout time.Duration

	// MaxDeadLetters bounds the group's dead letters per topic (default
	// 100,000; negative: no bound). When a new dead letter would exceed it
	// the oldest is evicted; evictions are logged and counted (see
	// Inspector.Stats), never silent.
	MaxDeadLetters int

	// ConsumerIdleTimeout is how long a consumer that holds no message may
	// stay silent before schedulers remove it from the group (default 1h).
	// Subscriptions get unique consumer names, so crashed processes would
	// otherwise leave their names behind forever.
	ConsumerIdleTimeout time.Duration

	// Ordered makes subscriptions handle the messages of each partition of
	// a topic one at a time, in the order they became due, so messages
	// with the same PartitionKey are never handled concurrently or out of
	// order, with no locks in the handler. Each partition is owned by one
	// subscription of the group at a time (a lease in Redis, taken over
	// from a subscription that closed at once, from one that died within
	// two thirds of VisibilityTimeout); the partitions are shared evenly
	// among the group's ordered subscriptions, so run as many as there are
	// partitions at most. A nacked message is retried by its subscription,
	// after its retry delay, before any later message of its partition; at
	// MaxAttempts it goes to the dead letters and the partition moves on
	// (with a negative MaxAttempts a message that always fails blocks its
	// partition). See "Ordering" in docs/scaling.md for what is not guaranteed.
	// Give every subscriber of a group the same value.
	Ordered bool

	// Partitions and TopicPartitions give the partition count of topics,
	// as PublisherConfig's do, and must match theirs. A subscription reads
	// every partition of its topic.
	Partitions      int
	TopicPartitions map[string]int

	// RateLimit caps how fast the consumer group receives new messages
	// of a topic: Messages per Per, across all its subscribers in every
	// process (the limiter is in Redis); TopicRateLimits sets it per
	// topic, overriding it. Zero: no limit. A subscription asks the
	// limiter before each read for a batch of min(BatchSize, a tenth of
	// Messages) (at least 1) and waits its turn; turns are given in the
	// order they were asked, so no subscriber starves. In any interval of
	// length Per the group receives at most Messages plus one batch.
	// Redeliveries (of nacked or reclaimed messages) count like new
	// ones; a subscription re-reading its own pending messages after a
	// lost connection does not. Give every subscriber of a group the same
	// limit: a subscriber with another one applies its own, and each
	// change lets one batch through early. See docs/flow-control.md.
	RateLimit       RateLimit
	TopicRateLimits map[string]RateLimit

	// Concurrency caps how many handlers of the consumer group run at
	// once on a topic, across all its subscribers in every process (a
	// semaphore in Redis), for handlers that call a fragile or
	// rate-limited service; TopicConcurrency sets it per topic,
	// overriding it. Zero: no cap. A subscription takes a slot before
	// handing a message to its handler and gives it back when the handler
	// acks or nacks (or times out, see HandlerTimeout); a slot of a
	// process that died lapses after VisibilityTimeout. Waiting
	// subscriptions get slots in the order they asked. Give every
	// subscriber of a group the same value. See docs/flow-control.md.
	Concurrency      int
	TopicConcurrency map[string]int

	// GroupConcurrency caps how many messages of one group (see GroupKey)
	// the consumer group handles at once, across all its subscribers in
	// every process: 1 handles each group's messages one at a time, in due
	// order, a retry before the group's next message. Zero: no cap. A
	// message holds its group's slot from the moment a subscription takes
	// it (prefetched messages count) until it is acked, dead-lettered or
	// handed back, and through a retry's delay; a dead process's slots come
	// back after VisibilityTimeout. GroupRateLimit caps how fast the
	// consumer group takes each group's messages (bursts of Messages, then
	// one per Per/Messages). Both are stored in Redis for the consumer
	// group: give every subscriber of a group the same values (the last
	// one to start wins). They apply to grouped messages only, inside
	// Concurrency and RateLimit. See docs/lifecycle.md, "Groups".
	GroupConcurrency int
	GroupRateLimit   RateLimit

	// CloseTimeout is how long Close (or the end of a Subscribe context)
	// waits for a handler to Ack or Nack the message it is handling
	// (default 10s); the message's context is cancelled first, as a signal
	// to finish. Fetched messages not yet handed to a handler go back to the
	// group at once, and so does the handled one when the wait runs out.
	// In a Watermill Router, handlers always Ack or Nack, so this only
	// bounds a handler still running at shutdown: set it to how long your
	// handlers need to finish once their context is cancelled, and keep it
	// under RouterConfig.CloseTimeout (default 30s) so that Router.Close
	// does not time out first. Code that may stop reading with a message
	// neither acked nor nacked (as Watermill's test suite does) waits the
	// whole CloseTimeout on each Close: set it short there.
	CloseTimeout time.Duration

	// HandlerTimeout bounds how long a handler may take to Ack or Nack a
	// message (default 30m, asynq's; negative: no bound); a message's
	// HandlerTimeoutKey metadata overrides it. Past it the subscription
	// gives up on the handler: the message's context is cancelled, the
	// delivery counts as a failed attempt (retried after RetryDelay, or
	// dead-lettered on the last attempt with a reason naming the timeout),
	// and the subscription moves on to its next message, so a handler
	// stuck on a call that never returns holds neither its subscription
	// nor, with Ordered, its partition. The abandoned handler may still be
	// running: the next attempt of its message (or, with Ordered, the next
	// message of its partition) may run beside it. Its late Ack or Nack is
	// logged and ignored. Timeouts are counted in Metrics and reported by
	// Inspector.Health. Set it above your slowest legitimate handler.
	HandlerTimeout time.Duration

	// Metrics records metrics (prommetrics.New for Prometheus); nil
	// records none. The embedded scheduler records into it too.
	Metrics Metrics

	// ExpiredMessages is what a subscription does with a message whose
	// deadline (ExpiresAtKey) has passed when it is about to hand it to a
	// handler: DeadLetterExpired (the default, "") or DropExpired.
	ExpiredMessages ExpiredPolicy
}

func (c *SubscriberConfig) setDefaults() {
	c.KeyPrefix = defaultPrefix(c.KeyPrefix)
	if c.Consumer == "" {
		c.Consumer, _ = os.Hostname()
		if c.Consumer == "" {
			c.Consumer = "consumer"
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = 32
	}
	if c.BlockTime == 0 {
		c.BlockTime = defaultBlockTime
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = defaultCheckInterval
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = defaultMaxAttempts
	}
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = defaultVisibilityTimeout
	}
	if c.MaxDeadLetters == 0 {
		c.MaxDeadLetters = defaultMaxDeadLetters
	}
	if c.ConsumerIdleTimeout == 0 {
		c.ConsumerIdleTimeout = defaultConsumerIdleTimeout
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = defaultCloseTimeout
	}
	if c.HandlerTimeout == 0 {
		c.HandlerTimeout = defaultHandlerTimeout
	}
	if c.RetryDelay == nil {
		c.RetryDelay = DefaultRetryDelay
	}
}

// Validate reports the first setting that cannot work.
func (c SubscriberConfig) Validate() error {
	if err := validateCommon("SubscriberConfig", c.Client, c.KeyPrefix); err != nil {
		return err
	}
	if c.ConsumerGroup == "" {
		return errors.New("redisdelay: SubscriberConfig.ConsumerGroup is empty: name the group this service consumes in " +
			"(subscribers of one group share its messages; each group receives all of them)")
	}
	if err := validateName("SubscriberConfig.ConsumerGroup", c.ConsumerGroup); err != nil {
		return err
	}
	if err := validateName("SubscriberConfig.Consumer", c.Consumer); err != nil {
		return err
	}
	if c.BatchSize < 1 || c.BatchSize > 10000 {
		return fmt.Errorf("redisdelay: SubscriberConfig.BatchSize is %d: use 1 to 10000 (0 means the default, 32)", c.BatchSize)
	}
	for _, d := range []struct {
		name        string
		value, less time.Duration
	}{
		{"BlockTime", c.BlockTime, time.Millisecond},
		{"CheckInterval", c.CheckInterval, time.Millisecond},
		{"VisibilityTimeout", c.VisibilityTimeout, 100 * time.Millisecond},
		{"ConsumerIdleTimeout", c.ConsumerIdleTimeout, time.Second},
		{"CloseTimeout", c.CloseTimeout, time.Millisecond},
	} {
		if err := positive("SubscriberConfig."+d.name, d.value, d.less); err != nil {
			return err
		}
	}
	if c.HandlerTimeout > 0 && c.HandlerTimeout < time.Millisecond {
		return fmt.Errorf("redisdelay: SubscriberConfig.HandlerTimeout is %s: use at least 1ms (0 means the default, %s; negative: no bound)",
			c.HandlerTimeout, defaultHandlerTimeout)
	}
	switch c.ExpiredMessages {
	case "", DeadLetterExpired, DropExpired:
	default:
		return fmt.Errorf("redisdelay: SubscriberConfig.ExpiredMessages is %q: use redisdelay.DeadLetterExpired (%q, the default) or redisdelay.DropExpired (%q)",
			c.ExpiredMessages, DeadLetterExpired, DropExpired)
	}
	if err := validatePartitions("SubscriberConfig", c.Partitions, c.TopicPartitions); err != nil {
		return err
	}
	if c.RateLimit != (RateLimit{}) {
		if err := c.RateLimit.validate("SubscriberConfig.RateLimit"); err != nil {
			return err
		}
	}
	if c.Concurrency < 0 || c.Concurrency > 1_000_000 {
		return fmt.Errorf("redisdelay: SubscriberConfig.Concurrency is %d: use 1 to 1,000,000 handlers at once (0: no cap)", c.Concurrency)
	}
	if c.GroupConcurrency < 0 || c.GroupConcurrency > 1_000_000 {
		return fmt.Errorf("redisdelay: SubscriberConfig.GroupConcurrency is %d: use 1 to 1,000,000 messages of a group at once (0: no cap)", c.GroupConcurrency)
	}
	if c.GroupRateLimit != (RateLimit{}) {
		if err := c.GroupRateLimit.validate("SubscriberConfig.GroupRateLimit"); err != nil {
			return err
		}
	}
	for topic, n := range c.TopicConcurrency {
		if err := validateTopic(topic); err != nil {
			return fmt.Errorf("redisdelay: SubscriberConfig.TopicConcurrency: %w", err)
		}
		if n < 1 || n > 1_000_000 {
			return fmt.Errorf("redisdelay: SubscriberConfig.TopicConcurrency[%q] is %d: use 1 to 1,000,000 handlers at once (leave the topic out for no cap)", topic, n)
		}
	}
	for topic, l := range c.TopicRateLimits {
		if err := validateTopic(topic); err != nil {
			return fmt.Errorf("redisdelay: SubscriberConfig.TopicRateLimits: %w", err)
		}
		if err := l.validate(fmt.Sprintf("SubscriberConfig.TopicRateLimits[%q]", topic)); err != nil {
			return err
		}
	}
	return nil
}

// Retry backoff defaults; see DefaultRetryDelay.
const (
	retryDelayBase   = time.Second
	retryDelayCap    = 10 * time.Minute
	retryDelayJitter = 0.2
)

// DefaultRetryDelay is the SubscriberConfig.RetryDelay used when none is
// set: 1s before the second attempt, doubling with each attempt up to 10
// minutes, each value varied at random by up to ±20%.
//
// A handler that fails because something it needs is down then retries
// within a second of a blip, yet does not burn the default 16 attempts in
// seconds: they span about 67 minutes (1s+2s+...+512s, then 600s five
// times) before the message goes to the dead letters, so an outage of up to
// an hour is ridden out. The cap bounds how late a message comes back after
// the outage ends. The jitter spreads messages that failed together, so
// they do not all come back in the same instant and fail again together.
func DefaultRetryDelay(attempt int) time.Duration {
	d := retryDelayCap
	if attempt >= 1 && attempt <= 20 { // 2^19 s is far past the cap
		d = min(retryDelayBase<<(attempt-1), retryDelayCap)
	} else if attempt < 1 {
		d = retryDelayBase
	}
	return time.Duration(float64(d) * (1 + retryDelayJitter*(2*rand.Float64()-1)))
}

// RateLimit is a number of messages per interval: see
// SubscriberConfig.RateLimit.
type RateLimit struct {
	Messages int
	Per      time.Duration
}

func (l RateLimit) validate(what string) error {
	if l.Messages < 1 || l.Messages > 1_000_000 {
		return fmt.Errorf("redisdelay: %s.Messages is %d: use 1 to 1,000,000 messages per %s "+
			"(leave the whole RateLimit zero for no limit)", what, l.Messages, l.Per)
	}
	if l.Per < time.Millisecond || l.Per%time.Millisecond != 0 || l.Per > 24*time.Hour {
		return fmt.Errorf("redisdelay: %s.Per is %s: use whole milliseconds from 1ms to 24h (e.g. time.Second)", what, l.Per)
	}
	return nil
}

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
		s.sched.readers = s.consume // due ticks run in their reads
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

// Snooze puts a delivered message back to its consumer group, to be
// delivered again after d, without spending an attempt: the redelivery
// carries the same AttemptKey, and a message snoozed on its last attempt
// does not go to the dead letters. It nacks the message; an Ordered
// subscription holds the message's partition meanwhile, as for a retry.
// The due time is measured from the Nack by Redis's clock, so the message
// is never back early.
//
// In a Router handler, return its result:
//
//	if !ready(msg) {
//		return redisdelay.Snooze(msg, 30*time.Second)
//	}
//
// On success it returns nil, so the Router's middleware (Retry,
// PoisonQueue, RecordError...) sees no failure and the Router's Ack that
// follows is a no-op, the message being nacked already. An error means
// nothing was done: a negative d, or one beyond 100 years, wraps
// ErrInvalidDelay; a message already acked cannot be put back. Returned
// from a handler, that error makes the Router nack the message as a
// failed attempt.
func Snooze(msg *message.Message, d time.Duration) error {
	if d < 0 || d > meta.MaxDelay {
		return fmt.Errorf("%w: Snooze of message %q for %s: use a delay from 0 to 100 years", ErrInvalidDelay, msg.UUID, meta.DescribeDelay(d))
	}
	msg.Metadata.Set(meta.SnoozeKey, d.String())
	if !msg.Nack() {
		delete(msg.Metadata, meta.SnoozeKey)
		return fmt.Errorf("redisdelay: Snooze of message %q, which was acked already: call Snooze instead of Ack", msg.UUID)
	}
	return nil
}
