package consumption

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/pause"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// deliverAll delivers the entries of a read one by one, moving the history
// cursor past each. It returns false when the subscription must stop.
func (sub *subscription) deliverAll(ctx context.Context, entries []entry, pos *readPos) bool {
	sub.mu.Lock()
	sub.batch = entries
	sub.mu.Unlock()
	if len(entries) > 0 {
		// Once held (see extendLeases).
		sub.leases.fetched()
	}
	for {
		e, ok := sub.next()
		if !ok {
			return true
		}
		if pos.history {
			pos.cursor[e.streamIndex()-1] = e.msg.ID
		}
		sub.order.enter(phaseStep)
		ok, acked := sub.deliver(ctx, e)
		sub.settled(e, acked)
		if !ok {
			return false
		}
	}
}

// newerRetry is how long a stream entry of a newer release waits in the
// group's retry set before it is read again (by whichever subscription of
// the group gets it: one of a newer release delivers it).
const newerRetry = 30 * time.Second

// next hands out the first message of the batch, if any is left (none
// once an ordered subscription lost its partition: the new owner took the
// rest over).
func (sub *subscription) next() (entry, bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.order.isLost() {
		clear(sub.batch)
		sub.batch = nil
	}
	if len(sub.batch) == 0 {
		return entry{}, false
	}
	sub.handling, sub.since = true, time.Now()
	return sub.batch[0], true
}

// settled records that the handled message was acked or nacked (or
// handed back); an acked one moves to the ack queue, still held.
func (sub *subscription) settled(e entry, acked bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.handling = false
	sub.handedAt.Store(0)
	if len(sub.batch) > 0 {
		sub.batch[0] = entry{}
		sub.batch = sub.batch[1:]
	}
	if acked {
		sub.acks.queue(e)
	}
}

// deliver hands one entry to the subscriber's channel and settles it when the
// handler acks or nacks. It returns false when the subscription is closing,
// and acked when the entry is to be acknowledged (queued by the caller). A
// nack is settled here, synchronously.
func (sub *subscription) deliver(ctx context.Context, e entry) (ok, acked bool) {
	s := sub.s
	fields := func() watermill.LogFields {
		return sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID})
	}
	if e.msg.Values == nil {
		// The entry is pending but its content is gone (deleted by hand):
		// nothing can be delivered, so stop it blocking the pending list.
		s.logger.Error("redisdelay: pending entry has no content; acknowledging it", nil, fields())
		return ctx.Err() == nil, true
	}
	attempt := e.attempt()
	raw, hasBody := store.EntryBody(e.msg)
	// store.Decode only reads its input and copies what it keeps, so the
	// string's bytes serve without a copy.
	body := unsafe.Slice(unsafe.StringData(raw), len(raw))
	msg, err := store.Decode(body)
	if errors.Is(err, store.ErrNewer) {
		// A newer release wrote it: never dead-lettered nor acked here.
		// It goes back to the group for later, its attempt unchanged,
		// so that this subscription reads on (no head-of-line stall) and
		// a process that reads it, once there is one, delivers it.
		sub.lvl.Unreadable(s.logger, "stream entry", err, fields())
		sub.m.newer()
		sub.settle(ctx, func(ctx context.Context) error {
			return sub.settleNack(ctx, e, attempt, newerRetry, []byte(raw), "", nackSnoozed)
		})
		return ctx.Err() == nil, false
	}
	if err != nil {
		// Poison input (another tool or version wrote it): it can never be
		// delivered, so it goes to the dead letters, where it can be seen.
		if !hasBody {
			err = fmt.Errorf("%w: entry has no field m, only %v (written by another tool?)", store.ErrCorrupt, fieldNames(e.msg.Values))
		}
		s.logger.Error("redisdelay: cannot decode entry; moving it to the dead letters", err, fields())
		sub.settle(ctx, func(ctx context.Context) error {
			return sub.settleNack(ctx, e, attempt, 0, []byte(raw), err.Error(), nackFailed)
		})
		return ctx.Err() == nil, false
	}
	for {
		if expired, acked := sub.expire(ctx, e, msg, attempt); expired {
			return ctx.Err() == nil, acked
		}
		ok, acked, nacked, deliveredUntil := sub.handle(ctx, e, msg, attempt)
		if nacked == nil {
			return ok, acked
		}
		// An ordered subscription retries a nacked message here, before any
		// later message of the partition: the entry stays pending, its lease
		// renewed, while the retry delay runs. A snoozed one keeps its attempt.
		if d, snoozed := takeSnooze(nacked.Metadata); snoozed {
			pause.Sleep(ctx, d)
			if ctx.Err() != nil {
				return false, false
			}
			msg = nacked.Copy()
			continue
		}
		d, err := nackDelay(nacked.Metadata, deliveredUntil, attempt, s.now(), s.config.RetryDelay)
		if errors.Is(err, errDelayTooFar) {
			sub.settle(ctx, func(ctx context.Context) error { return sub.nack(ctx, e, nacked, attempt, deliveredUntil) })
			return ctx.Err() == nil, false
		}
		if err != nil {
			s.logger.Error("redisdelay: nacked message has invalid delay metadata; using RetryDelay", err,
				fields().Add(watermill.LogFields{"message_uuid": nacked.UUID}))
		}
		pause.Sleep(ctx, d)
		if ctx.Err() != nil {
			return false, false // handed back on close: delivered again, attempt unchanged
		}
		msg = nacked.Copy()
		attempt++
	}
}

// handle delivers one attempt of a message and waits until it is settled.
// A nacked message that an ordered subscription retries in place is
// returned, with its delivery mark (see meta.MarkDelivered), instead of being
// settled.
func (sub *subscription) handle(ctx context.Context, e entry, msg *message.Message, attempt int) (ok, acked bool, retry *message.Message, deliveredUntil string) {
	s := sub.s
	deliveredUntil = meta.MarkDelivered(msg.Metadata, strconv.Itoa(attempt), s.now())
	delete(msg.Metadata, meta.SnoozeKey) // only a Snooze of this delivery counts

	msgCtx := newMsgContext(ctx)
	defer msgCtx.end()
	msg.SetContext(msgCtx)
	limit := sub.handlerTimeout(msg.Metadata)
	if !sub.takeSlot(ctx) {
		return false, false, nil, ""
	}
	defer sub.releaseSlot()

	if !sub.handOut(ctx, msg) {
		return ctx.Err() == nil, false, nil, ""
	}
	sub.m.delivered(attempt, e.msg.ID)
	sub.order.enter(phaseWait) // bounded by the handler timeout
	// Until ctx ends, wait for the handler. Then (closing) its context is
	// cancelled: hand back what was fetched but not delivered at once, give
	// the handler CloseTimeout to finish, and let run's release hand back
	// the message if it does not.
	closing := ctx.Done()
	var timeout, deadline <-chan time.Time
	if limit > 0 {
		deadline = sub.startDeadline(limit)
		defer sub.deadline.Stop()
	}
	for {
		select {
		case <-msg.Acked():
			return timeout == nil, true, nil, ""
		case <-msg.Nacked():
			if timeout == nil && (sub.retriesInPlace(attempt) || sub.order != nil && msg.Metadata.Get(meta.SnoozeKey) != "") {
				return true, false, msg, deliveredUntil
			}
			sub.settle(ctx, func(ctx context.Context) error { return sub.nack(ctx, e, msg, attempt, deliveredUntil) })
			return timeout == nil, false, nil, ""
		case <-deadline:
			return sub.timedOut(ctx, e, msg, attempt, limit)
		case <-closing:
			closing, deadline = nil, nil // CloseTimeout bounds the handler now
			// The hand-back returns everything pending but this entry, so
			// the queued acks go to Redis first; if they cannot, the final
			// release hands back after another try.
			flushCtx, cancelFlush := context.WithTimeout(context.Background(), opTimeout)
			if sub.drainAcks(flushCtx) == nil {
				_ = sub.release(strconv.Itoa(e.streamIndex()), e.msg.ID)
				sub.mu.Lock()
				sub.batch = sub.batch[:1] // the rest was handed back (or, on error, is reclaimed)
				sub.mu.Unlock()
			}
			cancelFlush()
			wait := time.NewTimer(s.config.CloseTimeout)
			defer wait.Stop()
			timeout = wait.C
		case <-timeout:
			s.logger.Info("redisdelay: handler did not finish within CloseTimeout; handing its message back to the group",
				sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "message_uuid": msg.UUID}))
			return false, false, nil, ""
		}
	}
}

// handlerTimeout is how long a handler may take with a message (see
// SubscriberConfig.HandlerTimeout); negative: no bound.
func (sub *subscription) handlerTimeout(md message.Metadata) time.Duration {
	d, err := meta.HandlerTimeout(md)
	if err != nil {
		// Publish refuses it: another writer stored it.
		sub.s.limiter.Errorf(sub.s.logger, "redisdelay: message has an invalid handler timeout; using SubscriberConfig.HandlerTimeout", err, sub.fields())
	}
	if d == 0 {
		d = sub.s.config.HandlerTimeout
	}
	return d
}

// startDeadline starts the subscription's handler deadline timer, one
// reused for every delivery (a timer per message would allocate on the hot
// path).
func (sub *subscription) startDeadline(limit time.Duration) <-chan time.Time {
	if sub.deadline == nil {
		sub.deadline = time.NewTimer(limit)
	} else {
		sub.deadline.Reset(limit)
	}
	return sub.deadline.C
}

// timedOut gives up on a handler that ran past its deadline: the delivery
// is a failed attempt whose error names the timeout, retried in place by an
// ordered subscription (before any later message of its partition) or
// settled as a Nack (a retry, or a dead letter on the last attempt). The
// handler may still be running and still change msg, so the message to
// store is decoded again from the entry; its late Ack or Nack is ignored.
func (sub *subscription) timedOut(ctx context.Context, e entry, msg *message.Message, attempt int, limit time.Duration) (ok, acked bool, retry *message.Message, deliveredUntil string) {
	s := sub.s
	fields := sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "message_uuid": msg.UUID, "attempt": attempt, "handler_timeout": limit.String()})
	s.logger.Error("redisdelay: handler did not Ack or Nack within its timeout; the delivery counts as a failed attempt (the handler may still be running)", nil, fields)
	sub.m.timedOut()
	sub.recordTimeout(ctx)
	go ignoreLate(ctx, msg, s.logger, fields)

	raw, _ := store.EntryBody(e.msg)
	failed, err := store.Decode([]byte(raw))
	if err != nil { // decoded before it was delivered: cannot happen
		return ctx.Err() == nil, false, nil, ""
	}
	delete(failed.Metadata, meta.SnoozeKey)
	deliveredUntil = meta.MarkDelivered(failed.Metadata, strconv.Itoa(attempt), s.now())
	failed.Metadata.Set(meta.ErrorKey, fmt.Sprintf("handler timed out after %s (SubscriberConfig.HandlerTimeout, or metadata %s)", limit, meta.HandlerTimeoutKey))
	if sub.retriesInPlace(attempt) {
		return true, false, failed, deliveredUntil
	}
	sub.settle(ctx, func(ctx context.Context) error { return sub.nack(ctx, e, failed, attempt, deliveredUntil) })
	return ctx.Err() == nil, false, nil, ""
}

// recordTimeout counts a handler timeout in the group's meta hash, where
// Inspector.Health finds it; a failure is logged, the timeout's handling
// goes on.
func (sub *subscription) recordTimeout(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	err := store.CountTimeout(ctx, sub.s.redis, sub.shard, sub.s.config.ConsumerGroup, sub.s.now().UnixMilli())
	if err != nil && ctx.Err() == nil {
		sub.s.limiter.Errorf(sub.s.logger, "redisdelay: cannot record a handler timeout for Inspector.Health", err, sub.fields())
	}
}

// ignoreLate logs the Ack or Nack of a handler that had timed out, until
// the subscription ends: the message was retried or dead-lettered already.
func ignoreLate(ctx context.Context, msg *message.Message, logger watermill.LoggerAdapter, fields watermill.LogFields) {
	what := "Ack"
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
		what = "Nack"
	case <-ctx.Done():
		return
	}
	logger.Info("redisdelay: "+what+" of a message after its handler timeout, ignored (its delivery counted as failed)", fields)
}

// streamIndex is 1 for the ready stream and 2 for the redelivery stream, as
// scripts number them.
func (e entry) streamIndex() int {
	if e.redo {
		return 2
	}
	return 1
}

// attempt is the delivery attempt the entry stands for: field a on
// redeliveries, 1 otherwise.
func (e entry) attempt() int { return store.EntryAttempt(e.msg) }

func fieldNames(values map[string]any) []string {
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// handOut hands msg to the application; false when ctx ended first or,
// for an ordered subscription, the partition was lost meanwhile: the
// message stays pending and goes to the new owner, which took over.
func (sub *subscription) handOut(ctx context.Context, msg *message.Message) bool {
	if sub.order == nil {
		select {
		case sub.out <- msg:
			sub.handedAt.Store(time.Now().UnixNano())
			return true
		case <-ctx.Done():
			return false
		}
	}
	return sub.handOutOwned(ctx, msg)
}

// expire settles, instead of delivering it, a message whose deadline has
// passed, as SubscriberConfig.ExpiredMessages says: checked before each
// attempt, so an expired message is never handled nor retried. It reports
// whether it did, and whether the entry is to be acknowledged (dropped).
func (sub *subscription) expire(ctx context.Context, e entry, msg *message.Message, attempt int) (expired, acked bool) {
	s := sub.s
	reason, err := meta.ExpiredReason(msg.Metadata, s.now())
	if err != nil {
		s.limiter.Errorf(s.logger, "redisdelay: message has an unreadable deadline; delivering it", err,
			sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "message_uuid": msg.UUID}))
	}
	if reason == "" {
		return false, false
	}
	if s.config.DropExpired {
		s.logger.Info("redisdelay: message expired; dropping it (ExpiredMessages is DropExpired)",
			sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "message_uuid": msg.UUID, "reason": reason}))
		sub.m.expired(false)
		return true, true
	}
	sub.settle(ctx, func(ctx context.Context) error {
		return sub.settleNack(ctx, e, attempt, 0, store.EncodeAt(msg, sub.lvl.Level()), reason, nackExpired)
	})
	return true, false
}

// msgContext is a delivered message's context: the subscription's,
// cancelled as well when the delivery ends (the message is settled or
// handed back). context.WithCancel for each message cost about 4% of a
// consumer's CPU in a spike of due messages (its allocation, and the
// parent's lock and map of children on the way in and out), while few
// handlers ever wait on the context: the cancellable context is made only
// when Done, Err or Value is first called, then serves every call. Value
// goes through it too, so context.Cause and context.AfterFunc see the
// cancellation.
type msgContext struct {
	context.Context // the subscription's

	mu     sync.Mutex
	ctx    context.Context // nil until first needed
	cancel context.CancelFunc
	ended  bool
	// detach: the delivery ended while the subscription's context was
	// live, so a context made after that ended with the delivery
	// (context.Canceled), whatever its parent did later.
	detach bool
}

func newMsgContext(parent context.Context) *msgContext {
	return &msgContext{Context: parent}
}

func (c *msgContext) inner() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		parent := c.Context
		if c.detach {
			parent = context.WithoutCancel(parent)
		}
		c.ctx, c.cancel = context.WithCancel(parent)
		if c.ended {
			c.cancel()
		}
	}
	return c.ctx
}

func (c *msgContext) Done() <-chan struct{} { return c.inner().Done() }

func (c *msgContext) Err() error { return c.inner().Err() }

func (c *msgContext) Value(key any) any { return c.inner().Value(key) }

// end cancels the context: the delivery ended.
func (c *msgContext) end() {
	parentLive := c.Context.Err() == nil
	c.mu.Lock()
	c.ended = true
	c.detach = parentLive
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// settle runs a nack (or dead-lettering) until Redis takes it, so the next
// message is delivered only after the previous one is settled (acks are
// queued instead: see acker.go). It tries at least once;
// if the subscription ends (ctx) or the client is closed first, the entry
// stays pending and is handed back or reclaimed: delivered again, never lost.
func (sub *subscription) settle(ctx context.Context, op func(context.Context) error) {
	for failures := 1; ; failures++ {
		opCtx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := op(opCtx)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
			sub.s.limiter.Errorf(sub.s.logger, "redisdelay: cannot settle message; it stays pending and is delivered again", err,
				sub.fields())
			return
		}
		wait := pause.Backoff(failures, 2*time.Second)
		sub.s.limiter.Errorf(sub.s.logger, "redisdelay: cannot settle message; retrying", err,
			sub.fields().Add(watermill.LogFields{"retry_in": wait.String()}))
		pause.Sleep(ctx, wait)
	}
}

// notPending logs a settlement of an entry that was no longer pending for
// the group: reclaimed after its lease ran out, handed back, or settled by a
// retry whose first reply was lost. In the first two cases it is delivered
// again.
func (sub *subscription) notPending(e entry, what string) {
	sub.s.logger.Info("redisdelay: "+what+" of a message no longer pending (reclaimed or handed back; it may be delivered again)",
		sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID}))
}

// nackKind is why an entry is nacked.
type nackKind int

// settleNack requeues a delivered entry for the group, or buries it in the
// dead letters when reason is set.
func (sub *subscription) settleNack(ctx context.Context, e entry, attempt int, delay time.Duration, body []byte, reason string, kind nackKind) error {
	s := sub.s
	a := store.NackArgs{
		Group: s.config.ConsumerGroup, Stream: e.stream, Id: e.msg.ID, Redo: e.redo,
		Attempt: attempt, Delay: delay, Body: body, Reason: reason, MaxDead: s.config.MaxDeadLetters,
		KeepAttempt: kind == nackSnoozed,
	}
	if kind == nackExpired {
		a.Attempt-- // the dead letter counts the deliveries it had: not this one
	}
	r, err := store.Nack(ctx, s.redis, sub.shard, a)
	if err != nil {
		return fmt.Errorf("nack entry %s: %w", e.msg.ID, err)
	}
	switch kind {
	case nackFailed:
		sub.m.nacked(r.Status)
	case nackExpired:
		if r.Status == store.NackBuried {
			sub.m.expired(true)
		}
	}
	fields := sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "attempt": attempt})
	switch {
	case r.Status == store.NackNotPending:
		sub.notPending(e, "Nack")
	case r.Status == store.NackBuried && kind == nackExpired:
		s.logger.Info("redisdelay: message expired; moved to the dead letters", fields.Add(watermill.LogFields{"reason": reason}))
	case r.Status == store.NackBuried:
		s.logger.Error("redisdelay: message moved to the dead letters", errors.New(reason), fields)
	}
	if r.Evicted > 0 {
		s.logger.Error("redisdelay: dead letters full (MaxDeadLetters); evicted the oldest", nil,
			fields.Add(watermill.LogFields{"evicted": r.Evicted}))
	}
	return nil
}

// release hands back to the group everything still pending for this
// consumer (prefetched, or delivered and not acked) and removes the
// consumer; or, given an entry to keep (stream index and id), everything
// but that entry, leaving the consumer in place. Errors are logged.
// releaseBatch is how many entries per stream one release.lua call hands
// back: a bounded call (grouped messages cost more, see fair.lua).
const releaseBatch = 256

func (sub *subscription) release(keepStream, keepID string) error {
	s := sub.s
	group := s.config.ConsumerGroup
	fields := sub.fields()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for {
		r, err := store.Release(ctx, s.redis, sub.shard, group, sub.consumer, releaseBatch, keepStream, keepID)
		if err != nil {
			if !store.IsClientClosed(err) {
				s.logger.Error("redisdelay: cannot hand back pending messages; they stay with this consumer until read again or reclaimed", err, fields)
			}
			return err
		}
		if r.Missing > 0 {
			s.logger.Error("redisdelay: pending entries without content were dropped", nil, fields.Add(watermill.LogFields{"count": r.Missing}))
		}
		if r.Released > 0 {
			s.logger.Debug("redisdelay: handed back pending messages", fields.Add(watermill.LogFields{"count": r.Released}))
		}
		if r.Done {
			return nil
		}
	}
}

// The retry policy: when a delivery fails, whether the message comes back,
// and after how long. It is applied on two paths, and decided here for
// both:
//
//   - Nack (and a handler timeout, which counts as a failed attempt): the
//     subscription decides (nack): the delay is the one the handler set in
//     the message's delay metadata after delivery (middleware.DelayOnError),
//     else SubscriberConfig.RetryDelay for the attempt (DefaultRetryDelay by
//     default); past MaxAttempts, or a delay beyond the 100-year limit, the
//     message goes to the dead letters. nack.lua carries it out: the
//     group's retry set (lib.lua's retry_later) or its redelivery stream,
//     or the dead letters. An ordered subscription retries in place instead
//     (retriesInPlace), before any later message of its partition.
//   - Reclaim: a message held past the visibility timeout by a consumer
//     that stopped renewing it is retried by a scheduler, which may run in
//     a process that never saw this config: so the policy is stored in
//     Redis with the group (groupPolicy, written by init.lua into the
//     group's meta hash) and reclaim.lua applies it, with the delays of
//     RetryDelay evaluated here for the first attempts.
//
// A snoozed message (Snooze) comes back after its snooze without spending
// an attempt. The pause after the library's own failures (a Redis error) is
// not this policy: see internal/pause.

func (sub *subscription) nack(ctx context.Context, e entry, msg *message.Message, attempt int, deliveredUntil string) error {
	s := sub.s
	if d, snoozed := takeSnooze(msg.Metadata); snoozed {
		return sub.settleNack(ctx, e, attempt, d, store.EncodeAt(msg, sub.lvl.Level()), "", nackSnoozed)
	}
	d, err := nackDelay(msg.Metadata, deliveredUntil, attempt, s.now(), s.config.RetryDelay)
	reason := ""
	switch {
	case errors.Is(err, errDelayTooFar):
		reason = err.Error()
	case err != nil:
		s.logger.Error("redisdelay: nacked message has invalid delay metadata; using RetryDelay", err,
			sub.fields().Add(watermill.LogFields{"message_uuid": msg.UUID}))
	}
	if max := s.config.MaxAttempts; reason == "" && max > 0 && attempt >= max {
		reason = msg.Metadata.Get(meta.ErrorKey)
		if reason == "" {
			reason = fmt.Sprintf("nacked on attempt %d of %d (set metadata %s, e.g. with the RecordError middleware, to record why)",
				attempt, max, meta.ErrorKey)
		}
	}
	return sub.settleNack(ctx, e, attempt, d, store.EncodeAt(msg, sub.lvl.Level()), reason, nackFailed)
}

// retriesInPlace reports whether a nacked message is retried by the
// subscription itself: in ordered subscriptions, unless it was the last
// attempt.
func (sub *subscription) retriesInPlace(attempt int) bool {
	max := sub.s.config.MaxAttempts
	return sub.order != nil && (max <= 0 || attempt < max)
}

// errDelayTooFar marks a Nack whose delay metadata asks for more than
// meta.MaxDelay: such a message goes to the dead letters, with the error as
// the reason, rather than waiting for centuries (or, once the delay
// overflowed, coming back at once).
var errDelayTooFar = errors.New("redisdelay: nack delay too far")

// nackDelay picks the redelivery delay of a nacked message: the delay its
// metadata asks for when the handler (e.g. middleware.DelayOnError) set one
// after delivery, otherwise the configured backoff for the failed attempt.
// When the new delay metadata does not parse, the backoff is used and the
// parse error returned for logging: the message is requeued either way.
// When it asks for more than meta.MaxDelay, the error wraps errDelayTooFar
// and the message is to be dead-lettered.
func nackDelay(md message.Metadata, deliveredUntil string, attempt int, now time.Time, backoff func(int) time.Duration) (time.Duration, error) {
	var err error
	if until := md.Get(delay.DelayedUntilKey); until != "" && until != deliveredUntil {
		var d time.Duration
		if d, err = meta.Delay(md, now); err == nil {
			if d > meta.MaxDelay {
				return 0, fmt.Errorf("%w: the handler asked for a redelivery delay of %s (metadata %s=%q, %s=%q), beyond the limit of 100 years: set a shorter delay (e.g. DelayOnError's MaxInterval), then requeue the dead letter",
					errDelayTooFar, meta.DescribeDelay(d), delay.DelayedUntilKey, until, delay.DelayedForKey, md.Get(delay.DelayedForKey))
			}
			return d, nil
		}
	}
	if backoff == nil {
		return 0, err
	}
	return meta.RoundUpMs(backoff(attempt)), err
}

// takeSnooze removes a Snooze request from a nacked message's metadata
// and returns its delay.
func takeSnooze(md message.Metadata) (time.Duration, bool) {
	v, ok := md[meta.SnoozeKey]
	if !ok {
		return 0, false
	}
	delete(md, meta.SnoozeKey)
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		// Set by hand, not by Snooze: a plain Nack.
		return 0, false
	}
	return meta.RoundUpMs(d), true
}
