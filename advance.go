package redisdelay

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/advance"
	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Moving a topic's clock forward, for tests (package redisdelaytest): the
// stored due times are moved earlier, so that what would happen d later
// happens now. Nothing of the library calls it, and no API of this package
// reaches it: only a program importing redisdelaytest can.

func init() { advance.Func = advanceClock }

// maxAdvanceTicks bounds the ticks one advance publishes per schedule.
const maxAdvanceTicks = 10_000

func advanceClock(ctx context.Context, client redis.UniversalClient, prefix string, d time.Duration, topics []string) (advance.Report, error) {
	var r advance.Report
	if d <= 0 || d > meta.MaxDelay {
		return r, fmt.Errorf("%w: advance the clock by %s: give a positive duration of at most 100 years", ErrInvalidDelay, d)
	}
	i := &Inspector{client: client, keys: store.Keys{Prefix: defaultPrefix(prefix)}}
	every := len(topics) == 0
	if every {
		var err error
		if topics, err = i.Topics(ctx); err != nil {
			return r, err
		}
	}
	for _, topic := range topics {
		if err := validateTopic(topic); err != nil {
			return r, err
		}
		shards, err := i.shards(ctx, topic)
		if err != nil {
			return r, wrap(err, "advance the clock of topic %q", topic)
		}
		for _, sh := range shards {
			if err := advanceShard(ctx, client, sh, d, &r); err != nil {
				return r, wrap(err, "advance the clock of topic %q", topic)
			}
		}
	}
	return r, i.advanceSchedules(ctx, d, func(topic string) bool { return every || slices.Contains(topics, topic) }, &r)
}

// advanceShard moves a partition's waiting messages, far ones included,
// and its retries d earlier, and wakes its schedulers.
func advanceShard(ctx context.Context, client redis.UniversalClient, sh store.Shard, d time.Duration, r *advance.Report) error {
	far, err := store.PullFarAll(ctx, client, sh)
	r.Far += int64(far)
	if err != nil {
		return err
	}
	n, err := store.Shift(ctx, client, sh.Waiting(), d)
	r.Waiting += n
	if err != nil {
		return err
	}
	groups, err := store.Groups(ctx, client, sh)
	if err != nil {
		return err
	}
	for _, g := range groups {
		n, err := store.Shift(ctx, client, sh.Retry(g), d)
		r.Retrying += n
		if err != nil {
			return err
		}
	}
	return store.Wake(ctx, client, sh, "d")
}

// advanceSchedules publishes the ticks of the schedules of the topics
// chosen that fall due by now + d, as their tick loops would over the next
// d: those older than the catch-up window now (missed while no scheduler
// ran) are skipped, as a tick loop would skip them now. Each schedule's
// next tick moves past now + d first, by compare-and-set, so a tick loop
// publishes none of them again.
func (i *Inspector) advanceSchedules(ctx context.Context, d time.Duration, chosen func(string) bool, r *advance.Report) error {
	for range 5 {
		all, err := i.Schedules(ctx)
		if err != nil {
			return err
		}
		now, err := store.RedisTime(ctx, i.client)
		if err != nil {
			return wrap(err, "advance the schedules")
		}
		horizon, lost := now.Add(d), false
		for _, s := range all {
			if !s.Paused.IsZero() || s.Next.IsZero() || !chosen(s.Topic) || s.Next.After(horizon) {
				continue
			}
			t, err := s.validate()
			if err != nil {
				return fmt.Errorf("redisdelay: advance schedule %q: %w", s.ID, err)
			}
			var ticks []time.Time
			next, oldest := s.Next, now.Add(-s.catchUp())
			for ; !next.IsZero() && !next.After(horizon); next = t.next(next) {
				if len(ticks) == maxAdvanceTicks {
					return fmt.Errorf("redisdelay: advance schedule %q by %s: more than %d ticks: advance by less at a time", s.ID, d, maxAdvanceTicks)
				}
				if next.Before(oldest) {
					r.SkippedTicks++
					continue
				}
				ticks = append(ticks, next)
			}
			if next.IsZero() {
				next = time.UnixMilli(maxScheduleMs)
			}
			moved, err := store.MoveNextTick(ctx, i.client, i.keys, s.ID, s.Next, next)
			if err != nil {
				return wrap(err, "advance schedule %q", s.ID)
			}
			if !moved {
				lost = true // a tick loop claimed one first: read again
				continue
			}
			if err := i.publishTicks(ctx, "advance", s, ticks...); err != nil {
				return err
			}
			r.Ticks += int64(len(ticks))
		}
		if !lost {
			return wrapErr(store.WakeTicks(ctx, i.client, i.keys), "advance the schedules: wake the tick loops")
		}
	}
	return fmt.Errorf("redisdelay: advance the schedules: their tick loops kept moving them: try again")
}
