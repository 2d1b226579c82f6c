package redisdelay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/names"
)

// DefaultKeyPrefix namespaces every key when a config leaves KeyPrefix empty.
const DefaultKeyPrefix = "redisdelay"

// Scheduling defaults, shared by Managers and the schedulers Subscribers embed.
const (
	defaultCheckInterval = 2 * time.Second
	defaultPromoteBatch  = 256
	defaultTrimInterval  = 10 * time.Second
)

// Message lifecycle defaults.
const (
	defaultMaxAttempts         = 16
	defaultVisibilityTimeout   = 30 * time.Second
	defaultMaxDeadLetters      = 100_000
	defaultConsumerIdleTimeout = time.Hour
	defaultCloseTimeout        = 10 * time.Second
	defaultBlockTime           = 30 * time.Second
	defaultHandlerTimeout      = 30 * time.Minute
	defaultPublishTimeout      = 10 * time.Second
	defaultMaxDelay            = 366 * 24 * time.Hour
	defaultMaxMessageSize      = 1 << 20
	defaultReplicaTimeout      = time.Second
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Client is the Redis connection: a *redis.Client, *redis.ClusterClient
	// or a Sentinel-backed client. Required. Close never closes it.
	Client redis.UniversalClient

	// KeyPrefix namespaces every Redis key (default DefaultKeyPrefix).
	// Publishers, Subscribers and Managers must use the same prefix.
	KeyPrefix string

	// PublishTimeout bounds one Publish call, including the client's own
	// retries (default 10s). Publish also stops when the context of its
	// first message (message.SetContext) is done. A timed-out Publish may
	// or may not have stored the messages; see Publish.
	PublishTimeout time.Duration

	// MaxDelay is the furthest ahead a message may be scheduled (default 366
	// days, at most 100 years). A longer delay is an ErrInvalidDelay: it is
	// far more often a unit mistake than a plan.
	MaxDelay time.Duration

	// MaxMessageSize bounds the encoded size of one message: UUID, metadata
	// and payload (default 1 MiB). Larger messages are an ErrMessageTooLarge.
	MaxMessageSize int

	// Partitions splits every topic into this many partitions (default 1,
	// at most 256); TopicPartitions sets it per topic, overriding it. Each
	// partition has keys of its own under its own Redis Cluster hash tag,
	// so a topic's messages and scheduling spread over the cluster's nodes
	// and over Managers. A message goes to the partition of its
	// PartitionKey metadata, else to that of its Publish call (see
	// PartitionKey). The count is stored in Redis by the first Publisher
	// or Subscriber to use the topic; one configured otherwise fails with
	// ErrPartitionMismatch, so give Publishers and Subscribers the same
	// values. Managers read the stored count.
	Partitions      int
	TopicPartitions map[string]int

	// MinReplicas makes Publish wait until this many replicas of the master
	// that stores the messages have acknowledged the write (Redis WAIT),
	// so that a failover after Publish returned nil cannot lose them
	// (default 0: do not wait; Redis replicates asynchronously, and a
	// master that dies right after a write may take the last writes with
	// it). If fewer acknowledge within ReplicaTimeout, Publish returns an
	// ErrNotReplicated: the messages are stored on the master then. It
	// needs a *redis.Client (plain or Sentinel) or a *redis.ClusterClient,
	// and holds one pooled connection per script run for up to
	// ReplicaTimeout longer. A master with fewer replicas than this fails
	// every Publish with ErrNotReplicated (after a failover, until the old
	// master rejoins as a replica, when it had only one).
	MinReplicas int

	// ReplicaTimeout bounds the wait for MinReplicas (default 1s). Keep it
	// well under PublishTimeout.
	ReplicaTimeout time.Duration

	// Metrics records metrics (prommetrics.New for Prometheus); nil
	// records none.
	Metrics Metrics

	// BusinessKeyPolicy is what Publish does with a message whose
	// BusinessKey metadata is held by another waiting message of the topic:
	// RejectDuplicateKey (the default), KeepFirst, ReplaceWaiting,
	// ReplaceKeepDue or KeepLastIfActive.
	// TopicBusinessKeyPolicy sets it per topic; the BusinessKeyPolicyKey
	// metadata of a message overrides both.
	BusinessKeyPolicy      BusinessKeyPolicy
	TopicBusinessKeyPolicy map[string]BusinessKeyPolicy

	// MaxWaiting bounds the delayed messages of a topic not yet due, and
	// MaxReady the entries of its ready stream (read or not: acknowledged
	// entries count until a scheduler trims them, every
	// ManagerConfig.TrimInterval), so that a stalled consumer or scheduler
	// fills an error instead of Redis's memory (default 0: no bound). A
	// Publish call that would exceed one fails with ErrQueueFull and
	// stores nothing. Each partition of a topic of P partitions holds at
	// most ceil(bound / P). TopicMaxWaiting and TopicMaxReady set them per
	// topic (0 there: no bound for that topic). Only Publish checks them:
	// scheduling moves due messages into the ready stream regardless, so
	// it can hold up to MaxReady plus what was waiting.
	MaxWaiting      int
	TopicMaxWaiting map[string]int
	MaxReady        int
	TopicMaxReady   map[string]int
}

func (c *PublisherConfig) setDefaults() {
	c.KeyPrefix = defaultPrefix(c.KeyPrefix)
	if c.PublishTimeout == 0 {
		c.PublishTimeout = defaultPublishTimeout
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = defaultMaxDelay
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = defaultMaxMessageSize
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = defaultReplicaTimeout
	}
}

// Validate reports the first setting that cannot work.
func (c PublisherConfig) Validate() error {
	if err := validateCommon("PublisherConfig", c.Client, c.KeyPrefix); err != nil {
		return err
	}
	if err := positive("PublisherConfig.PublishTimeout", c.PublishTimeout, time.Millisecond); err != nil {
		return err
	}
	if err := positive("PublisherConfig.MaxDelay", c.MaxDelay, time.Millisecond); err != nil {
		return err
	}
	if c.MaxDelay > meta.MaxDelay {
		return fmt.Errorf("redisdelay: PublisherConfig.MaxDelay is %s: use at most 100 years", c.MaxDelay)
	}
	if c.MaxMessageSize < 1 || c.MaxMessageSize > 512<<20 {
		return fmt.Errorf("redisdelay: PublisherConfig.MaxMessageSize is %d: use 1 to %d bytes (0 means the default, 1 MiB)", c.MaxMessageSize, 512<<20)
	}
	if err := validatePartitions("PublisherConfig", c.Partitions, c.TopicPartitions); err != nil {
		return err
	}
	if err := validatePolicies(c.BusinessKeyPolicy, c.TopicBusinessKeyPolicy); err != nil {
		return err
	}
	if err := validateLimit("MaxWaiting", c.MaxWaiting, c.TopicMaxWaiting); err != nil {
		return err
	}
	if err := validateLimit("MaxReady", c.MaxReady, c.TopicMaxReady); err != nil {
		return err
	}
	return c.validateReplicas()
}

func (c PublisherConfig) validateReplicas() error {
	if c.MinReplicas < 0 {
		return fmt.Errorf("redisdelay: PublisherConfig.MinReplicas is %d: use 0 (do not wait for replicas) or more", c.MinReplicas)
	}
	if err := positive("PublisherConfig.ReplicaTimeout", c.ReplicaTimeout, time.Millisecond); err != nil {
		return err
	}
	if c.MinReplicas > 0 && c.ReplicaTimeout >= c.PublishTimeout {
		return fmt.Errorf("redisdelay: PublisherConfig.ReplicaTimeout (%s) is not under PublishTimeout (%s): Publish would give up before the replicas could confirm", c.ReplicaTimeout, c.PublishTimeout)
	}
	if c.MinReplicas > 0 {
		switch c.Client.(type) { // WAIT needs the connection; see Publisher.runPublish
		case *redis.Client, *redis.ClusterClient:
		default:
			return fmt.Errorf("redisdelay: PublisherConfig.MinReplicas needs a *redis.Client (plain or Sentinel) or a *redis.ClusterClient: WAIT must run on the connection that stored the messages, which a %T does not expose", c.Client)
		}
	}
	return nil
}

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
	// loses them. Schedulers look for such messages every quarter of it (at
	// least every CheckInterval), so they are reclaimed at most a quarter of
	// it plus one CheckInterval after it ran out.
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

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Client is the Redis connection. Required. Close never closes it.
	Client redis.UniversalClient

	// KeyPrefix namespaces every Redis key (default DefaultKeyPrefix).
	KeyPrefix string

	// Topics limits the Manager to these topics. Empty: every topic that a
	// Publisher or Subscriber with the same KeyPrefix has used, discovered as
	// they appear.
	Topics []string

	// CheckInterval bounds how long a topic's scheduler sleeps when nothing is
	// due (default 2s); see SubscriberConfig.CheckInterval, also for the
	// lease that lets one scheduler (a Manager's or a Subscriber's) work on
	// a topic at a time. New topics are discovered when registered, and
	// at this pace at the latest; consumer groups when their number changes (within a
	// check interval) or at the latest within a minute.
	CheckInterval time.Duration

	// BatchSize is the most messages moved from one set in one atomic step
	// (default 256, at most 4096): larger batches move backlogs faster, smaller
	// ones keep each Redis script short.
	BatchSize int

	// TrimInterval is how often the ready stream of each topic is trimmed of
	// entries every consumer group has acknowledged (default 10s). Entries
	// some group has not read or not acknowledged are never trimmed. It is
	// also how often consumers idle past their group's ConsumerIdleTimeout
	// are removed.
	TrimInterval time.Duration

	// Retention bounds how long ready messages of a topic that no consumer
	// group reads are kept (default 0: until a group is created and reads
	// them). Messages published before any subscriber exists are otherwise
	// kept for the first group; with Retention set, those older than it are
	// removed (approximately: whole stream nodes, so a little later) and the
	// removal is logged. It never removes a message from a topic that has a
	// consumer group: delete an abandoned group with Inspector.DeleteGroup.
	Retention time.Duration

	// Metrics records metrics (prommetrics.New for Prometheus); nil
	// records none.
	Metrics Metrics
}

func (c *ManagerConfig) setDefaults() {
	c.KeyPrefix = defaultPrefix(c.KeyPrefix)
	if c.CheckInterval == 0 {
		c.CheckInterval = defaultCheckInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = defaultPromoteBatch
	}
	if c.TrimInterval == 0 {
		c.TrimInterval = defaultTrimInterval
	}
}

// Validate reports the first setting that cannot work.
func (c ManagerConfig) Validate() error {
	if err := validateCommon("ManagerConfig", c.Client, c.KeyPrefix); err != nil {
		return err
	}
	for i, t := range c.Topics {
		if p := nameProblem(fmt.Sprintf("ManagerConfig.Topics[%d]", i), t); p != "" {
			return fmt.Errorf("%w: %s", ErrInvalidTopic, p)
		}
	}
	if c.BatchSize < 1 || c.BatchSize > 4096 {
		return fmt.Errorf("redisdelay: ManagerConfig.BatchSize is %d: use 1 to 4096 (0 means the default, 256)", c.BatchSize)
	}
	if err := positive("ManagerConfig.CheckInterval", c.CheckInterval, time.Millisecond); err != nil {
		return err
	}
	if err := positive("ManagerConfig.TrimInterval", c.TrimInterval, time.Millisecond); err != nil {
		return err
	}
	if c.Retention < 0 || (c.Retention > 0 && c.Retention < time.Second) {
		return fmt.Errorf("redisdelay: ManagerConfig.Retention is %s: use at least 1s, or 0 to keep messages until a consumer group reads them", c.Retention)
	}
	return nil
}

func defaultPrefix(p string) string {
	if p == "" {
		return DefaultKeyPrefix
	}
	return p
}

func validateCommon(config string, client redis.UniversalClient, prefix string) error {
	if client == nil {
		return fmt.Errorf("redisdelay: %s.Client is nil: pass a redis.UniversalClient, e.g. redis.NewClient(&redis.Options{Addr: \"127.0.0.1:6379\"})", config)
	}
	return validateName(config+".KeyPrefix", prefix)
}

// nameProblem says what would break the key layout in a name (empty when
// nothing); see names.Problem, shared with the prommetrics Collector.
func nameProblem(what, s string) string { return names.Problem(what, s) }

func validateName(what, s string) error {
	if p := nameProblem(what, s); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidName, p)
	}
	return nil
}

func validateTopic(topic string) error {
	if p := nameProblem("topic", topic); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidTopic, p)
	}
	return nil
}

func positive(what string, d, least time.Duration) error {
	if d < least {
		return fmt.Errorf("redisdelay: %s is %s: use at least %s (0 means the default)", what, d, least)
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
