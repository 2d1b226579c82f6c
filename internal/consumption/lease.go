package consumption

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// leases is the state of a subscription's lease renewal (see
// extendLeases), held as subscription.leases. It needs no lock: skipped
// and storedVis are atomic (set by the run goroutine's reads too), reported
// is the renewal goroutine's. What the renewal extends (the batch, and the
// ack queue) is the subscription's, under its mu.
type leases struct {
	skipped   atomic.Bool   // renewals were skipped since the last one (and the ticker stopped)
	renewNow  chan struct{} // starts them again (see fetched); capacity 1
	storedVis atomic.Int64  // the group's stored visibility timeout as last read (renewal, or a read of new entries: see readNew); 0 before
	reported  string        // the entry the last renewal reported handled (extendLeases' goroutine only)
}

// reportAfter is how long a handler has a message before the subscription
// renews its leases early to report it (see reportDue): the Inspector
// then tells it from the messages fetched with it, at most one renewal
// more per message, and only for messages handled that long.
const reportAfter = time.Second

// renewLeases extends the lease of what the subscription holds and returns
// the group's stored visibility timeout. First, if a handler has run longer
// than slow, the messages fetched behind it go back to the group (attempt
// unchanged) for other consumers to take while it runs on.
func (sub *subscription) renewLeases(ctx context.Context, slow time.Duration) (time.Duration, error) {
	s := sub.s
	sub.mu.Lock()
	// An ordered subscription keeps what waits behind a slow handler:
	// nobody else may handle its partition's messages meanwhile.
	slowNow := sub.order == nil && sub.handling && len(sub.batch) > 1 && time.Since(sub.since) >= slow
	queued := sub.acks.count() > 0
	sub.mu.Unlock()
	if slowNow && queued {
		// The hand-back returns everything pending but the handled entry:
		// acked ones must be acknowledged in Redis first. If that fails,
		// the hand-back waits for the next renewal.
		_, _ = sub.flushAcks(ctx, s.redis)
	}
	sub.mu.Lock()
	// Acks queued meanwhile mean the handler moved on (since changed). None
	// is queued while mu is held (see acks): the hand-back returns no acked
	// entry.
	if slowNow && sub.handling && len(sub.batch) > 1 && time.Since(sub.since) >= slow && sub.acks.count() == 0 {
		if sub.release(strconv.Itoa(sub.batch[0].streamIndex()), sub.batch[0].msg.ID) != nil {
			// Some may have gone back before the error: whatever is still
			// pending for this consumer is read again after this message.
			sub.recheck = true
		}
		sub.batch = sub.batch[:1]
	}
	// Held: the batch (unless the partition was lost: the new owner took
	// it over), and acked entries whose acknowledgement is not in Redis
	// yet.
	var ready, redo []any
	held := sub.batch
	if sub.order.isLost() {
		held = nil
	}
	var handed store.Handed
	if at := sub.handedAt.Load(); sub.handling && at != 0 && len(held) > 0 {
		handed = store.Handed{Redo: held[0].redo, ID: held[0].msg.ID, At: time.Unix(0, at)}
	}
	for _, e := range held {
		if e.redo {
			redo = append(redo, e.msg.ID)
		} else {
			ready = append(ready, e.msg.ID)
		}
	}
	ready, redo = sub.acks.appendHeld(ready, redo) // under mu: see acks
	sub.mu.Unlock()

	group := s.config.ConsumerGroup
	r, err := store.Extend(ctx, s.redis, sub.shard, group, sub.consumer, handed, 3*slow, ready, redo)
	// Counted as reported even when the call failed: the early report is
	// not retried every second through an outage; the next regular
	// renewal carries it.
	sub.leases.reported = handed.ID
	if err != nil {
		return 0, fmt.Errorf("extend the lease of %d held message(s): %w", len(ready)+len(redo), err)
	}
	if err := sub.renewSlot(ctx); err != nil {
		return 0, err
	}
	if abandoned, err := sub.renewOwnership(ctx); err != nil {
		return 0, err
	} else if abandoned {
		return r.Vis, nil
	}
	if r.Unheld > 0 {
		s.Unheld.Add(1)
		sub.mu.Lock()
		sub.recheck = true
		sub.mu.Unlock()
	}
	return r.Vis, nil
}

// extendLeases renews the lease of every message the subscription holds
// three times per VisibilityTimeout, until ctx ends. Reclaim uses the
// group's stored timeout, written by the subscriber of the group that
// started last; when that is shorter (a rollout changing it), renewals
// follow it (see renewEvery), so live consumers keep their messages
// either way.
//
// A renewal with nothing to do is skipped (see needless), and the ticker
// stopped, so an idle subscription costs nothing here; the first read that
// fetches messages after a skipped renewal starts it again (renewNow), at
// the pace of the stored timeout reads follow (see readNew).
func (sub *subscription) extendLeases(ctx context.Context) {
	every := sub.renewEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	report := time.NewTicker(reportAfter) // stopped and started with t
	defer report.Stop()
	last := time.Now() // the last renewal that ran (the start counts as one)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// skipped is set before needless looks: a fetch either finds
			// it set (and starts the ticker) or is seen by needless.
			sub.leases.skipped.Store(true)
			if sub.needless(last) {
				t.Stop()
				report.Stop()
				continue
			}
			sub.leases.skipped.Store(false)
		case <-report.C:
			if !sub.reportDue() {
				continue
			}
		case <-sub.leases.renewNow:
			every = sub.renewEvery()
			t.Reset(every)
			report.Reset(reportAfter)
			continue
		}
		sub.s.Renewals.Add(1)
		last = time.Now()
		opCtx, cancel := context.WithTimeout(ctx, opTimeout)
		stored, err := sub.renewLeases(opCtx, every)
		cancel()
		if err != nil && ctx.Err() == nil && !store.IsClientClosed(err) {
			sub.s.limiter.Errorf(sub.s.logger, "redisdelay: cannot extend the lease of held messages; they are reclaimed if this lasts beyond VisibilityTimeout", err,
				sub.fields())
		}
		if stored > 0 {
			sub.leases.learnVis(stored)
		}
		if want := sub.renewEvery(); want != every {
			every = want
			t.Reset(every)
		}
	}
}

// reportDue reports whether a handler has had its message for
// reportAfter and no renewal reported it yet.
func (sub *subscription) reportDue() bool {
	at := sub.handedAt.Load()
	if at == 0 || time.Since(time.Unix(0, at)) < reportAfter {
		return false
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.handling && len(sub.batch) > 0 && sub.batch[0].msg.ID != sub.leases.reported && !sub.order.isLost()
}

// renewEvery is how often held messages' leases are renewed: three times
// per visibility timeout, the group's stored one when that is shorter.
func (sub *subscription) renewEvery() time.Duration {
	vis := sub.s.config.VisibilityTimeout
	if stored := time.Duration(sub.leases.storedVis.Load()); stored > 0 {
		vis = min(vis, stored)
	}
	return vis / 3
}

// needless reports whether a lease renewal has nothing to do: the
// subscription is not ordered (those renew their ownership with it), holds
// nothing (no lease to extend, no slow handler to unburden), and renewed
// within BlockTime (last). A renewal also finds entries pending for the
// consumer that it does not hold, which a read whose reply was lost (and
// which go-redis retried) left: so a subscription that fetches looks at
// least once per BlockTime plus a renewal period, and an idle one is
// looked at by the Subscriber's sweep (peek.lua).
func (sub *subscription) needless(last time.Time) bool {
	if sub.order != nil || time.Since(last) >= sub.s.config.BlockTime {
		return false
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return len(sub.batch) == 0 && sub.acks.count() == 0
}

// learnVis records the group's stored visibility timeout, as read by a
// renewal or a read of new entries.
func (l *leases) learnVis(stored time.Duration) {
	l.storedVis.Store(int64(stored))
}

// fetched is called once the entries of a read are held: the renewals
// start again if they were skipped meanwhile (see extendLeases).
func (l *leases) fetched() {
	if l.skipped.Swap(false) {
		wakeUp(l.renewNow)
	}
}
