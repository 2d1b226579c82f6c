package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// What package redisdelaytest's Advance changes to move a topic's clock
// forward in a test: the due scores of its waiting and retry sets, moved
// earlier, after pulling its far messages into the waiting set (the far
// tier keeps due times in its bucket numbers, which cannot move); and the
// schedules' next ticks. Nothing of the library calls these.

var shiftScript = loadScript("shift")

// shiftBatch is how many members one shift.lua call moves, ties aside.
const shiftBatch = 1000

// Shift moves every member of a due-time sorted set (Waiting, Retry)
// earlier by d, a batch per call, and returns how many it moved.
func Shift(ctx context.Context, c redis.Scripter, key string, d time.Duration) (int64, error) {
	var total int64
	cursor := ""
	for {
		res, err := shiftScript.Run(ctx, c, []string{key}, d.Milliseconds()*scoreScale, cursor, shiftBatch).Slice()
		if err != nil {
			return total, err
		}
		if err := replyShort("shift", len(res), 2); err != nil {
			return total, err
		}
		n, _ := res[0].(int64)
		total += n
		if cursor, _ = res[1].(string); cursor == "" {
			return total, nil
		}
	}
}

// PullFarAll moves every message of a partition's far tier (both formats)
// into its waiting set (the path of Cancel and Reschedule: farpull.lua),
// bucket by bucket, reading each with FarRange, and returns how many it
// found there. A bucket the scheduler unpacks meanwhile is moved by it
// instead.
func PullFarAll(ctx context.Context, c redis.Cmdable, sh Shard) (int, error) {
	found := 0
	for from := int64(0); ; {
		refs, err := FarBuckets(ctx, c, sh, from, 100)
		if err != nil {
			return found, err
		}
		for _, ref := range refs {
			// Pulled elements turn "" in place: the positions stay.
			for pos, done := int64(0), false; !done; {
				var ms []FarMember
				ms, pos, done, err = FarRange(ctx, c, sh, ref, pos, FarUnpackBatch)
				if err != nil {
					return found, err
				}
				uuids := make([]string, 0, len(ms))
				for _, m := range ms {
					if m.ID != "" {
						uuids = append(uuids, m.ID)
					}
				}
				if len(uuids) > 0 {
					if err := FarPullMany(ctx, c, sh, uuids); err != nil {
						return found, err
					}
					found += len(uuids)
				}
			}
		}
		if len(refs) < 100 {
			return found, nil
		}
		from = refs[len(refs)-1] + 1
	}
}

// MoveNextTick sets a schedule's next tick to to when it is still from
// (an optimistic transaction on the next ticks: a tick loop claiming it
// first wins), and reports whether it did.
func MoveNextTick(ctx context.Context, c redis.UniversalClient, k Keys, id string, from, to time.Time) (bool, error) {
	key := k.Schedules().Next()
	moved := false
	err := c.Watch(ctx, func(tx *redis.Tx) error {
		cur, err := tx.ZScore(ctx, key, id).Result()
		if err != nil || int64(cur) != from.UnixMilli() {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAddXX(ctx, key, redis.Z{Score: float64(to.UnixMilli()), Member: id})
			return nil
		})
		moved = err == nil
		return err
	}, key)
	if errors.Is(err, redis.TxFailedErr) || errors.Is(err, redis.Nil) {
		return false, nil
	}
	return moved, err
}

// WakeTicks wakes the schedulers' tick loops, to read the next ticks again.
func WakeTicks(ctx context.Context, c redis.Cmdable, k Keys) error {
	return c.Publish(ctx, k.Schedules().Wake(), "").Err()
}
