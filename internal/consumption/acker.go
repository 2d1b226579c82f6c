package consumption

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/pause"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// acks is a subscription's ack queue: entries acked, not yet acknowledged
// in Redis (ids in the ready and in the redelivery stream), still held.
//
// mu guards ready, redo, since and the ack timings of m (see
// subMetrics.ackQueued); it is a leaf lock, taken last: the subscription's
// mu may be held when it is taken, never taken while it is. Entries enter
// the queue only under the subscription's mu, in the critical section that
// takes them off the batch (see settled): whoever holds the subscription's
// mu so sees every held entry either in the batch or in the queue, and the
// queue does not grow meanwhile (a write of it only shrinks it). Lease
// renewal and the hand-back behind a slow handler count on that.
//
// flushMu makes one write of the queue at a time (a flush, or a read
// carrying it: see startWrite); it is taken before mu, never while mu or
// the subscription's mu is held.
type acks struct {
	mu      sync.Mutex
	ready   []string      // ids in the ready stream
	redo    []string      // ids in the redelivery stream
	since   time.Time     // when the oldest queued ack was queued; zero while none is
	frees   bool          // redo holds a grouped message's id, whose ack frees its group's slot (see awaitAckWrite)
	m       *subMetrics   // the subscription's; nil without metrics
	wake    chan struct{} // wakes the acker; capacity 1
	flushMu sync.Mutex
}

// Acknowledgements are asynchronous: an Ack moves the entry from the
// subscription's batch to its ack queue (under the subscription's mu, so
// the entry is held throughout) and the next message is handed out at
// once. The acker goroutine writes the queue to Redis in one pipelined
// round trip per flush (XACK with every ready-stream id, ack.lua with
// every redelivery-stream id) at the next multiple of ackEvery on the
// clock; acks made meanwhile, or while a flush is in flight, go into the
// next one. So a steady stream of acks costs one write per ackEvery, not
// one per message. The acks of a subscription waiting for its bell ride
// on its next read instead, when that comes within ackLinger: at a low
// rate a message then costs no round trip of its own for its ack. When
// none comes, they are written at the next multiple of ackEvery, gathered
// with those of the process's other waiting subscriptions into one
// pipeline: over many topics, each at a low rate, that saves most of a
// round trip per message. An ack that frees a group's slot (a grouped
// message's, see fair.lua) is written at once instead: the group's next
// message waits for it.
//
// Queued entries are still pending in Redis, so until their flush succeeds
// they count as held: lease renewal keeps them, and the queue is flushed
// before anything that hands back or re-reads what is pending for the
// consumer (a history read, a hand-back behind a slow handler, the final
// release). If the subscription ends before a flush succeeds, the entries
// stay pending and are handed back or reclaimed: delivered again, never
// lost.

// queue adds an acknowledged entry to the ack queue and wakes the acker.
// The subscription's mu is held (see acks).
func (q *acks) queue(e entry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.m.ackQueued(e.redo)
	if len(q.ready)+len(q.redo) == 0 {
		q.since = time.Now()
	}
	if e.redo {
		q.redo = append(q.redo, e.msg.ID)
		q.frees = q.frees || e.msg.Grouped()
	} else {
		q.ready = append(q.ready, e.msg.ID)
	}
	wakeUp(q.wake)
}

// count is how many acknowledgements wait for a write.
func (q *acks) count() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready) + len(q.redo)
}

// appendHeld appends the ids of the queue to ready and redo, for a lease
// renewal: the entries are still held. Called with the subscription's mu
// held, so that with the batch they are all it holds (see acks).
func (q *acks) appendHeld(ready, redo []any) ([]any, []any) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range q.ready {
		ready = append(ready, id)
	}
	for _, id := range q.redo {
		redo = append(redo, id)
	}
	return ready, redo
}

// ackLoop flushes the ack queue whenever acks are queued, retrying a failed
// flush with backoff, until ctx ends.
func (sub *subscription) ackLoop(ctx context.Context) {
	// One timer for the loop's waits: a subscription at a low rate makes
	// a few of them per message, and a timer each was most of what its
	// acks allocated.
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.acks.wake:
		}
		sub.awaitAckWrite(ctx, t)
		if gate := sub.s.AckGate; gate != nil {
			gate(ctx)
		}
		// Errors are logged; what is not written stays queued for the next
		// wake-up, or for the flush before a hand-back or re-read. The
		// acks of a subscription waiting for its bell wait a moment more
		// for those of others (see store.Gated.Gathering): over many topics
		// each at a low rate, one round trip then carries the acks of
		// several. Not the others': a read waits for a flush under way
		// (see startWrite), and a busy subscription reads again soon. Nor
		// those that free a group's slot (see awaitAckWrite).
		c := sub.s.redis
		if !sub.acks.freesSlot() && sub.reads.isWaiting() {
			c = sub.s.ackRedis
		}
		_ = sub.drainAcksVia(ctx, c)
	}
}

// awaitAckWrite waits, with t, until the queued acks are to be written
// (see the top of this file). An ack that frees a group's slot ends the
// wait: the group's next message waits for it, and the subscription that
// is to read that message may be waiting for the bell the ack rings
// (ack.lua), so riding on its next read would wait ackLinger for nothing.
func (sub *subscription) awaitAckWrite(ctx context.Context, t *time.Timer) {
	// Flushes happen at multiples of ackEvery on the clock, the same
	// instants for every subscription of the process: the hub's lanes
	// then carry the acks of many subscriptions in one pipeline.
	if !sub.waitAcks(ctx, t, time.Now().Truncate(ackEvery).Add(ackEvery), nil) {
		return
	}
	// A subscription waiting for its bell sends its queued acks with its
	// next read (readNew), when a message comes within ackLinger of the
	// oldest: a round trip saved per message at a low rate. The wait ends
	// early when the subscription stops waiting, else at a multiple of
	// ackEvery, the instants of the other waiting subscriptions' flushes.
	for sub.reads.isWaiting() {
		d := ackLinger - sub.acks.queuedFor()
		if d <= 0 {
			return
		}
		if !sub.waitAcks(ctx, t, time.Now().Add(d-1).Truncate(ackEvery).Add(ackEvery), sub.reads.unwaited) {
			return
		}
	}
}

// waitAcks waits, with t, until at and reports true; false, at once, when
// an ack that frees a group's slot is queued, end is woken or ctx ends.
func (sub *subscription) waitAcks(ctx context.Context, t *time.Timer, at time.Time, end <-chan struct{}) bool {
	defer t.Stop()
	for !sub.acks.freesSlot() {
		t.Reset(time.Until(at))
		select {
		case <-ctx.Done():
			return false
		case <-end:
			return false
		case <-t.C:
			return true
		case <-sub.acks.wake:
			// another ack queued: the loop checks whether it frees a slot;
			// the write after the wait takes it in any case
		}
	}
	return false
}

// ackEvery is how often a subscription's ack queue is flushed while acks
// are made (see the top of this file): at the multiples of ackEvery, so a
// steady stream of acks costs one round trip per ackEvery, shared by
// every subscription of the process. ackLinger bounds how long the acks
// of a subscription waiting for its bell wait for its next read to carry
// them. An ack waiting for a write is still held (its lease renewed) and
// is written before anything hands back or re-reads what is pending: a
// crash loses at most this much of the acks made, whose messages are then
// delivered again, as after any crash between an Ack and its write.
const (
	ackEvery  = 5 * time.Millisecond
	ackLinger = 50 * time.Millisecond
)

// freesSlot reports whether an ack queued frees a group's slot.
func (q *acks) freesSlot() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.frees
}

// queuedFor is how long the oldest queued ack has waited (ackLinger:
// none waits).
func (q *acks) queuedFor() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.since.IsZero() {
		return ackLinger // nothing to wait for
	}
	return time.Since(q.since)
}

// flushAcks writes the acknowledgements queued so far to Redis in one
// pipelined round trip and takes them off the queue once Redis has them;
// on error they stay queued. It returns how many are still queued (acked
// meanwhile). One write of the queue runs at a time (see startWrite: a
// flush, or a read carrying the acks, see readNew).
func (sub *subscription) flushAcks(ctx context.Context, c store.Cmds) (int, error) {
	ready, redo := sub.acks.startWrite(true)
	defer sub.acks.endWrite()
	if len(ready)+len(redo) == 0 {
		return 0, nil
	}
	return sub.acked(ready, redo, store.Ack(ctx, c, sub.shard, sub.s.config.ConsumerGroup, ready, redo))
}

// startWrite starts the one write of the queue at a time (flushMu) and,
// with take, returns its ids for the write (none without: the write
// carries no acks); endWrite ends it. What Redis took leaves the queue by
// the subscription's acked, called before endWrite.
func (q *acks) startWrite(take bool) (ready, redo []string) {
	q.flushMu.Lock()
	if !take {
		return nil, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	// Appends during the write go beyond these lengths, so the snapshot
	// stays valid without a copy.
	return q.ready[:len(q.ready):len(q.ready)], q.redo[:len(q.redo):len(q.redo)]
}

// endWrite ends a write started by startWrite.
func (q *acks) endWrite() {
	q.flushMu.Unlock()
}

// acked takes off the ack queue what a write of the snapshot ready, redo
// had Redis take, and returns how many are still queued and the write's
// errors. Called within the write (see startWrite).
func (sub *subscription) acked(ready, redo []string, r store.AckReply) (int, error) {
	// Each command counts on its own: what Redis took leaves the queue,
	// the rest is tried again.
	acked, doneReady, doneRedo := 0, 0, 0
	var errs []error
	if len(ready) > 0 {
		if n, err := r.Ready, r.ReadyErr; err != nil {
			errs = append(errs, fmt.Errorf("acknowledge %d message(s): %w", len(ready), err))
		} else {
			acked, doneReady = acked+int(n), len(ready)
		}
	}
	if len(redo) > 0 {
		if n, err := r.Redo, r.RedoErr; err != nil {
			errs = append(errs, fmt.Errorf("acknowledge %d redelivered message(s): %w", len(redo), err))
		} else {
			acked, doneRedo = acked+int(n), len(redo)
		}
	}
	left := sub.acks.dequeue(doneReady, doneRedo)
	if missed := doneReady + doneRedo - acked; missed > 0 {
		sub.s.logger.Info("redisdelay: Ack of message(s) no longer pending (reclaimed or handed back, so they may be delivered again; or acknowledged by an earlier write whose reply was lost)",
			sub.fields().Add(watermill.LogFields{"count": missed}))
	}
	return left, errors.Join(errs...)
}

// dequeue takes the first ready and redo ids off the ack queue (written
// to Redis) and returns how many are left.
func (q *acks) dequeue(ready, redo int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.m.acksWritten(ready, redo)
	q.ready = shift(q.ready, ready)
	q.redo = shift(q.redo, redo)
	if len(q.redo) == 0 {
		q.frees = false
	}
	left := len(q.ready) + len(q.redo)
	if left == 0 {
		q.since = time.Time{}
	}
	return left
}

// shift drops the first n ids, reusing the array.
func shift(ids []string, n int) []string {
	if n == 0 {
		return ids
	}
	k := copy(ids, ids[n:])
	clear(ids[k:])
	return ids[:k]
}

// drainAcks flushes until the ack queue is empty, retrying with backoff
// while Redis fails, until ctx ends or the client is closed. It returns
// nil once every queued acknowledgement is in Redis.
func (sub *subscription) drainAcks(ctx context.Context) error {
	return sub.drainAcksVia(ctx, sub.s.redis)
}

// drainAcksVia is drainAcks with the writes sent through c.
func (sub *subscription) drainAcksVia(ctx context.Context, c store.Cmds) error {
	for failures := 0; ; {
		opCtx, cancel := context.WithTimeout(ctx, opTimeout)
		left, err := sub.flushAcks(opCtx, c)
		cancel()
		if err == nil {
			if left == 0 {
				return nil
			}
			continue
		}
		if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
			return err
		}
		failures++
		wait := pause.Backoff(failures, 2*time.Second)
		sub.s.limiter.Errorf(sub.s.logger, "redisdelay: cannot write acknowledgements to Redis; retrying", err,
			sub.fields().Add(watermill.LogFields{"retry_in": wait.String()}))
		pause.Sleep(ctx, wait)
	}
}
