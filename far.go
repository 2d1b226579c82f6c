package redisdelay

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// unpackFar unpacks (a batch of) far bucket b of a partition into its
// waiting set, when this scheduler holds the partition's lease. It reports
// whether it did (a stale read does nothing; the next tick reads again).
func (s *scheduler) unpackFar(ctx context.Context, sh store.Shard, fields watermill.LogFields, b int64) (done bool, err error) {
	key := sh.FarBucket(b)
	var popped *redis.StringCmd
	var els *redis.StringSliceCmd
	// Only the lease holder pops, so the count and head read here are still
	// the bucket's when the script runs (which checks the count), but for
	// elements a cancel blanked meanwhile (the script skips those). A
	// pipeline rather than MULTI, which Redis refuses at maxmemory; each
	// command's error is checked below (the pipeline's is the first one,
	// which for a bucket never unpacked is HGET's redis.Nil). At most
	// farUnpackBatch elements a call, so a call stays short.
	_, _ = s.redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		popped = p.HGet(ctx, sh.FarMeta(), "p:"+strconv.FormatInt(b, 10))
		els = p.LRange(ctx, key, 0, int64(min(s.batch, store.FarUnpackBatch))-1)
		return nil
	})
	if err := els.Err(); err != nil {
		return false, fmt.Errorf("read far bucket %d: %w", b, err)
	}
	if err := popped.Err(); err != nil && err != redis.Nil {
		return false, fmt.Errorf("read far bucket %d: %w", b, err)
	}
	p, _ := strconv.ParseInt(popped.Val(), 10, 64)
	r, err := store.Unpack(ctx, s.redis, sh, s.owner, b, p, els.Val())
	if err != nil {
		return false, fmt.Errorf("unpack far bucket %d: %w", b, err)
	}
	if r.Corrupt > 0 {
		s.logger.Error("redisdelay: far messages that cannot be read were dropped", nil,
			fields.Add(watermill.LogFields{"count": r.Corrupt, "bucket": b}))
	}
	return !r.Stale, nil
}
