package consumption

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/balance"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// ordering is an ordered subscription's state (see Ordered), held as
// subscription.order; a subscription that is not ordered has none (nil:
// it owns nothing, loses nothing, and enter does nothing). It needs no
// lock: declined is the run goroutine's, the rest is atomic or a channel,
// shared by the run goroutine and lease renewal.
type ordering struct {
	bal      *balance.Balance // shared with the topic's other partitions
	owns     atomic.Bool      // this subscription owns its partition
	lost     atomic.Bool      // set by lease renewal when the ownership ran out (see lose)
	declined bool             // own skipped a take last time (run goroutine only)
	phase    atomic.Int64     // what the run goroutine is doing, and since when (see enter and stuck)
	unstick  chan struct{}    // wakes a send to out once the partition is lost, so that it is given up; capacity 1
}

// newOrdering returns the ordering state of a subscription sharing bal
// with the topic's other partitions: nil, for a subscription that is not
// ordered, without one.
func newOrdering(bal *balance.Balance) *ordering {
	if bal == nil {
		return nil
	}
	return &ordering{bal: bal, unstick: make(chan struct{}, 1)}
}

// Ordered subscriptions (SubscriberConfig.Ordered). One consumer of a group
// at a time owns a partition of a topic and is the only one reading it,
// so the partition's messages, and with them all messages of one
// PartitionKey, are handled one at a time in the order they became due. A
// nacked message is retried in place, before the partition's later
// messages. Ownership is a lease in Redis (own.lua), renewed with the
// message leases; an owner that dies loses it when it expires, and the
// next owner first takes over what the old one held. Ordered
// subscriptions of a group share the partitions evenly: each keeps a
// heartbeat in the group's member list (members.lua) and owns at most
// partitions / members (rounded up), giving surplus partitions up when
// members join.

// ownLease is how long a partition's ownership lasts without renewal. The
// owner renews it with its message leases, every third of the visibility
// timeout; a dead owner's partition is taken over after at most this, so
// before its messages' visibility timeout ends (which would hand them to
// the retry set and out of order).
func (s *Subscriber) ownLease() time.Duration {
	return 2 * s.config.VisibilityTimeout / 3
}

// join adds an ordered subscription to its group's member list, so it and
// the others know their share of the partitions before any is taken, and
// returns the heartbeat that keeps it there until ctx ends, then removes
// it. member is the consumer name of the Subscribe call.
func (s *Subscriber) join(ctx context.Context, o *balance.Balance, topic, member string) (heartbeat func()) {
	sh := s.config.Keys.Shard(topic, 0)
	k := store.GroupMembers(sh, s.config.ConsumerGroup)
	beat := func(ctx context.Context, ttl time.Duration) {
		ctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		if err := o.Beat(ctx, s.redis, k, member, ttl); err != nil && ttl > 0 && ctx.Err() == nil && !store.IsClientClosed(err) {
			s.limiter.Errorf(s.logger, "redisdelay: cannot renew the membership of an ordered subscription; partitions may be shared unevenly", err, nil)
		}
	}
	beat(ctx, s.ownLease())
	return func() {
		t := time.NewTicker(heartbeatEvery(s.ownLease()))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				beat(context.Background(), 0)
				return
			case <-t.C:
			}
			if o.Benched() {
				beat(ctx, 0)
			} else {
				beat(ctx, s.ownLease())
			}
		}
	}
}

// orderedPace is how often an ordered subscription checks its share of
// the partitions: one that does not own its partition tries to take it,
// one that does whether it must give it up (its reads block no longer).
// BlockTime, at most a second.
func (s *Subscriber) orderedPace() time.Duration {
	return min(s.config.BlockTime, time.Second)
}

// heartbeatEvery is how often an ordered subscription renews its
// membership: often enough that members learn of one that joined within a
// second or so, and three times per lease at least.
func heartbeatEvery(lease time.Duration) time.Duration {
	return min(lease/3, time.Second)
}

// own is called by an ordered subscription before each read. It reports
// whether the subscription owns its partition now, taking it when it is
// free and the subscription's share allows, and giving it up when the
// subscription owns more than its share; taken is true when it was just
// taken (the subscription then reads what it holds first).
func (sub *subscription) own(ctx context.Context) (owns, taken bool, err error) {
	o, s := sub.order, sub.s
	if o.dropLost() {
		s.logger.Info("redisdelay: no longer owns its partition (its lease ran out, or it was given up as stuck); another consumer takes it over", sub.fields())
	}
	if o.owns.Load() {
		if o.surplus() {
			sub.disown()
			s.logger.Debug("redisdelay: gave up a partition for a new member of the group", sub.fields())
			return false, false, nil
		}
		return true, false, nil
	}
	if !o.mayTake() {
		return false, false, nil
	}
	st, err := sub.ownOp(ctx, store.OwnTake)
	if err != nil || st == store.NotOwner {
		return false, false, err
	}
	o.took()
	s.logger.Debug("redisdelay: took over a partition", sub.fields())
	return true, true, nil
}

// dropLost records that a partition lost (see lose) is no longer owned,
// and reports whether it was.
func (o *ordering) dropLost() bool {
	if o.lost.Swap(false) && o.owns.Load() {
		o.owns.Store(false)
		o.bal.Owned().Add(-1)
		return true
	}
	return false
}

// surplus reports whether an owner is to give its partition up, the
// member owning more than its share (see balance.Balance.Surplus); it then counts
// the partition as given up (the caller disowns it).
func (o *ordering) surplus() bool {
	cur := o.bal.Owned().Load()
	return o.bal.Surplus(cur) && o.bal.Owned().CompareAndSwap(cur, cur-1)
}

// mayTake reports whether the subscription may try to take its free
// partition now (see balance.Balance.MayTake), remembering a decline for the next
// time.
func (o *ordering) mayTake() bool {
	if o.bal.Benched() || !o.bal.MayTake(o.bal.Owned().Load(), o.declined) {
		o.declined = true
		return false
	}
	o.declined = false
	return true
}

// took records that the subscription took its partition.
func (o *ordering) took() {
	o.owns.Store(true)
	o.bal.Owned().Add(1)
}

// owning reports whether the subscription owns its partition (false for
// one that is not ordered).
func (o *ordering) owning() bool {
	return o != nil && o.owns.Load()
}

// isLost reports whether the partition was lost (see lose) and own has
// not seen it yet (false for a subscription that is not ordered).
func (o *ordering) isLost() bool {
	return o != nil && o.lost.Load()
}

// disown hands back what the subscription holds and drops its ownership,
// so the next owner starts with it.
func (sub *subscription) disown() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := sub.drainAcks(ctx); err != nil && !store.IsClientClosed(err) {
		sub.s.logger.Error("redisdelay: cannot write acknowledgements to Redis; acked messages may be delivered again", err, sub.fields())
	}
	_ = sub.release("", "")
	if _, err := sub.ownOp(ctx, store.OwnDrop); err != nil && !store.IsClientClosed(err) {
		sub.s.logger.Error("redisdelay: cannot give up the ownership of a partition; another consumer takes it over when it expires", err, sub.fields())
	}
	sub.order.owns.Store(false)
}

// claimBatch is how many pending entries one own.lua call claims when a
// partition is taken over: a few ms of Redis time.
const claimBatch = 1000

// ownOp runs own.lua for the subscription's partition. A take claims the
// previous owner's pending entries over as many calls as it needs.
func (sub *subscription) ownOp(ctx context.Context, op store.OwnOp) (store.OwnStatus, error) {
	s, group := sub.s, sub.s.config.ConsumerGroup
	lease := s.ownLease()
	a := store.OwnArgs{Group: group, Consumer: sub.consumer, Lease: lease, Op: op, Batch: claimBatch}
	r, err := store.Own(ctx, s.redis, sub.shard, a)
	for err == nil && op == store.OwnTake && r.Status != store.NotOwner && r.Next.Stream != 0 {
		a.Op, a.Pos = store.OwnClaim, r.Next
		r, err = store.Own(ctx, s.redis, sub.shard, a)
	}
	if err != nil {
		return 0, err
	}
	return r.Status, nil
}

// Liveness. An owner must be reading its partition, or give it up: the
// lease renewal, which runs beside the reads, renews the ownership only
// while the run goroutine makes progress (see stuck). Otherwise a
// goroutine stuck anywhere, or an application that stopped receiving from
// the Subscribe channel, would hold the partition, renewed, for as long as
// the process lives. Kafka bounds the same with max.poll.interval.ms.

// What an ordered subscription's run goroutine is doing (see enter).
const (
	phaseStep int64 = iota // reading, settling: Redis calls bounded by opTimeout
	phaseWait              // a wait with a bound of its own or wanted: a handler (HandlerTimeout), a retry delay, the pause, the rate limit, a concurrency slot
	phaseSend              // handing a message out: waiting for the application to receive it
)

// enter records that the run goroutine of an ordered subscription enters
// phase now; time and phase are one value, read together by stuck. It does
// nothing for a subscription that is not ordered (nil).
func (o *ordering) enter(phase int64) {
	if o != nil {
		o.phase.Store(time.Now().UnixMilli()<<2 | phase)
	}
}

// stuck reports whether an owner's run goroutine made no progress where
// it should have, and for how long: a step (which takes a few Redis calls)
// unfinished after half the ownership lease (a second at least), or a
// message the application has not received within
// SubscriberConfig.HandlerTimeout (and that bound): it is busy with
// others past that timeout. Half the lease, checked every third of the
// visibility timeout, gives the partition up within a lease. lease is the
// ownership lease (Subscriber.ownLease), handlerTimeout
// SubscriberConfig.HandlerTimeout.
func (o *ordering) stuck(lease, handlerTimeout time.Duration) (time.Duration, bool) {
	v := o.phase.Load()
	since := time.Since(time.UnixMilli(v >> 2))
	bound := max(lease/2, time.Second)
	switch v & 3 {
	case phaseStep:
		return since, since > bound
	case phaseSend:
		return since, handlerTimeout > 0 && since > max(handlerTimeout, bound)
	}
	return since, false
}

// phaseName names a phase in logs.
func phaseName(v int64) string {
	switch v & 3 {
	case phaseStep:
		return "reading"
	case phaseSend:
		return "handing a message to the application, which did not receive it"
	}
	return "waiting"
}

// lose records that the partition is no longer the subscription's: its
// next read checks the ownership again, a send waiting for the application
// is given up (the new owner delivers that message), and renewals stop
// extending the leases of what it fetched.
func (o *ordering) lose() {
	o.lost.Store(true)
	wakeUp(o.unstick)
}

// abandon gives up the partition of an owner that is stuck (see stuck):
// the acks it queued go to Redis, the ownership is dropped for another
// member to take over (with the messages it held), and its Subscribe call
// leaves the member list for a while (see balance.Balance.Bench).
func (sub *subscription) abandon(ctx context.Context, since time.Duration) {
	s := sub.s
	s.logger.Error("redisdelay: an ordered subscription made no progress on its partition; giving the partition up so that another consumer of the group reads it", nil,
		sub.fields().Add(watermill.LogFields{"doing": phaseName(sub.order.phase.Load()), "for": since.Round(time.Millisecond).String()}))
	if err := sub.drainAcks(ctx); err != nil && !store.IsClientClosed(err) {
		s.logger.Error("redisdelay: cannot write acknowledgements to Redis; acked messages may be delivered again", err, sub.fields())
	}
	sub.order.lose()
	sub.order.bal.Bench(s.ownLease())
	if _, err := sub.ownOp(ctx, store.OwnDrop); err != nil && !store.IsClientClosed(err) {
		s.logger.Error("redisdelay: cannot give up the ownership of a stuck partition; another consumer takes it over when it expires", err, sub.fields())
	}
}

// renewOwnership renews, with the leases (see renewLeases), the ownership
// of an owner's partition, or gives the partition up when the owner is
// stuck (abandoned). Without a partition owned (or not ordered) it does
// nothing.
func (sub *subscription) renewOwnership(ctx context.Context) (abandoned bool, err error) {
	o := sub.order
	if !o.owning() || o.isLost() {
		return false, nil
	}
	if since, stuck := o.stuck(sub.s.ownLease(), sub.s.config.HandlerTimeout); stuck {
		sub.abandon(ctx, since)
		return true, nil
	}
	st, err := sub.ownOp(ctx, store.OwnRenew)
	if err != nil {
		return false, fmt.Errorf("renew the ownership of the partition: %w", err)
	}
	if st == store.NotOwner {
		o.lose()
	}
	return false, nil
}

// handOutOwned is handOut for an ordered subscription: it gives the send
// up once the partition is lost (see lose).
func (sub *subscription) handOutOwned(ctx context.Context, msg *message.Message) bool {
	o := sub.order
	o.enter(phaseSend)
	for !o.lost.Load() {
		select {
		case sub.out <- msg:
			sub.handedAt.Store(time.Now().UnixNano())
			o.bal.Handed()
			return true
		case <-ctx.Done():
			return false
		case <-o.unstick:
		}
	}
	return false
}

// takeOwnership makes an ordered subscription own its partition before it
// reads (see own); a partition just taken over is read from its pending
// entries first.
func (sub *subscription) takeOwnership(ctx context.Context, pos *readPos) (owns, stop bool) {
	owns, taken, err := sub.own(ctx)
	if err != nil {
		if sub.ended(ctx, err) {
			return false, true
		}
		sub.s.limiter.Errorf(sub.s.logger, "redisdelay: cannot take the ownership of a partition; retrying", err, sub.fields())
	}
	if owns && taken {
		pos.rewind()
	}
	return owns, false
}
