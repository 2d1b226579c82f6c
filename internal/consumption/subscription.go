package consumption

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/levels"
	"github.com/redisdelay/watermill-redisdelay/internal/pause"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// subscription is one consumer of a consumer group.
type subscription struct {
	s        *Subscriber
	topic    string
	part     int         // partition of the topic
	shard    store.Shard // its keys
	consumer string
	lvl      *levels.Holder        // the storage level a nack or expiry writes
	out      chan *message.Message // shared by the topic's partitions

	// What the subscription holds, for lease renewal and for handing back
	// what waits behind a slow handler (see renewLeases). mu serialises
	// handing out the next message with that hand-back, and guards batch,
	// handling, since and recheck. An acked entry leaves the batch for the
	// ack queue under mu (see settled), and only so enters the queue:
	// whoever holds mu sees every held entry in one or the other, and the
	// queue cannot grow meanwhile. Lock order: mu, then the ack queue's
	// own (acks.mu); flushMu (a write of the queue) is never taken under
	// either.
	mu       sync.Mutex
	batch    []entry   // fetched, not settled; batch[0] is handled or next
	handling bool      // a handler has batch[0]
	since    time.Time // when it got it
	// handedAt is when the application took batch[0] from the channel
	// (UnixNano; 0: not yet), for the handler report (see reportDue).
	handedAt atomic.Int64
	recheck  bool // Redis holds entries for this consumer it did not receive

	deadline *time.Timer // the handler's (see startDeadline; run goroutine only)

	// The state of each concern, declared beside its code; each type's
	// doc says what guards it. Only acks has a lock of its own: the others
	// are the run goroutine's, or atomic.
	acks   acks      // acker.go: acked entries not yet acknowledged in Redis
	leases leases    // lease.go: renewal of what the subscription holds
	reads  reads     // fetch.go: reads of new messages, and the bell
	flow   flow      // flowcontrol.go: pause, rate limit, concurrency slots
	order  *ordering // ordered.go: the partition's ownership, for Ordered; nil if not ordered

	m *subMetrics // nil without SubscriberConfig.Metrics
}

// entry is a message read from one of the two streams a consumer reads:
// the topic's ready stream and its group's redelivery stream.
type entry struct {
	stream string
	redo   bool
	msg    store.Entry
}

// run reads and delivers the subscription's messages until ctx ends or
// the client is closed, then hands back what it holds. A message goes
// through three stages: fetch (fetch.go: the gate, then a read that also
// writes the queued acks), hand-out and settle (delivery.go), and the ack
// queue (acker.go), written by the next read or the acker. An ordered
// subscription first makes sure it owns its partition (ordered.go).
func (sub *subscription) run(ctx context.Context) {
	sub.s.logger.Debug("redisdelay: subscribed", sub.fields())
	defer sub.listen()()
	defer sub.startBackground().stop()

	pos := readPos{cursor: fromStart}
	for ctx.Err() == nil {
		if sub.order != nil {
			sub.order.enter(phaseStep)
			owns, stop := sub.takeOwnership(ctx, &pos)
			if stop {
				return
			}
			if !owns {
				pause.Sleep(ctx, sub.s.orderedPace())
				continue
			}
		}
		entries, stop := sub.fetch(ctx, &pos)
		if stop {
			return
		}
		if !sub.deliverAll(ctx, entries, &pos) {
			return
		}
		if sub.takeRecheck() {
			// A read whose reply was lost (go-redis retried it on a new
			// connection) left entries pending for this consumer.
			pos.rewind()
		}
	}
}

func (sub *subscription) takeRecheck() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	r := sub.recheck
	sub.recheck = false
	return r
}

// ended reports whether the subscription must stop after err: its ctx
// ended, or the client was closed under it (the Subscriber is told).
func (sub *subscription) ended(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	if store.IsClientClosed(err) {
		sub.s.config.ClientGone(sub.topic)
		return true
	}
	return false
}

// background is the lease renewal and the acker of a subscription, which
// run beside its reads.
type background struct {
	sub                 *subscription
	stopLease, stopAcks context.CancelFunc
	leaseDone, ackDone  chan struct{}
}

// startBackground starts the lease renewal and the acker. The lease
// outlives the subscription's ctx: a handler finishing during Close keeps
// its message until the final hand-back, which waits for the renewals to
// stop so none runs after it.
func (sub *subscription) startBackground() *background {
	b := &background{sub: sub, leaseDone: make(chan struct{}), ackDone: make(chan struct{})}
	var leaseCtx, ackCtx context.Context
	leaseCtx, b.stopLease = context.WithCancel(context.Background())
	go func() {
		defer close(b.leaseDone)
		sub.extendLeases(leaseCtx)
	}()
	ackCtx, b.stopAcks = context.WithCancel(context.Background())
	go func() {
		defer close(b.ackDone)
		sub.ackLoop(ackCtx)
	}()
	return b
}

// stop ends the acker and the lease renewal, then hands back what the
// subscription holds. The acks go to Redis before the hand-back, which
// would otherwise return acked messages to the group.
func (b *background) stop() {
	sub, s := b.sub, b.sub.s
	b.stopAcks()
	<-b.ackDone
	flushCtx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err := sub.drainAcks(flushCtx)
	cancel()
	if err != nil && !store.IsClientClosed(err) {
		s.logger.Error("redisdelay: cannot write acknowledgements to Redis before closing; those messages stay pending and are delivered again", err,
			sub.fields().Add(watermill.LogFields{"count": sub.acks.count()}))
	}
	b.stopLease()
	<-b.leaseDone
	if sub.order.owning() {
		sub.disown()
	} else {
		_ = sub.release("", "")
	}
}

// fields identify the subscription in logs.
func (sub *subscription) fields() watermill.LogFields {
	f := watermill.LogFields{"topic": sub.topic, "consumer_group": sub.s.config.ConsumerGroup, "consumer": sub.consumer}
	if sub.part > 0 {
		f["partition"] = sub.part
	}
	return f
}
