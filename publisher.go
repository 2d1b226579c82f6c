package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

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

	registered sync.Map // topics already added to the topic registry
	// store.Shard -> []string: the consumer groups of a partition, as last
	// read, for immediate grouped messages (see store.Publish); read again
	// when the publish script finds the list out of date.
	consumerGroups sync.Map
	batchers       sync.Map // topic -> *batcher

	closeMu sync.RWMutex   // orders Close after the calls it must wait for
	closed  atomic.Bool    // set under closeMu
	pending sync.WaitGroup // calls handed to a batcher and not yet settled
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
	applyContextDelays(messages)
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
	nCalls, err := p.prepare(topic, messages, calls)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(messages[0].Context(), p.config.PublishTimeout)
	defer cancel()
	if err := p.send(ctx, calls, nCalls); err != nil {
		return store.ExplainPool(p.config.Client, err)
	}
	return store.ExplainPool(p.config.Client, p.collect(ctx, topic, calls))
}

// prepare checks and encodes the messages of a Publish call and sorts them
// into calls, one per partition of the topic (left nil for a partition none
// of them goes to); it returns how many it set. Any refused message
// refuses the whole Publish call, before anything is sent.
func (p *Publisher) prepare(topic string, messages []*message.Message, calls []*pubCall) (nCalls int, err error) {
	now := p.now()
	parts := len(calls)
	var dupes callDupes
	if len(messages) > 1 {
		dupes.uuids = make(map[string]int, len(messages))
	}
	policy := topicPolicy(p.config.BusinessKeyPolicy, p.config.TopicBusinessKeyPolicy, topic)
	maxWaiting := topicBound("MaxWaiting", p.config.MaxWaiting, p.config.TopicMaxWaiting, topic, parts)
	maxReady := topicBound("MaxReady", p.config.MaxReady, p.config.TopicMaxReady, topic, parts)
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
		if m.body, err = p.encode(topic, msg); err != nil {
			return 0, err
		}
		part := messagePartition(msg, messages[0].UUID, parts)
		c := calls[part]
		if c == nil {
			c = &pubCall{topic: topic, part: part, parts: parts, shard: p.keys.Shard(topic, part), done: make(chan pubResult, 1),
				maxWaiting: maxWaiting, maxReady: maxReady}
			calls[part] = c
			nCalls++
		}
		c.N++
		c.grouped = c.grouped || m.group != "" && m.delay <= 0
		c.Args = append(c.Args, msg.UUID, m.delay.Milliseconds(), m.body, m.keyArg, m.prio, m.group)
		c.size += argBytes(c.Args[len(c.Args)-store.PubStride:])
		c.Far = append(c.Far, store.FarArgOf(msg.UUID, m.delay, true))
	}
	// The far buckets are chosen by the clock of now, not of the start:
	// encoding a large call takes time, and a message placed by a clock
	// that Redis's has passed by more than what is left of its bucket
	// waits in the waiting set instead (publish.lua checks).
	nowMs := p.now().UnixMilli()
	for part, c := range calls {
		if c != nil {
			for m := range c.Far {
				c.Far[m].Place(nowMs)
			}
			calls[part] = c.split()
		}
	}
	return nCalls, nil
}

// split cuts a partition's messages of a Publish call into parts within
// the bounds of a run (see maxPartMessages), in call order, chained by
// next, and returns the first.
func (c *pubCall) split() *pubCall {
	// The common case needs no map: at most one bucket a far message.
	for _, f := range c.Far {
		if f.Bucket >= 0 {
			c.buckets++
		}
	}
	if c.N <= maxPartMessages && c.size <= maxPartBytes && c.buckets <= maxPartFarBuckets {
		return c
	}
	first, tail := (*pubCall)(nil), (*pubCall)(nil)
	seen := map[int64]bool{}
	from, size := 0, 0
	cut := func(to int) {
		part := *c
		part.Args, part.Far = c.Args[store.PubStride*from:store.PubStride*to], c.Far[from:to]
		part.N, part.size, part.buckets, part.next = to-from, size, len(seen), nil
		part.done = make(chan pubResult, 1)
		if tail == nil {
			first = &part
		} else {
			tail.next = &part
		}
		tail = &part
		from, size = to, 0
		clear(seen)
	}
	for m := range c.N {
		bytes := argBytes(c.Args[store.PubStride*m : store.PubStride*(m+1)])
		b := c.Far[m].Bucket
		newBucket := b >= 0 && !seen[b]
		if m > from && (m-from == maxPartMessages || size+bytes > maxPartBytes || newBucket && len(seen) == maxPartFarBuckets) {
			cut(m)
		}
		if b >= 0 {
			seen[b] = true
		}
		size += bytes
	}
	cut(c.N)
	return first
}

// argBytes is the size a message counts for in a run's bounds: its UUID,
// encoded body, business key argument and group (see pubCall.args).
func argBytes(a []any) int {
	return len(a[0].(string)) + len(a[2].([]byte)) + len(a[3].(string)) + len(a[5].(string))
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
	group  string        // the group it is queued in when due (see messageGroup), "" for none
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
	if m.prio, err = messagePriority(msg.Metadata); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidMessage, msg.UUID, topic, err)
	}
	if _, err = messageExpiry(msg.Metadata); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidMessage, msg.UUID, topic, err)
	}
	if _, err = messageHandlerTimeout(msg.Metadata); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidMessage, msg.UUID, topic, err)
	}
	if m.key, m.keyArg, err = businessKeyArg(msg, policy); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidMessage, msg.UUID, topic, err)
	}
	if m.group, err = messageGroup(msg.Metadata, m.keyArg); err != nil {
		return m, fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidMessage, msg.UUID, topic, err)
	}
	return m, nil
}

// encode encodes a message within PublisherConfig.MaxMessageSize.
func (p *Publisher) encode(topic string, msg *message.Message) ([]byte, error) {
	body := store.Encode(msg)
	if len(body) > p.config.MaxMessageSize {
		return nil, fmt.Errorf("%w: message %q to topic %q is %d bytes encoded (UUID, metadata and payload), over PublisherConfig.MaxMessageSize (%d): store large payloads elsewhere and publish a reference",
			ErrMessageTooLarge, msg.UUID, topic, len(body), p.config.MaxMessageSize)
	}
	return body, nil
}

// delayOf is a message's delay from now, within PublisherConfig.MaxDelay.
func (p *Publisher) delayOf(msg *message.Message, now time.Time) (time.Duration, error) {
	d, err := messageDelay(msg.Metadata, now)
	switch {
	case err != nil:
		return 0, err
	case d > maxDelayLimit:
		return 0, fmt.Errorf("due in %s, beyond the limit of 100 years (PublisherConfig.MaxDelay is %s): use a nearer delay.Until or a shorter delay.For",
			describeDelay(d), p.config.MaxDelay)
	case d > p.config.MaxDelay:
		return 0, fmt.Errorf("due in %s, beyond PublisherConfig.MaxDelay (%s): raise MaxDelay if that is intended", d, p.config.MaxDelay)
	}
	return d, nil
}

// send hands the first part of each partition's call to its batcher (collect
// sends the others). With a single call its error is Publish's, at once;
// otherwise errors are kept on the calls for collect.
func (p *Publisher) send(ctx context.Context, calls []*pubCall, nCalls int) error {
	for _, c := range calls {
		if c == nil {
			continue
		}
		if p.sendPart(ctx, c); c.err != nil && nCalls == 1 {
			return c.err
		}
	}
	return nil
}

// collect waits for the calls sent, sending each partition's further
// parts once the part before is stored, and returns their errors, saying
// which messages are stored when only some are.
func (p *Publisher) collect(ctx context.Context, topic string, calls []*pubCall) error {
	var (
		errs    []error
		stored  []int    // partitions whose messages are all stored
		partial []string // partitions some of whose messages are stored
	)
	for part, c := range calls {
		if c == nil {
			continue
		}
		n, total := 0, 0
		for q := c; q != nil; q = q.next {
			total += q.N
		}
		var err error
		for q := c; q != nil && err == nil; q = q.next {
			if q != c {
				p.sendPart(ctx, q)
			}
			if q.err == nil {
				q.err = p.await(ctx, q)
			}
			if err = q.err; err == nil {
				n += q.N
			}
		}
		switch {
		case err == nil:
			stored = append(stored, part)
		case n > 0:
			errs = append(errs, err)
			partial = append(partial, fmt.Sprintf("the first %d of the call's %d messages to %s are stored", n, total, c.where()))
		default:
			errs = append(errs, err)
		}
	}
	if len(partial) > 0 {
		errs = append(errs, fmt.Errorf("%s: a Publish call is stored in parts of up to %d messages (fewer when its far-future messages are due in many different minutes), each atomic; publishing the call again stores the rest, and is a no-op for its delayed messages already stored but delivers its immediate ones again",
			strings.Join(partial, "; "), maxPartMessages))
	}
	if len(errs) == 1 && len(stored) == 0 {
		return errs[0]
	}
	if len(errs) > 0 && len(stored) > 0 {
		errs = append(errs, fmt.Errorf("the messages to partitions %v of topic %q are stored: a Publish call whose messages go to several partitions (PartitionKey) is atomic per partition only", stored, topic))
	}
	return errors.Join(errs...)
}

// sendPart hands (a part of) a call to its partition's batcher, unless the
// call's context is over: the script run is shared with other calls, so
// the call's context could not stop it once sent. A run goes on in a
// goroutine of its own, so that the caller stops waiting when its context
// ends (go-redis reads a stalled socket until its ReadTimeout).
func (p *Publisher) sendPart(ctx context.Context, c *pubCall) {
	c.ctx = ctx
	if err := ctx.Err(); err != nil {
		c.err = notSent(c.N, c.where(), err)
		return
	}
	var run bool
	if c.b, run, c.err = p.enqueue(c); run {
		go p.flush(c.b, []*pubCall{c})
	}
}

// await waits for the result of a call handed to a batcher.
func (p *Publisher) await(ctx context.Context, c *pubCall) error {
	var r pubResult
	select {
	case r = <-c.done:
	case <-ctx.Done():
		select {
		case r = <-c.done: // finished at the same instant: report what happened
		default:
			c.b.mu.Lock()
			sent := c.taken
			c.abandoned = !sent
			c.b.mu.Unlock()
			if !sent {
				return notSent(c.N, c.where(), ctx.Err())
			}
			r.err = ctx.Err()
		}
	}
	if r.err != nil && ctx.Err() != nil {
		// the run failed by (or as) the context ended
		if errors.Is(r.err, ctx.Err()) {
			r.err = fmt.Errorf("gave up (the messages may or may not be stored): %w", ctx.Err())
		} else {
			r.err = fmt.Errorf("gave up (the messages may or may not be stored): %w (last error: %w)", ctx.Err(), r.err)
		}
	}
	if r.err != nil {
		return wrap(r.err, "publish %d message(s) to %s", c.N, c.where())
	}
	if r.dup != "" {
		return fmt.Errorf("%w: message %q is already waiting in %s with a different body: cancel it first or use a new UUID",
			ErrDuplicateMessage, r.dup, c.where())
	}
	return r.refused
}

// refusal is the error of a call the publish script refused with a table
// status ({'key', key, UUID} or {'full', which, count, added}).
func (c *pubCall) refusal(status []any) error {
	str := func(i int) string {
		if i < len(status) {
			s, _ := status[i].(string)
			return s
		}
		return ""
	}
	num := func(i int) int64 {
		if i < len(status) {
			n, _ := status[i].(int64)
			return n
		}
		return 0
	}
	switch str(0) {
	case "key":
		return fmt.Errorf("%w: key %q is held by message %q waiting in %s: cancel it first (CancelKey), or publish with the %q or %q BusinessKeyPolicy",
			ErrDuplicateBusinessKey, str(1), str(2), c.where(), KeepFirst, ReplaceWaiting)
	case "full":
		return fullError(c, str(1), num(2), num(3))
	}
	return fmt.Errorf("redisdelay: publish %d message(s) to %s: unexpected status %v from the publish script", c.N, c.where(), status)
}

// notSent is the error of a call that gave up before its messages were sent.
func notSent(n int, where string, err error) error {
	return wrap(err, "publish %d message(s) to %s: gave up before sending the messages (none is stored)", n, where)
}

// Coalescing. Per partition at most maxFlushes script runs are in flight; a
// call made while they all are waits in the topic's queue, and each run
// that ends takes the queued calls, in order, into the next one. So a lone
// caller is sent at once, and under load the runs grow by themselves.
//
// Redis runs one script at a time, so a long one stalls every client. A
// call is therefore stored in parts, one after another, each atomic on its
// own; a run, and so a part, holds at most maxPartMessages messages,
// maxPartBytes bytes (but for a single larger message) and messages for
// maxPartFarBuckets far buckets. The last bound is there because a far
// message whose minute no other message of the run shares costs Redis
// about three times what a near one does (its minute's list and counters,
// besides its far index entry): 500 messages due over a month made
// publish.lua run 10-16 ms with 50M waiting, 500 near ones 3.4-4.8 ms.
// Smaller parts of near messages would cost more than they save: a
// spike of 1M messages published in parts of 256 was delivered about 8%
// slower, as a part queued behind another runs later by Redis's clock,
// which scatters the due order of the bodies against their insertion.
const (
	maxFlushes        = 2
	maxPartMessages   = 512
	maxPartBytes      = 512 << 10
	maxPartFarBuckets = 128
)

// pubCall is one Publish call on its way to Redis.
type pubCall struct {
	topic       string
	part, parts int         // the partition, of the topic's partition count
	shard       store.Shard // the partition's keys
	store.PubArgs
	maxWaiting bound // the topic's capacity limits
	maxReady   bound
	size       int      // bytes of UUIDs and bodies
	buckets    int      // far buckets its messages may go to
	grouped    bool     // it has an immediate grouped message (see groupsFor)
	next       *pubCall // the partition's next part of the Publish call, sent once this one is stored
	ctx        context.Context
	done       chan pubResult // buffered: the flusher never blocks on it
	b          *batcher       // the partition's batcher, once enqueued
	err        error          // set when the call failed before it was sent

	// guarded by the batcher's mu
	taken     bool // sent, or about to be
	abandoned bool // its caller gave up before it was sent: skip it
}

// where names the call's destination in errors: the topic, and the
// partition when the topic has several.
func (c *pubCall) where() string {
	if c.parts <= 1 {
		return fmt.Sprintf("topic %q", c.topic)
	}
	return fmt.Sprintf("partition %d of topic %q", c.part, c.topic)
}

// pubResult is the outcome of one call: an error, or the UUID of a message
// already waiting with a different body, or neither.
type pubResult struct {
	dup     string
	refused error // a business key or capacity refusal
	err     error
}

// batcher queues the calls to one partition made while maxFlushes script
// runs for the partition are in flight.
type batcher struct {
	mu       sync.Mutex
	flushing int // runs in flight
	queue    []*pubCall
}

// enqueue hands the call to its partition's batcher: queued when
// maxFlushes runs are in flight or calls wait already, else the caller is
// to run it at once (run).
func (p *Publisher) enqueue(c *pubCall) (b *batcher, run bool, err error) {
	p.closeMu.RLock()
	if p.closed.Load() {
		p.closeMu.RUnlock()
		return nil, false, ErrClosed
	}
	p.pending.Add(1)
	p.closeMu.RUnlock()

	v, ok := p.batchers.Load(c.shard)
	if !ok {
		v, _ = p.batchers.LoadOrStore(c.shard, &batcher{})
	}
	b = v.(*batcher)
	b.mu.Lock()
	if b.flushing >= maxFlushes || len(b.queue) > 0 {
		b.queue = append(b.queue, c)
		b.mu.Unlock()
		return b, false, nil
	}
	b.flushing++
	c.taken = true
	b.mu.Unlock()
	return b, true, nil
}

// flush runs the script for batch, then for the calls queued meanwhile,
// until none is left.
func (p *Publisher) flush(b *batcher, batch []*pubCall) {
	for len(batch) > 0 {
		p.store(batch)
		batch = p.queued(b)
	}
}

// queued takes the calls of the next run from b's queue; none when the
// run just made was the last (it then counts as ended).
func (p *Publisher) queued(b *batcher) []*pubCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	batch, skipped := b.next()
	p.pending.Add(-skipped)
	if len(batch) == 0 {
		b.flushing--
	}
	return batch
}

// next takes the calls of the next run from the queue, in order, within
// the batch bounds (the first call always goes), skipping the calls whose
// callers have given up (it reports how many). Called with b.mu held.
func (b *batcher) next() (batch []*pubCall, skipped int) {
	msgs, size, buckets, i := 0, 0, 0, 0
	for ; i < len(b.queue); i++ {
		c := b.queue[i]
		if c.abandoned || c.ctx.Err() != nil {
			// its caller returns (or has returned) its timeout error
			c.abandoned = true
			skipped++
			continue
		}
		if len(batch) > 0 && (msgs+c.N > maxPartMessages || size+c.size > maxPartBytes || buckets+c.buckets > maxPartFarBuckets) {
			break
		}
		c.taken = true
		batch = append(batch, c)
		msgs += c.N
		size += c.size
		buckets += c.buckets
	}
	rest := copy(b.queue, b.queue[i:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch, skipped
}

// store runs the publish script for the calls of batch (all to one
// partition) and hands each its
// result. The run is bounded by the latest deadline among the calls; each
// caller stops waiting at its own (go-redis bounds a stalled socket read
// by the deadline, and Publish must not outlive it). After a caller gives
// up the script may still run; Publish's documentation says so.
func (p *Publisher) store(batch []*pubCall) {
	first := batch[0]
	var deadline time.Time
	for _, c := range batch {
		if d, ok := c.ctx.Deadline(); ok && d.After(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var reply store.PublishReply
	registered, err := p.register(ctx, first.topic, first.parts)
	if err == nil {
		reply, err = p.runPublish(ctx, batch)
	}
	if err == nil && reply.Lost && !registered {
		p.reregister(ctx, first.topic, first.parts)
	}
	if err == nil && reply.GroupsStale {
		p.readGroups(ctx, first.shard)
	}
	for i, c := range batch {
		r := pubResult{err: err}
		if err == nil {
			var refusal []any
			var pulls []string
			r.dup, refusal, pulls = reply.Status(i)
			if len(pulls) > 0 {
				r.dup, refusal, r.err = p.pullAndRetry(ctx, c, pulls)
			}
			if refusal != nil {
				r.refused = c.refusal(refusal)
			}
		}
		c.done <- r
	}
	p.pending.Add(-len(batch))
}

// pullAndRetry handles a call that found some of its messages' UUIDs in
// the far tier: it moves those messages to the waiting set, where
// publish.lua compares them like any waiting message, and sends the call
// again, until none is found there (a message may be stored in the far
// tier meanwhile, by another call).
func (p *Publisher) pullAndRetry(ctx context.Context, c *pubCall, uuids []string) (dup string, refusal []any, err error) {
	for range c.N + 1 {
		for _, uuid := range uuids {
			if _, _, _, err = store.FarPull(ctx, p.redis, c.shard, uuid, false); err != nil {
				return "", nil, fmt.Errorf("move the far message %q to the waiting set: %w", uuid, err)
			}
		}
		reply, err := p.runPublish(ctx, []*pubCall{c})
		if err != nil {
			return "", nil, err
		}
		if dup, refusal, uuids = reply.Status(0); len(uuids) == 0 {
			return dup, refusal, nil
		}
	}
	return "", nil, fmt.Errorf("messages %q stay in the far tier", uuids)
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
	return nil
}

// groupsFor is the consumer groups of the partition of batch as last read
// (read now the first time), when a message of batch may go straight to
// its group's queues (an immediate grouped message), else nil.
func (p *Publisher) groupsFor(ctx context.Context, batch []*pubCall) []string {
	for _, c := range batch {
		if c.grouped {
			groups, ok := p.consumerGroups.Load(c.shard)
			if !ok {
				p.readGroups(ctx, c.shard)
				groups, _ = p.consumerGroups.Load(c.shard)
			}
			list, _ := groups.([]string)
			return list
		}
	}
	return nil
}

// readGroups reads the consumer groups of a partition for groupsFor: at
// first, and after the publish script found the list out of date. A
// failure is harmless: grouped messages wait for the scheduler meanwhile.
func (p *Publisher) readGroups(ctx context.Context, sh store.Shard) {
	if groups, err := store.Groups(ctx, p.redis, sh); err == nil {
		p.consumerGroups.Store(sh, groups)
	}
}

// PublishArgs is what publish.lua takes of the call.
func (c *pubCall) PublishArgs() *store.PubArgs { return &c.PubArgs }

// runPublish runs the publish script for batch. With
// PublisherConfig.MinReplicas set it runs it on a connection of the master
// followed by WAIT (store.PublishOnMaster), and on a Cluster whose slots
// move (a redirection, a failover) sends it again until ctx ends (none of
// those ran the script).
func (p *Publisher) runPublish(ctx context.Context, batch []*pubCall) (store.PublishReply, error) {
	first := batch[0]
	o := store.PublishOpts{MaxWaiting: first.maxWaiting.perPart, MaxReady: first.maxReady.perPart, Groups: p.groupsFor(ctx, batch)}
	if p.config.MinReplicas == 0 {
		return store.Publish(ctx, p.redis, first.shard, o, batch)
	}
	for {
		res, acked, waitErr, err := store.PublishOnMaster(ctx, p.config.Client, first.shard, o, batch, p.config.MinReplicas, p.config.ReplicaTimeout)
		if waitErr != nil {
			err = fmt.Errorf("%w: the messages are stored on the master; WAIT for replicas failed: %w", ErrNotReplicated, waitErr)
		} else if err == nil && acked < int64(p.config.MinReplicas) {
			err = fmt.Errorf("%w: the messages are stored on the master, but only %d of the %d replicas required (PublisherConfig.MinReplicas) confirmed them within %s, so a failover now could lose them; retrying is a no-op for a delayed message still waiting, while an immediate message retried may be delivered twice",
				ErrNotReplicated, acked, p.config.MinReplicas, p.config.ReplicaTimeout)
		}
		if err == nil || errors.Is(err, ErrNotReplicated) {
			return res, err
		}
		if !store.RetryOnCluster(ctx, p.config.Client, err) {
			return store.PublishReply{}, err
		}
		select {
		case <-ctx.Done():
			return store.PublishReply{}, fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
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
