package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// RunNowMany runs reschedule.lua for each of the UUIDs on one pipeline,
// making them due at Redis's now, and returns how many were waiting.
func RunNowMany(ctx context.Context, c redis.Cmdable, sh Shard, uuids []string) (int, error) {
	return pipeEach(ctx, c, rescheduleScript, []string{sh.Waiting(), sh.Bkeys(), sh.seq(), sh.dormant()}, uuids,
		func(uuid string) []any { return []any{"uuid", uuid, 0, sh.Wake()} })
}
