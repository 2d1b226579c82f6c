package redisdelay

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// unpackFar unpacks (a batch of) far bucket b of a partition into its
// waiting set, when this scheduler holds the partition's lease. It reports
// whether it did (a stale read does nothing; the next tick reads again).
func (s *scheduler) unpackFar(ctx context.Context, sh store.Shard, fields watermill.LogFields, b int64) (done bool, err error) {
	// Only the lease holder pops, so the count and head read here are still
	// the bucket's when the script runs (which checks the count), but for
	// elements a cancel blanked meanwhile (the script skips those). At most
	// FarUnpackBatch elements a call, so a call stays short.
	p, els, err := store.FarHead(ctx, s.redis, sh, b, s.batch)
	if err != nil {
		return false, fmt.Errorf("read far bucket %d: %w", b, err)
	}
	r, err := store.Unpack(ctx, s.redis, sh, s.owner, b, p, els)
	if err != nil {
		return false, fmt.Errorf("unpack far bucket %d: %w", b, err)
	}
	if r.Corrupt > 0 {
		s.logger.Error("redisdelay: far messages that cannot be read were dropped", nil,
			fields.Add(watermill.LogFields{"count": r.Corrupt, "bucket": b}))
	}
	return !r.Stale, nil
}
