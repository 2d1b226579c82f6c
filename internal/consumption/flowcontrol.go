package consumption

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/pause"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// flow is a subscription's flow control state (pause, rate limit,
// concurrency slots), held as subscription.flow. It needs no lock: it is
// the run goroutine's unless atomic or a channel. The group was paused at
// the last check, made at checked; unused is the messages of the last
// rate-limit reservation not fetched (negative: fetched beyond it), and
// reserved the end of that reservation (gate.lua). notified: a pause or
// resume was published (or the notifications resubscribed) since; wake
// wakes a paused subscription for it.
type flow struct {
	paused    bool
	checked   time.Time
	unused    int
	reserved  int64
	holdsSlot atomic.Bool   // a concurrency slot (renewed by lease renewal, see renewSlot)
	slotWake  chan struct{} // a slot was released; capacity 1
	notified  atomic.Bool
	wake      chan struct{} // capacity 1
}

// notify records that a pause change was published (or the notifications
// resubscribed), and wakes a subscription waiting for it.
func (f *flow) notify() {
	f.notified.Store(true)
	wakeUp(f.wake)
}

// woken is the channel that wakes a subscription for a pause change (see
// notify).
func (f *flow) woken() <-chan struct{} { return f.wake }

// slotReleased wakes a subscription waiting for a concurrency slot.
func (f *flow) slotReleased() { wakeUp(f.slotWake) }

// charge counts n messages fetched against the last rate-limit
// reservation: a read takes up to its count from each of its two streams,
// so an excess is charged to the next reservation.
func (f *flow) charge(n int) { f.unused -= n }

// learned records the pause state a check found now, and reports whether
// it changed.
func (f *flow) learned(paused bool) (changed bool) {
	f.checked = time.Now()
	if paused == f.paused {
		return false
	}
	f.paused = paused
	return true
}

// reserve records what a check reserved under a rate limit (limited): the
// messages and the end of the reservation, given back by the next check
// unless the read fetches them all; nothing without a limit.
func (f *flow) reserve(limited bool, count int, end int64) {
	f.unused, f.reserved = 0, 0
	if limited {
		f.unused, f.reserved = count, end
	}
}

// batch is how many messages a subscription reads at a time under the
// limit (none: batchSize): at most a tenth of the interval's messages, at
// least 1, so the one batch a burst may add stays within a tenth of the
// limit and averages over ten intervals within 1% of it.
func (l Rate) batch(batchSize int) int {
	if l.Messages <= 0 {
		return batchSize
	}
	return max(1, min(batchSize, (l.Messages+9)/10))
}

// concurrency is the concurrency cap of a topic (0: none).
func (c Config) concurrency(topic string) int {
	if n, ok := c.TopicConcurrency[topic]; ok {
		return n
	}
	return c.Concurrency
}

// takeSlot waits for one of the group's concurrency slots on the topic
// (see SubscriberConfig.Concurrency), asking again when one is released
// and at least every second (the queue forgets a waiter silent for 3 s);
// false when ctx ended first. Without a cap it returns at once.
func (sub *subscription) takeSlot(ctx context.Context) bool {
	s := sub.s
	limit := s.config.concurrency(sub.topic)
	if limit == 0 {
		return true
	}
	sub.order.enter(phaseWait) // for the group's other handlers
	sh := s.config.Keys.Shard(sub.topic, 0)
	for failures := 0; ; {
		opCtx, cancel := context.WithTimeout(ctx, opTimeout)
		held, err := store.Slot(opCtx, s.redis, sh, s.config.ConsumerGroup, "take", sub.slotHolder(), limit, 3*sub.renewEvery())
		cancel()
		if ctx.Err() != nil {
			return false
		}
		wait := time.Second
		switch {
		case err != nil:
			failures++
			wait = pause.Backoff(failures, 2*time.Second)
			s.limiter.Errorf(s.logger, "redisdelay: cannot take a concurrency slot; retrying", err, sub.fields())
		case held:
			sub.flow.holdsSlot.Store(true)
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-sub.flow.slotWake:
		case <-t.C:
		}
		t.Stop()
	}
}

// slotHolder names the subscription in the group's concurrency slots: its
// consumer name is shared by the partitions of one Subscribe.
func (sub *subscription) slotHolder() string {
	return sub.consumer + "/" + strconv.Itoa(sub.part)
}

// renewSlot extends, with the leases (see renewLeases), the lease of the
// concurrency slot the subscription holds, if any.
func (sub *subscription) renewSlot(ctx context.Context) error {
	if !sub.flow.holdsSlot.Load() {
		return nil
	}
	s := sub.s
	group := s.config.ConsumerGroup
	if _, err := store.Slot(ctx, s.redis, s.config.Keys.Shard(sub.topic, 0), group, "renew", sub.slotHolder(), 0, 3*sub.renewEvery()); err != nil {
		return fmt.Errorf("renew the lease of a concurrency slot: %w", err)
	}
	return nil
}

// releaseSlot gives back the concurrency slot the subscription holds, if
// any; one that cannot be given back lapses after its lease.
func (sub *subscription) releaseSlot() {
	if !sub.flow.holdsSlot.Swap(false) {
		return
	}
	s := sub.s
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err := store.Slot(ctx, s.redis, s.config.Keys.Shard(sub.topic, 0), s.config.ConsumerGroup, "release", sub.slotHolder(), 0, 0)
	if err != nil && !store.IsClientClosed(err) {
		s.limiter.Errorf(s.logger, "redisdelay: cannot give back a concurrency slot; it lapses after VisibilityTimeout", err, sub.fields())
	}
}

// rateLimit is the limit of a topic (zero: none).
func (c Config) rateLimit(topic string) Rate {
	if l, ok := c.TopicRateLimits[topic]; ok {
		return l
	}
	return c.RateLimit
}

// gate decides, before a read of new messages, whether the group is paused
// and what its rate limit allows, and waits what that says. It returns how
// many messages to read (0: paused, or ctx ended: read nothing now); an
// error is handled as a failed read.
//
// With a rate limit it asks Redis every time (gate.lua). Without one it
// asks only when it must: while paused (once per BlockTime, or when told
// of a resume), when told of a pause change (see listen), and once per
// BlockTime otherwise, for a notification that was lost (a subscriber
// reconnecting, or a Pause by a version that did not send one); then a
// plain EXISTS of the pause flag does.
func (sub *subscription) gate(ctx context.Context) (count int, err error) {
	s, f := sub.s, &sub.flow
	limit := s.config.rateLimit(sub.topic)
	want := limit.batch(s.config.BatchSize)
	notified := f.notified.Swap(false)
	checkDue := time.Since(f.checked) >= s.config.BlockTime
	if limit.Messages == 0 && !f.paused && !notified && !checkDue {
		return want, nil
	}
	sh := s.config.Keys.Shard(sub.topic, 0)
	var r store.GateReply
	if limit.Messages > 0 {
		r, err = store.Gate(ctx, s.redis, sh, store.GateArgs{Group: s.config.ConsumerGroup, LimitMessages: limit.Messages, LimitPer: limit.Per,
			Want: want, Unused: f.unused, Reserved: f.reserved})
	} else {
		r.Count = want
		r.Paused, err = store.Paused(ctx, s.redis, sh, s.config.ConsumerGroup)
	}
	if err != nil {
		if notified {
			f.notified.Store(true) // still to be checked
		}
		return 0, fmt.Errorf("check whether the group is paused or rate limited: %w", err)
	}
	if f.learned(r.Paused) {
		what := "redisdelay: consumer group resumed; fetching messages again"
		if r.Paused {
			what = "redisdelay: consumer group paused (Inspector.Pause); fetching no messages until it is resumed"
		}
		s.logger.Info(what, sub.fields())
	}
	if r.Paused {
		// Checked again when a change is published, else once per
		// BlockTime.
		t := time.NewTimer(s.config.BlockTime)
		defer t.Stop()
		sub.order.enter(phaseWait)
		select {
		case <-ctx.Done():
		case <-f.wake:
		case <-t.C:
		}
		return 0, nil
	}
	// Given back by the next call unless the read fetches them all (or
	// another reservation came after this one).
	f.reserve(limit.Messages > 0, r.Count, r.End)
	if r.Wait > 0 {
		sub.order.enter(phaseWait)
		pause.Sleep(ctx, r.Wait)
	}
	if ctx.Err() != nil {
		return 0, nil
	}
	return r.Count, nil
}
