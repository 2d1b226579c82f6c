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
