package redisdelay

import (
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Metrics receives what the Publishers, Subscribers and Managers (and
// Subscribers' embedded schedulers) it is given to observe, through the
// Metrics field of their configs. The prommetrics package implements it
// with Prometheus (prommetrics.New); a nil Metrics (the default) records
// nothing and costs nothing. The core does not depend on any metrics
// library, so only programs that opt in link one.
//
// The methods are called on the hot paths, from many goroutines: they must
// be safe for concurrent use, must not block, and should not allocate.
// A duration argument is negative when it could not be measured.
type Metrics interface {
	// Published is called when a Publish call returns: took is its
	// duration and err its result. When err is nil, delayed messages were
	// stored to wait for their due time and immediate ones for consumers
	// at once (both 0 for a call without messages).
	Published(topic string, took time.Duration, delayed, immediate int, err error)

	// Subscription returns what records the deliveries of one subscription
	// (a partition of topic read for consumerGroup). It is called once per
	// partition at each Subscribe; nil records nothing.
	Subscription(topic, consumerGroup string) SubscriptionMetrics

	// Promoted is called when a scheduler of this process moved moved (> 0)
	// messages of topic from a waiting or retry set to where consumers read
	// them, as they became due. late is how long after the due time Redis
	// reported for the earliest of them, at the previous tick, it moved
	// them (host clock; negative when not measured, e.g. on a partition's
	// first tick).
	Promoted(topic string, moved int, late time.Duration)

	// Reclaimed is called when a scheduler of this process took messages
	// back from consumers of consumerGroup that stopped responding:
	// requeued for another attempt, deadLettered on their last attempt.
	// At least one of the two is > 0.
	Reclaimed(topic, consumerGroup string, requeued, deadLettered int)
}

// SubscriptionMetrics records the deliveries of one subscription; see
// Metrics.Subscription. The same rules apply.
type SubscriptionMetrics interface {
	// Delivered is called when a message was handed to a handler, on its
	// attempt-th attempt (1 the first, more after a Nack or a reclaim).
	// lag is the time from its becoming ready in Redis (its stream entry
	// ID, Redis clock) to the hand-off (host clock), at least 0.
	Delivered(attempt int, lag time.Duration)

	// Nacked is called when a Nack was written: the message was requeued
	// for another attempt, or moved to the dead letters (its last attempt,
	// or an entry that could not be decoded).
	Nacked(deadLettered bool)

	// Expired is called when a message was not handed to a handler because
	// its deadline (ExpiresAtKey) had passed: moved to the dead letters
	// (deadLettered), or dropped (SubscriberConfig.ExpiredMessages). It is
	// not also counted by Nacked.
	Expired(deadLettered bool)

	// TimedOut is called when a handler did not Ack or Nack a message
	// within its timeout (SubscriberConfig.HandlerTimeout): its delivery
	// counts as a failed attempt, recorded by Nacked as well when it is
	// requeued or dead-lettered (an Ordered subscription retries it in
	// place instead).
	TimedOut()

	// AckWritten is called for each Ack once written to Redis, latency
	// after the handler's Ack (acks are written in batches, in the
	// background).
	AckWritten(latency time.Duration)
}

// NewerEntryMetrics is implemented by a SubscriptionMetrics that also
// counts the stream entries a newer release wrote (a storage level above
// this release's), which the subscription handed back for a process that
// reads them rather than dead-lettering them (see docs/upgrading.md).
// prommetrics' does.
type NewerEntryMetrics interface {
	NewerEntry()
}

// observePublish reports to m a Publish call that started at start and
// ended with *err.
func observePublish(m Metrics, topic string, messages []*message.Message, start, now time.Time, err *error) {
	took := time.Since(start)
	if *err != nil {
		m.Published(topic, took, 0, 0, *err)
		return
	}
	delayed := 0
	for _, msg := range messages {
		if d, _ := meta.Delay(msg.Metadata, now); d > 0 {
			delayed++
		}
	}
	m.Published(topic, took, delayed, len(messages)-delayed, nil)
}

// subMetrics reports the deliveries of one subscription. A nil *subMetrics
// records nothing.
type subMetrics struct {
	rec SubscriptionMetrics

	// when each queued acknowledgement was made, in queue order (as the
	// ack queue's ready and redo ids); guarded by the ack queue's mu (acks)
	readyAt, redoAt []time.Time
}

// newSubMetrics returns what reports a subscription's deliveries to m, or
// nil.
func newSubMetrics(m Metrics, topic, group string) *subMetrics {
	if m == nil {
		return nil
	}
	rec := m.Subscription(topic, group)
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
	if n, ok := sm.rec.(NewerEntryMetrics); ok {
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
