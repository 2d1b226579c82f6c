package consumption

import (
	"strconv"
	"strings"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// SubscriptionMetrics is redisdelay.SubscriptionMetrics, which the root
// package documents: what records the deliveries of one subscription.
type SubscriptionMetrics interface {
	Delivered(attempt int, lag time.Duration)
	Nacked(deadLettered bool)
	Expired(deadLettered bool)
	TimedOut()
	AckWritten(latency time.Duration)
}

// newerEntryMetrics is redisdelay.NewerEntryMetrics.
type newerEntryMetrics interface {
	NewerEntry()
}

// subMetrics reports the deliveries of one subscription. A nil *subMetrics
// records nothing.
type subMetrics struct {
	rec SubscriptionMetrics

	// when each queued acknowledgement was made, in queue order (as the
	// ack queue's ready and redo ids); guarded by the ack queue's mu (acks)
	readyAt, redoAt []time.Time
}

// newSubMetrics returns what reports a subscription's deliveries to rec,
// or nil.
func newSubMetrics(rec SubscriptionMetrics) *subMetrics {
	if rec == nil {
		return nil
	}
	return &subMetrics{rec: rec}
}

// delivered records a message handed to a handler: its attempt and the
// time since its stream entry was added.
func (sm *subMetrics) delivered(attempt int, entryID string) {
	if sm == nil {
		return
	}
	lag := time.Duration(-1)
	ms, _, _ := strings.Cut(entryID, "-")
	if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
		lag = max(time.Since(time.UnixMilli(n)), 0)
	}
	sm.rec.Delivered(attempt, lag)
}

// newer records a stream entry of a newer release, handed back.
func (sm *subMetrics) newer() {
	if sm == nil {
		return
	}
	if n, ok := sm.rec.(newerEntryMetrics); ok {
		n.NewerEntry()
	}
}

// nacked records the outcome of a nack script: requeued or buried.
func (sm *subMetrics) nacked(outcome store.NackStatus) {
	if sm == nil || (outcome != store.NackRequeued && outcome != store.NackBuried) {
		return
	}
	sm.rec.Nacked(outcome == store.NackBuried)
}

// expired records a message settled unhandled, past its deadline.
func (sm *subMetrics) expired(deadLettered bool) {
	if sm == nil {
		return
	}
	sm.rec.Expired(deadLettered)
}

// timedOut records a handler that ran past its timeout.
func (sm *subMetrics) timedOut() {
	if sm == nil {
		return
	}
	sm.rec.TimedOut()
}

// ackQueued records when an acknowledgement was queued. The ack queue's
// mu is held.
func (sm *subMetrics) ackQueued(redo bool) {
	if sm == nil {
		return
	}
	if redo {
		sm.redoAt = append(sm.redoAt, time.Now())
	} else {
		sm.readyAt = append(sm.readyAt, time.Now())
	}
}

// acksWritten records the first ready and redo acknowledgements of the
// queue as written to Redis. The ack queue's mu is held.
func (sm *subMetrics) acksWritten(ready, redo int) {
	if sm == nil || ready+redo == 0 {
		return
	}
	// The time queues follow the id queues entry for entry; min guards
	// against a mismatch ever panicking.
	ready, redo = min(ready, len(sm.readyAt)), min(redo, len(sm.redoAt))
	now := time.Now()
	for _, at := range sm.readyAt[:ready] {
		sm.rec.AckWritten(now.Sub(at))
	}
	for _, at := range sm.redoAt[:redo] {
		sm.rec.AckWritten(now.Sub(at))
	}
	sm.readyAt = shiftTimes(sm.readyAt, ready)
	sm.redoAt = shiftTimes(sm.redoAt, redo)
}

func shiftTimes(ts []time.Time, n int) []time.Time {
	k := copy(ts, ts[n:])
	return ts[:k]
}
