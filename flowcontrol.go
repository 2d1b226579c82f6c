package redisdelay

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

// RateLimit is a number of messages per interval: see
// SubscriberConfig.RateLimit.
type RateLimit struct {
	Messages int
	Per      time.Duration
}

func (l RateLimit) validate(what string) error {
	if l.Messages < 1 || l.Messages > 1_000_000 {
		return fmt.Errorf("redisdelay: %s.Messages is %d: use 1 to 1,000,000 messages per %s "+
			"(leave the whole RateLimit zero for no limit)", what, l.Messages, l.Per)
	}
	if l.Per < time.Millisecond || l.Per%time.Millisecond != 0 || l.Per > 24*time.Hour {
		return fmt.Errorf("redisdelay: %s.Per is %s: use whole milliseconds from 1ms to 24h (e.g. time.Second)", what, l.Per)
	}
	return nil
}

// batch is how many messages a subscription reads at a time under the
// limit (none: batchSize): at most a tenth of the interval's messages, at
// least 1, so the one batch a burst may add stays within a tenth of the
// limit and averages over ten intervals within 1% of it.
func (l RateLimit) batch(batchSize int) int {
	if l.Messages <= 0 {
		return batchSize
	}
	return max(1, min(batchSize, (l.Messages+9)/10))
}

// concurrency is the concurrency cap of a topic (0: none).
func (c SubscriberConfig) concurrency(topic string) int {
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
	sh := s.keys.Shard(sub.topic, 0)
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
	if _, err := store.Slot(ctx, s.redis, s.keys.Shard(sub.topic, 0), group, "renew", sub.slotHolder(), 0, 3*sub.renewEvery()); err != nil {
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
	_, err := store.Slot(ctx, s.redis, s.keys.Shard(sub.topic, 0), s.config.ConsumerGroup, "release", sub.slotHolder(), 0, 0)
	if err != nil && !store.IsClientClosed(err) {
		s.limiter.Errorf(s.logger, "redisdelay: cannot give back a concurrency slot; it lapses after VisibilityTimeout", err, sub.fields())
	}
}

// rateLimit is the limit of a topic (zero: none).
func (c SubscriberConfig) rateLimit(topic string) RateLimit {
	if l, ok := c.TopicRateLimits[topic]; ok {
		return l
	}
	return c.RateLimit
}

// Pause stops the consumer group's subscribers, in every process, from
// fetching new messages of the topic, until Resume. Messages keep
// becoming due and accumulate (Ready in Stats grows); messages already
// fetched are still delivered, and so may be one batch of a read that
// was returning when Pause ran. The pause is stored in Redis: it
// outlasts subscriber restarts, and a group may be paused before it
// exists. Subscribers are told on a pub/sub channel and stop reading at
// once (a subscriber that missed it, e.g. reconnecting, checks at least
// once per BlockTime). Pausing a paused group is a no-op.
func (i *Inspector) Pause(ctx context.Context, topic, group string) error {
	if err := i.validateGroup(topic, group); err != nil {
		return err
	}
	err, notifyErr := store.Pause(ctx, i.client, i.keys.Shard(topic, 0), group)
	if err == nil {
		err = notified(notifyErr)
	}
	return wrapErr(err, "pause group %q of topic %q", group, topic)
}

// Resume lets a paused consumer group fetch messages of the topic again:
// its subscribers are told as by Pause and fetch at once (at the latest
// within their BlockTime). It reports whether the group was paused.
func (i *Inspector) Resume(ctx context.Context, topic, group string) (bool, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return false, err
	}
	was, err, notifyErr := store.Resume(ctx, i.client, i.keys.Shard(topic, 0), group)
	if err == nil {
		err = notified(notifyErr)
	}
	return was, wrapErr(err, "resume group %q of topic %q", group, topic)
}

// notified returns the error of the PUBLISH of Pause or Resume: the
// change holds without it, and subscribers see it within their BlockTime.
func notified(err error) error {
	if err != nil {
		return fmt.Errorf("the change is stored, but telling the subscribers failed (they see it within their BlockTime): %w", err)
	}
	return nil
}

// Paused reports whether the consumer group is paused on the topic.
func (i *Inspector) Paused(ctx context.Context, topic, group string) (bool, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return false, err
	}
	paused, err := store.Paused(ctx, i.client, i.keys.Shard(topic, 0), group)
	return paused, wrapErr(err, "check whether group %q of topic %q is paused", group, topic)
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
	sh := s.keys.Shard(sub.topic, 0)
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
