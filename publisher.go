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
	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
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
	//
	// go-redis reads a reply until its ReadTimeout whatever the context, so
	// a call runs its script in a goroutine of its own, which Publish stops
	// waiting for at the deadline. With a client that ends its socket waits
	// at the deadline (ContextTimeoutEnabled) and a message context that
	// cannot be cancelled, the script runs in the caller's goroutine
	// instead: about 12% less CPU in the publishing process at 1k calls/s.
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

// Publisher publishes Watermill messages, each delivered when its delay
// metadata says (see the package documentation for the rule). Safe for
// concurrent use.
type Publisher struct {
	config PublisherConfig
	keys   store.Keys
	logger watermill.LoggerAdapter
	now    func() time.Time // the host clock; tests skew it
	// redis runs the publish path's commands: the client, or for a
	// schedule's ticks the gated client of the scheduler (internal/store/hub.go).
	redis store.Cmds
	// inline: a call may run its script in the caller's goroutine, as the
	// client ends its socket waits at the call's deadline (see sendPart).
	inline bool

	registered sync.Map // topics already added to the topic registry
	// store.Shard -> []string: the consumer groups of a partition, as last
	// read, for immediate grouped messages (see store.Publish); read again
	// when the publish script finds the list out of date.
	consumerGroups sync.Map
	// farShapes are the partitions' far index shapes, as the publish
	// script last told them (store.Publish).
	farShapes store.FarShapes
	batchers  sync.Map // topic -> *batcher

	closeMu sync.RWMutex   // orders Close after the calls it must wait for
	closed  atomic.Bool    // set under closeMu
	pending sync.WaitGroup // calls handed to a batcher and not yet settled

	// The hold on the process's storage level announcer (internal/levels),
	// taken at the first Publish: what it writes, every live reader reads.
	lvlMu sync.Mutex
	lvl   atomic.Pointer[levels.Holder]
	// maxLevel caps the level written (0: none), for the tests of an
	// older level's storage (WriteLevelAtMost).
	maxLevel int
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher. A nil logger logs nothing.
func NewPublisher(config PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Publisher{
		config: config,
		keys:   store.Keys{Prefix: config.KeyPrefix},
		logger: logger,
		now:    time.Now,
		redis:  config.Client,
		inline: store.BoundsSocketWaits(config.Client),
	}, nil
}

// Publish stores the messages atomically, all of them or, on error, none,
// when the call is within one part: up to 512 messages and 512 KiB, whose
// far-future messages (due more than about two minutes ahead) are due in
// at most 128 different minutes, so any call of up to 128 messages and
// 512 KiB. Messages without delay metadata (or already due) are ready at
// once; delayed ones wait in Redis until due.
//
// A larger call is stored in parts, one after another, each atomic, so
// that no single script keeps Redis from its other clients for long. If a
// part fails, the parts after it are not sent and the error says how many
// messages are stored: the first ones, in call order.
//
// Concurrent calls to one topic share Redis round trips: a call made while
// two round trips for the topic are in flight waits for one of them to end
// and goes in the next one, together with the other calls that arrived
// meanwhile, within the same bounds. Each call (part) stays atomic on its
// own and gets its own result: one call's ErrDuplicateMessage does not fail
// another's. A lone caller is sent at once.
//
// It gives up after PublisherConfig.PublishTimeout, or when the context of
// the first message is done, with an error naming the topic. After a
// timeout or a lost connection the messages may or may not be stored
// (the error says when they were never sent): publishing a delayed message
// again while an identical copy is still waiting is a no-op, so retrying is
// safe for those; an immediate message retried may be delivered twice, and
// so may one stored over a minute ago for two minutes or more ahead (the
// far tier) and retried with delay.Until when due in under 5 s.
//
// A delay set with delay.WithContext in a message's context applies as
// under delay.NewPublisher: the message's own delay metadata wins.
func (p *Publisher) Publish(topic string, messages ...*message.Message) (err error) {
	meta.ApplyContextDelays(messages)
	if m := p.config.Metrics; m != nil {
		defer observePublish(m, topic, messages, time.Now(), p.now(), &err)
	}
	if p.closed.Load() {
		return ErrClosed
	}
	if err := validateTopic(topic); err != nil {
		return err
	}
	if len(messages) == 0 {
		return nil
	}

	// by partition; nil when none of its messages is here. Made here: a
	// slice returned by prepare would be on the heap.
	calls := make([]*pubCall, partitionCount(p.config.Partitions, p.config.TopicPartitions, topic))
	nCalls, err := p.prepare(topic, messages, calls, p.level(messages[0].Context()))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(messages[0].Context(), p.config.PublishTimeout)
	defer cancel()
	// Only a deadline can end a context that its message's cannot: a
	// cancellation would not stop go-redis's socket wait.
	inline := p.inline && nCalls == 1 && messages[0].Context().Done() == nil
	if err := p.send(ctx, calls, nCalls, inline); err != nil {
		return store.ExplainPool(p.config.Client, err)
	}
	return store.ExplainPool(p.config.Client, p.collect(ctx, topic, calls, inline))
}

// prepare checks and encodes the messages of a Publish call and sorts them
// into calls, one per partition of the topic (left nil for a partition none
// of them goes to); it returns how many it set. Any refused message
// refuses the whole Publish call, before anything is sent.
func (p *Publisher) prepare(topic string, messages []*message.Message, calls []*pubCall, lvl int) (nCalls int, err error) {
	now := p.now()
	parts := len(calls)
	var dupes callDupes
	if len(messages) > 1 {
		dupes.uuids = make(map[string]int, len(messages))
	}
	policy := topicPolicy(p.config.BusinessKeyPolicy, p.config.TopicBusinessKeyPolicy, topic)
	maxWaiting := topicBound("MaxWaiting", p.config.MaxWaiting, p.config.TopicMaxWaiting, topic, parts)
	maxReady := topicBound("MaxReady", p.config.MaxReady, p.config.TopicMaxReady, topic, parts)
	far3 := store.WritesFar3(lvl)
	for i, msg := range messages {
		if err := checkIdentity(topic, i, msg); err != nil {
			return 0, err
		}
		if err := dupes.uuid(topic, i, msg.UUID); err != nil {
			return 0, err
		}
		m, err := p.checkMetadata(topic, msg, now, policy)
		if err != nil {
			return 0, err
		}
		if err := dupes.key(topic, i, m.key); err != nil {
			return 0, err
		}
		if m.body, err = p.encode(topic, msg, lvl); err != nil {
			return 0, err
		}
		part := meta.Partition(msg, messages[0].UUID, parts)
		c := calls[part]
		if c == nil {
			c = &pubCall{topic: topic, part: part, parts: parts, shard: p.keys.Shard(topic, part), done: make(chan pubResult, 1),
				maxWaiting: maxWaiting, maxReady: maxReady}
			calls[part] = c
			nCalls++
		}
		c.grouped = c.grouped || m.group != "" && m.delay <= 0
		far := store.FarArgOf(msg.UUID, m.delay, lvl >= store.Level2)
		far.Format3 = far3
		c.Msgs = append(c.Msgs, store.PubMessage{UUID: msg.UUID, Delay: m.delay.Milliseconds(), Body: m.body, Key: m.keyArg,
			Prio: m.prio == "1", Group: m.group, Far: far})
		c.size += msgBytes(&c.Msgs[len(c.Msgs)-1])
	}
	// The far buckets are chosen by the clock of now, not of the start:
	// encoding a large call takes time, and a message placed by a clock
	// that Redis's has passed by more than what is left of its bucket
	// waits in the waiting set instead (publish.lua checks).
	nowMs := p.now().UnixMilli()
	for part, c := range calls {
		if c != nil {
			for m := range c.Msgs {
				c.Msgs[m].Far.Place(nowMs)
			}
			calls[part] = c.split()
		}
	}
	return nCalls, nil
}

// checkIdentity refuses message i of a Publish call when it is nil or has
// no UUID.
func checkIdentity(topic string, i int, msg *message.Message) error {
	if msg == nil {
		return fmt.Errorf("%w: publish to topic %q: message %d is nil", ErrInvalidMessage, topic, i)
	}
	if msg.UUID == "" {
		return fmt.Errorf("%w: publish to topic %q: message %d has an empty UUID: create messages with message.NewMessage(watermill.NewUUID(), payload)",
			ErrInvalidMessage, topic, i)
	}
	return nil
}

// callDupes finds two messages of one Publish call sharing a UUID or a
// business key. Its maps are nil for a call of one message.
type callDupes struct {
	uuids map[string]int // UUID -> index of the message
	keys  map[string]int // business key -> index of the message
}

func (d *callDupes) uuid(topic string, i int, uuid string) error {
	if d.uuids == nil {
		return nil
	}
	if j, dup := d.uuids[uuid]; dup {
		return fmt.Errorf("%w: messages %d and %d of one Publish call to topic %q share UUID %q: give each message its own UUID",
			ErrDuplicateMessage, j, i, topic, uuid)
	}
	d.uuids[uuid] = i
	return nil
}

func (d *callDupes) key(topic string, i int, key string) error {
	if key == "" || d.uuids == nil {
		return nil
	}
	if d.keys == nil {
		d.keys = make(map[string]int)
	}
	if j, dup := d.keys[key]; dup {
		return fmt.Errorf("%w: messages %d and %d of one Publish call to topic %q share business key %q: publish them in separate calls",
			ErrDuplicateBusinessKey, j, i, topic, key)
	}
	d.keys[key] = i
	return nil
}

// pubMessage is a message as publish.lua takes it.
type pubMessage struct {
	delay  time.Duration // from now; <= 0: ready now
	prio   string        // "1" for a high-priority message
	key    string        // business key, "" for none
	keyArg string        // the key with its policy's letter (see businessKeyArg)
	group  string        // the group it is queued in when due (see meta.Group), "" for none
	body   []byte        // encoded message
}

// checkMetadata reads a message's delay, priority, business key and group.
func (p *Publisher) checkMetadata(topic string, msg *message.Message, now time.Time, policy BusinessKeyPolicy) (pubMessage, error) {
	var (
		m   pubMessage
		err error
	)
	if m.delay, err = p.delayOf(msg, now); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidDelay, msg.UUID, topic, err)
	}
	if m.prio, err = meta.Priority(msg.Metadata); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidMessage, msg.UUID, topic, err)
	}
	if _, err = meta.Expiry(msg.Metadata); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidMessage, msg.UUID, topic, err)
	}
	if _, err = meta.HandlerTimeout(msg.Metadata); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidMessage, msg.UUID, topic, err)
	}
	if m.key, m.keyArg, err = businessKeyArg(msg, policy); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidMessage, msg.UUID, topic, err)
	}
	if m.group, err = meta.Group(msg.Metadata, m.keyArg); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidMessage, msg.UUID, topic, err)
	}
	return m, nil
}

// encode encodes a message at storage level lvl, within
// PublisherConfig.MaxMessageSize.
func (p *Publisher) encode(topic string, msg *message.Message, lvl int) ([]byte, error) {
	body := store.EncodeAt(msg, lvl)
	if len(body) > p.config.MaxMessageSize {
		return nil, fmt.Errorf("%w: message %q to topic %q is %d bytes encoded (UUID, metadata and payload), over PublisherConfig.MaxMessageSize (%d): store large payloads elsewhere and publish a reference",
			ErrMessageTooLarge, msg.UUID, topic, len(body), p.config.MaxMessageSize)
	}
	return body, nil
}

// delayOf is a message's delay from now, within PublisherConfig.MaxDelay.
func (p *Publisher) delayOf(msg *message.Message, now time.Time) (time.Duration, error) {
	d, err := meta.Delay(msg.Metadata, now)
	switch {
	case err != nil:
		return 0, err
	case d > meta.MaxDelay:
		return 0, fmt.Errorf("due in %s, beyond the limit of 100 years (PublisherConfig.MaxDelay is %s): use a nearer delay.Until or a shorter delay.For",
			meta.DescribeDelay(d), p.config.MaxDelay)
	case d > p.config.MaxDelay:
		return 0, fmt.Errorf("due in %s, beyond PublisherConfig.MaxDelay (%s): raise MaxDelay if that is intended", d, p.config.MaxDelay)
	}
	return d, nil
}

// register adds the topic to the registry Managers discover topics from,
// with its partition count, once per Publisher and topic. It reports
// whether it did now.
func (p *Publisher) register(ctx context.Context, topic string, parts int) (bool, error) {
	if _, ok := p.registered.Load(topic); ok {
		return false, nil
	}
	if _, err := registerTopic(ctx, p.redis, p.keys, topic, parts, "PublisherConfig"); err != nil {
		return false, err
	}
	p.registered.Store(topic, struct{}{})
	return true, nil
}

// reregister registers a topic again when the publish script ran for the
// first time on one of its partitions although this Publisher registered
// the topic: the partition's first publish ever, or Redis lost its data
// (restarted without persistence, or failed over to an empty replica) and
// the registry with it, so Managers would not know the topic. The messages
// are stored: a failure is logged, and the next publish registers first.
func (p *Publisher) reregister(ctx context.Context, topic string, parts int) {
	added, err := registerTopic(ctx, p.redis, p.keys, topic, parts, "PublisherConfig")
	if err != nil {
		p.registered.Delete(topic)
		p.logger.Error("redisdelay: cannot register the topic again after Redis lost it; retrying on the next publish", err,
			watermill.LogFields{"topic": topic})
		return
	}
	if added {
		p.logger.Info("redisdelay: registered the topic again: Redis had lost it", watermill.LogFields{"topic": topic})
	}
}

// Cancel removes a message that is still waiting for its due time, so it is
// never delivered. It reports whether the message was waiting; false means
// it is unknown, already cancelled, or already due and on its way to
// subscribers (it can no longer be recalled then). In a topic of several
// partitions it looks in each.
func (p *Publisher) Cancel(ctx context.Context, topic, messageUUID string) (bool, error) {
	if p.closed.Load() {
		return false, ErrClosed
	}
	parts := partitionCount(p.config.Partitions, p.config.TopicPartitions, topic)
	return recall(ctx, p.config.Client, p.keys, topic, parts, "uuid", messageUUID)
}

// Close makes further calls fail with ErrClosed, then waits until the
// Publish calls already under way, including those queued behind another
// call's round trip, have been sent and answered (each within its
// PublishTimeout): it loses none of them. It does not close the Redis
// client. Calling it again is a no-op.
func (p *Publisher) Close() error {
	p.closeMu.Lock()
	p.closed.Store(true)
	p.closeMu.Unlock()
	p.pending.Wait()
	p.lvlMu.Lock()
	if h := p.lvl.Load(); h != nil {
		h.Release()
	}
	p.lvlMu.Unlock()
	return nil
}

// level is the storage level to write: the first Publish announces the
// process (one round trip, once) and waits for the answer, at most until
// ctx ends (then it writes level 1, which every release reads).
func (p *Publisher) level(ctx context.Context) int {
	h := p.lvl.Load()
	if h == nil {
		p.lvlMu.Lock()
		if h = p.lvl.Load(); h == nil && !p.closed.Load() {
			h = levels.Acquire(p.config.Client, p.keys.Prefix, "publisher", p.logger)
			p.lvl.Store(h)
		}
		p.lvlMu.Unlock()
		if h == nil {
			return store.Level1
		}
	}
	if lvl := h.Wait(ctx); p.maxLevel == 0 || lvl < p.maxLevel {
		return lvl
	}
	return p.maxLevel
}

// CancelKey removes the waiting message holding businessKey in topic, so it
// is never delivered, and frees the key. It reports whether a message was
// waiting with that key; false means none holds it (never published,
// cancelled, or already due and on its way to subscribers). In a topic of
// several partitions it looks in the partition of the key first, then in
// the others (for a message published with a PartitionKey).
func (p *Publisher) CancelKey(ctx context.Context, topic, businessKey string) (bool, error) {
	if p.closed.Load() {
		return false, ErrClosed
	}
	parts := partitionCount(p.config.Partitions, p.config.TopicPartitions, topic)
	return recall(ctx, p.config.Client, p.keys, topic, parts, "key", businessKey)
}

// Reschedule moves a message that is still waiting to a new due time, in
// place: it keeps its UUID, body, business key and priority, and no copy
// of it is ever delivered at the old time. It reports whether the message
// was waiting; false means it is unknown, cancelled, or already due and on
// its way to subscribers (nothing is changed then).
//
// due is read by this host's clock, as delay.Until is by Publish: the time
// left until it, rounded up to whole milliseconds, is measured by Redis's
// clock from the moment Redis moves the message, so the message is never
// early by either clock. A due time already passed makes the message due
// at once. A due time further than PublisherConfig.MaxDelay (or 100 years)
// fails with ErrInvalidDelay. Moving a message earlier than any other wakes
// the schedulers, as publishing it would.
//
// In a topic of several partitions it looks in the partition the UUID
// hashes to first, then in the others, as Cancel does.
func (p *Publisher) Reschedule(ctx context.Context, topic, messageUUID string, due time.Time) (bool, error) {
	return p.reschedule(ctx, topic, "uuid", messageUUID, due)
}

// RescheduleKey is Reschedule for the waiting message holding businessKey
// (see BusinessKey), found as CancelKey finds it.
func (p *Publisher) RescheduleKey(ctx context.Context, topic, businessKey string, due time.Time) (bool, error) {
	return p.reschedule(ctx, topic, "key", businessKey, due)
}

func (p *Publisher) reschedule(ctx context.Context, topic, by, value string, due time.Time) (bool, error) {
	if p.closed.Load() {
		return false, ErrClosed
	}
	d, err := rescheduleDelay(topic, by, value, due, p.now(), p.config.MaxDelay, "PublisherConfig.MaxDelay")
	if err != nil {
		return false, err
	}
	parts := partitionCount(p.config.Partitions, p.config.TopicPartitions, topic)
	return reschedule(ctx, p.config.Client, p.keys, topic, parts, by, value, d)
}
