package scheduling

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// unpackFar unpacks (a batch of) far bucket b of format v of a partition
// into its waiting set, when this scheduler holds the partition's lease. It
// reports whether it did (a stale read does nothing; the next tick reads
// again).
func (s *Scheduler) unpackFar(ctx context.Context, sh store.Shard, fields watermill.LogFields, v int, b int64) (done bool, err error) {
	// Only the lease holder pops, so the count and head read here are still
	// the bucket's when the script runs (which checks the count), but for
	// elements a cancel blanked meanwhile (the script skips those). At most
	// FarUnpackBatch elements a call, so a call stays short.
	head, err := store.FarHead(ctx, s.redis, sh, v, b, s.batch)
	if err != nil {
		return false, fmt.Errorf("read far bucket %d: %w", b, err)
	}
	r, err := store.Unpack(ctx, s.redis, sh, s.owner, v, b, head)
	if err != nil {
		return false, fmt.Errorf("unpack far bucket %d: %w", b, err)
	}
	if r.Parked > 0 {
		// Never dropped, and the rest of the bucket goes on: a release
		// that reads it (a newer one) unpacks the park list. Noted before
		// it is logged, so that Health already reports what the log says.
		if err := store.NoteParked(ctx, s.redis, s.keys, sh, r.Parked); err != nil {
			s.limiter.Errorf(s.logger, "redisdelay: cannot record parked far messages for Inspector.Health (they are parked all the same)", err, fields)
		}
		s.lvl.Unreadable(s.logger, "far message", fmt.Errorf("%d element(s) of far bucket %s", r.Parked, store.FarBucketKey(sh, v, b)),
			fields.Add(watermill.LogFields{"parked_in": sh.FarPark()}))
	}
	return !r.Stale, nil
}

// unpark moves into the waiting set the far elements of a partition that a
// process of an older release parked (store.Unpark), a batch each trim.
func (s *Scheduler) unpark(ctx context.Context, sh store.Shard, parked int64, fields watermill.LogFields) {
	n, _, err := store.Unpark(ctx, s.redis, sh, s.owner, parked)
	if err != nil {
		s.limiter.Errorf(s.logger, "redisdelay: cannot move parked far messages into the waiting set; the next trim tries again", err, fields)
		return
	}
	if n == 0 {
		return
	}
	s.logger.Info("redisdelay: moved far messages an older release parked into the waiting set", fields.Add(watermill.LogFields{"count": n}))
	if err := store.NoteUnparked(ctx, s.redis, s.keys, n); err != nil {
		s.limiter.Errorf(s.logger, "redisdelay: cannot record unparked far messages for Inspector.Health", err, fields)
	}
}

// rebuildFarFilter rebuilds the far filter of a partition (see
// internal/store/farfilter.go) in the background, as trim.lua asked: reading
// a far index of millions takes seconds, which the partition's ticks must
// not wait for. One partition at a time per scheduler; until it is done,
// publishes look their UUIDs up in the far index, as without a filter.
func (s *Scheduler) rebuildFarFilter(sh store.Shard, fields watermill.LogFields) {
	if !s.filtering.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.filtering.Store(false)
		started := time.Now()
		if err := store.RebuildFarFilter(s.ctx, s.redis, sh, watermill.NewUUID(), s.lvl.Level()); err != nil {
			if s.ctx.Err() == nil {
				s.limiter.Errorf(s.logger, "redisdelay: cannot rebuild the far filter; publishes look their messages up in the far index until a later try succeeds", err, fields)
			}
			return
		}
		s.logger.Debug("redisdelay: rebuilt the far filter", fields.Add(watermill.LogFields{"took": time.Since(started).String()}))
	}()
}
