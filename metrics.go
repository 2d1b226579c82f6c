package redisdelay

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
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
