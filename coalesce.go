// How Publish calls reach Redis: each partition's call split into parts,
// concurrent calls coalesced into script runs (see Coalescing below), the
// replies decoded into each call's result.

package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// split cuts a partition's messages of a Publish call into parts within
// the bounds of a run (see maxPartMessages), in call order, chained by
// next, and returns the first.
func (c *pubCall) split() *pubCall {
	// The common case needs no map: at most one bucket a far message.
	for _, m := range c.Msgs {
		if m.Far.Bucket >= 0 {
			c.buckets++
		}
	}
	if len(c.Msgs) <= maxPartMessages && c.size <= maxPartBytes && c.buckets <= maxPartFarBuckets {
		return c
	}
	first, tail := (*pubCall)(nil), (*pubCall)(nil)
	seen := map[int64]bool{}
	from, size := 0, 0
	cut := func(to int) {
		part := *c
		part.Msgs = c.Msgs[from:to]
		part.size, part.buckets, part.next = size, len(seen), nil
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
	for m := range c.Msgs {
		bytes := msgBytes(&c.Msgs[m])
		b := c.Msgs[m].Far.Bucket
		newBucket := b >= 0 && !seen[b]
		if m > from && (m-from == maxPartMessages || size+bytes > maxPartBytes || newBucket && len(seen) == maxPartFarBuckets) {
			cut(m)
		}
		if b >= 0 {
			seen[b] = true
		}
		size += bytes
	}
	cut(len(c.Msgs))
	return first
}

// msgBytes is the size a message counts for in a run's bounds: its UUID,
// encoded body, business key argument and group (see pubCall.args).
func msgBytes(m *store.PubMessage) int {
	return len(m.UUID) + len(m.Body) + len(m.Key) + len(m.Group)
}

// send hands the first part of each partition's call to its batcher (collect
// sends the others). With a single call its error is Publish's, at once;
// otherwise errors are kept on the calls for collect.
func (p *Publisher) send(ctx context.Context, calls []*pubCall, nCalls int, inline bool) error {
	for _, c := range calls {
		if c == nil {
			continue
		}
		if p.sendPart(ctx, c, inline); c.err != nil && nCalls == 1 {
			return c.err
		}
	}
	return nil
}

// collect waits for the calls sent, sending each partition's further
// parts once the part before is stored, and returns their errors, saying
// which messages are stored when only some are.
func (p *Publisher) collect(ctx context.Context, topic string, calls []*pubCall, inline bool) error {
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
			total += len(q.Msgs)
		}
		var err error
		for q := c; q != nil && err == nil; q = q.next {
			if q != c {
				p.sendPart(ctx, q, inline)
			}
			if q.err == nil {
				q.err = p.await(ctx, q)
			}
			if err = q.err; err == nil {
				n += len(q.Msgs)
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
// ends (go-redis reads a stalled socket until its ReadTimeout) — unless
// inline: go-redis then ends its waits at the context's deadline, and
// the run is the caller's own (the calls queued meanwhile go on in a
// goroutine), which spares a goroutine and its hand-off.
func (p *Publisher) sendPart(ctx context.Context, c *pubCall, inline bool) {
	c.ctx = ctx
	if err := ctx.Err(); err != nil {
		c.err = notSent(len(c.Msgs), c.where(), err)
		return
	}
	var run bool
	if c.b, run, c.err = p.enqueue(c); !run {
		return
	}
	if !inline {
		go p.flush(c.b, []*pubCall{c})
		return
	}
	p.store([]*pubCall{c})
	if batch := p.queued(c.b); len(batch) > 0 {
		go p.flush(c.b, batch)
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
				return notSent(len(c.Msgs), c.where(), ctx.Err())
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
		return wrap(r.err, "publish %d message(s) to %s", len(c.Msgs), c.where())
	}
	if r.dup != "" {
		return fmt.Errorf("%w: message %q is already waiting in %s with a different body: cancel it first or use a new UUID",
			ErrDuplicateMessage, r.dup, c.where())
	}
	return r.refused
}

// refusal is the error of a call the publish script refused.
func (c *pubCall) refusal(r *store.Refusal) error {
	switch r.Kind {
	case store.RefusedKey:
		return fmt.Errorf("%w: key %q is held by message %q waiting in %s: cancel it first (CancelKey), or publish with the %q or %q BusinessKeyPolicy",
			ErrDuplicateBusinessKey, r.Key, r.Holder, c.where(), KeepFirst, ReplaceWaiting)
	case store.RefusedFull:
		return fullError(c, r.Which, r.Count, r.Added)
	}
	return fmt.Errorf("redisdelay: publish %d message(s) to %s: unexpected status %s from the publish script", len(c.Msgs), c.where(), r.Kind)
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
		if len(batch) > 0 && (msgs+len(c.Msgs) > maxPartMessages || size+c.size > maxPartBytes || buckets+c.buckets > maxPartFarBuckets) {
			break
		}
		c.taken = true
		batch = append(batch, c)
		msgs += len(c.Msgs)
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
			var refusal *store.Refusal
			var pulls, pullKeys []string
			r.dup, refusal, pulls, pullKeys = reply.Status(i)
			if len(pulls) > 0 || len(pullKeys) > 0 {
				r.dup, refusal, r.err = p.pullAndRetry(ctx, c, pulls, pullKeys)
			}
			if refusal != nil {
				r.refused = c.refusal(refusal)
			}
		}
		c.done <- r
	}
	p.pending.Add(-len(batch))
}

// pullAndRetry handles a call that found some of its messages' UUIDs, or
// holders of their business keys, in the far tier: it moves those messages
// to the waiting set, where publish.lua compares them like any waiting
// message, and sends the call again, until none is found there (a message
// may be stored in the far tier meanwhile, by another call). A message of
// the call that the pull does not find (its fingerprint in the far index
// was another message's) is sent again without a far lookup; a business
// key whose fingerprint's entry was another key's, with that entry's
// place, which is then not taken for the key's.
func (p *Publisher) pullAndRetry(ctx context.Context, c *pubCall, uuids, keys []string) (dup string, refusal *store.Refusal, err error) {
	for range len(c.Msgs) + 1 {
		for _, key := range keys {
			uuid, other, err := store.FarKeyLookup(ctx, p.redis, c.shard, key)
			if err != nil {
				return "", nil, fmt.Errorf("find the far holder of business key %q: %w", key, err)
			}
			if uuid == "" {
				c.keyElsewhere(key, other)
				continue
			}
			if _, _, _, err := store.FarPullKeyed(ctx, p.redis, c.shard, uuid, key, false); err != nil {
				return "", nil, fmt.Errorf("move the far message %q to the waiting set: %w", uuid, err)
			}
		}
		for _, uuid := range uuids {
			_, _, found, err := store.FarPull(ctx, p.redis, c.shard, uuid, false)
			if err != nil {
				return "", nil, fmt.Errorf("move the far message %q to the waiting set: %w", uuid, err)
			}
			if !found {
				c.noFarLookup(uuid)
			}
		}
		reply, err := p.runPublish(ctx, []*pubCall{c})
		if err != nil {
			return "", nil, err
		}
		if dup, refusal, uuids, keys = reply.Status(0); len(uuids) == 0 && len(keys) == 0 {
			return dup, refusal, nil
		}
	}
	return "", nil, fmt.Errorf("messages %q, or holders of business keys %q, stay in the far tier", uuids, keys)
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

// noFarLookup tells the next runs that a pull did not find the call's
// message uuid in the far tier (store.FarArg.NotFar).
func (c *pubCall) noFarLookup(uuid string) {
	for i := range c.Msgs {
		if c.Msgs[i].UUID == uuid {
			c.Msgs[i].Far.NotFar()
		}
	}
}

// keyElsewhere tells the next runs that the format 3 index's entry at the
// fingerprint of business key key, at place other, is another key's
// (store.FarArg.KeyElsewhere).
func (c *pubCall) keyElsewhere(key, other string) {
	for i := range c.Msgs {
		if k := c.Msgs[i].Key; k != "" && k[1:] == key {
			c.Msgs[i].Far.KeyElsewhere(other)
		}
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
	o := store.PublishOpts{MaxWaiting: first.maxWaiting.perPart, MaxReady: first.maxReady.perPart, Groups: p.groupsFor(ctx, batch), Shapes: &p.farShapes}
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

// bound is a capacity limit of a topic as it applies to one partition.
type bound struct {
	perPart int    // ceil(limit / partitions); 0: none
	limit   int    // the configured value
	name    string // the setting: MaxWaiting or MaxReady
	topic   string // the topic, when the per-topic setting applies
}

// field names the setting in errors.
func (b bound) field() string {
	if b.topic != "" {
		return fmt.Sprintf("PublisherConfig.Topic%s[%q]", b.name, b.topic)
	}
	return "PublisherConfig." + b.name
}

// validateLimit checks one capacity limit of a PublisherConfig.
func validateLimit(name string, def int, perTopic map[string]int) error {
	if def < 0 {
		return fmt.Errorf("redisdelay: PublisherConfig.%s is %d: use 0 (no bound) or more", name, def)
	}
	for topic, n := range perTopic {
		if pr := nameProblem("PublisherConfig.Topic"+name+" key", topic); pr != "" {
			return fmt.Errorf("%w: %s", ErrInvalidTopic, pr)
		}
		if n < 0 {
			return fmt.Errorf("redisdelay: PublisherConfig.Topic%s[%q] is %d: use 0 (no bound) or more", name, topic, n)
		}
	}
	return nil
}

// topicBound is the limit name (MaxWaiting, MaxReady) of topic over parts
// partitions: the per-topic value when there is one (0 included), else
// the default.
func topicBound(name string, def int, perTopic map[string]int, topic string, parts int) bound {
	b := bound{limit: def, name: name}
	if n, ok := perTopic[topic]; ok {
		b = bound{limit: n, name: name, topic: topic}
	}
	b.perPart = (b.limit + parts - 1) / parts
	return b
}

// fullError is the error of a call that would take its partition over a bound.
func fullError(c *pubCall, which string, count, added int64) error {
	b, what := c.maxWaiting, "waiting messages (delayed, not yet due)"
	if which == "ready" {
		b, what = c.maxReady, "ready stream entries (due, not yet trimmed)"
	}
	limit := fmt.Sprintf("%s is %d", b.field(), b.limit)
	if c.parts > 1 {
		limit = fmt.Sprintf("%d per partition: %s over %d partitions", b.perPart, limit, c.parts)
	}
	return fmt.Errorf("%w: %s holds %d %s and the call adds %d, over its bound (%s): nothing of the call is stored",
		ErrQueueFull, c.where(), count, what, added, limit)
}
