package consumption

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/pause"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// settle runs a nack (or dead-lettering) until Redis takes it, so the next
// message is delivered only after the previous one is settled (acks are
// queued instead: see acker.go). It tries at least once;
// if the subscription ends (ctx) or the client is closed first, the entry
// stays pending and is handed back or reclaimed: delivered again, never lost.
func (sub *subscription) settle(ctx context.Context, op func(context.Context) error) {
	for failures := 1; ; failures++ {
		opCtx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := op(opCtx)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
			sub.s.limiter.Errorf(sub.s.logger, "redisdelay: cannot settle message; it stays pending and is delivered again", err,
				sub.fields())
			return
		}
		wait := pause.Backoff(failures, 2*time.Second)
		sub.s.limiter.Errorf(sub.s.logger, "redisdelay: cannot settle message; retrying", err,
			sub.fields().Add(watermill.LogFields{"retry_in": wait.String()}))
		pause.Sleep(ctx, wait)
	}
}

// notPending logs a settlement of an entry that was no longer pending for
// the group: reclaimed after its lease ran out, handed back, or settled by a
// retry whose first reply was lost. In the first two cases it is delivered
// again.
func (sub *subscription) notPending(e entry, what string) {
	sub.s.logger.Info("redisdelay: "+what+" of a message no longer pending (reclaimed or handed back; it may be delivered again)",
		sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID}))
}

// nackKind is why an entry is nacked.
type nackKind int

// settleNack requeues a delivered entry for the group, or buries it in the
// dead letters when reason is set.
func (sub *subscription) settleNack(ctx context.Context, e entry, attempt int, delay time.Duration, body []byte, reason string, kind nackKind) error {
	s := sub.s
	a := store.NackArgs{
		Group: s.config.ConsumerGroup, Stream: e.stream, Id: e.msg.ID, Redo: e.redo,
		Attempt: attempt, Delay: delay, Body: body, Reason: reason, MaxDead: s.config.MaxDeadLetters,
		KeepAttempt: kind == nackSnoozed,
	}
	if kind == nackExpired {
		a.Attempt-- // the dead letter counts the deliveries it had: not this one
	}
	r, err := store.Nack(ctx, s.redis, sub.shard, a)
	if err != nil {
		return fmt.Errorf("nack entry %s: %w", e.msg.ID, err)
	}
	switch kind {
	case nackFailed:
		sub.m.nacked(r.Status)
	case nackExpired:
		if r.Status == store.NackBuried {
			sub.m.expired(true)
		}
	}
	fields := sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "attempt": attempt})
	switch {
	case r.Status == store.NackNotPending:
		sub.notPending(e, "Nack")
	case r.Status == store.NackBuried && kind == nackExpired:
		s.logger.Info("redisdelay: message expired; moved to the dead letters", fields.Add(watermill.LogFields{"reason": reason}))
	case r.Status == store.NackBuried:
		s.logger.Error("redisdelay: message moved to the dead letters", errors.New(reason), fields)
	}
	if r.Evicted > 0 {
		s.logger.Error("redisdelay: dead letters full (MaxDeadLetters); evicted the oldest", nil,
			fields.Add(watermill.LogFields{"evicted": r.Evicted}))
	}
	return nil
}

// release hands back to the group everything still pending for this
// consumer (prefetched, or delivered and not acked) and removes the
// consumer; or, given an entry to keep (stream index and id), everything
// but that entry, leaving the consumer in place. Errors are logged.
// releaseBatch is how many entries per stream one release.lua call hands
// back: a bounded call (grouped messages cost more, see fair.lua).
const releaseBatch = 256

func (sub *subscription) release(keepStream, keepID string) error {
	s := sub.s
	group := s.config.ConsumerGroup
	fields := sub.fields()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for {
		r, err := store.Release(ctx, s.redis, sub.shard, group, sub.consumer, releaseBatch, keepStream, keepID)
		if err != nil {
			if !store.IsClientClosed(err) {
				s.logger.Error("redisdelay: cannot hand back pending messages; they stay with this consumer until read again or reclaimed", err, fields)
			}
			return err
		}
		if r.Missing > 0 {
			s.logger.Error("redisdelay: pending entries without content were dropped", nil, fields.Add(watermill.LogFields{"count": r.Missing}))
		}
		if r.Released > 0 {
			s.logger.Debug("redisdelay: handed back pending messages", fields.Add(watermill.LogFields{"count": r.Released}))
		}
		if r.Done {
			return nil
		}
	}
}
