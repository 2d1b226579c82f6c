package store

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pause stores a consumer group's pause flag on partition 0 (sh) of its
// topic, if not set, and tells the group's subscribers on its flow
// channel. notifyErr is the PUBLISH's error: the pause holds without it.
func Pause(ctx context.Context, c Cmds, sh Shard, group string) (err, notifyErr error) {
	pipe := c.Pipeline()
	set := pipe.SetNX(ctx, sh.Paused(group), strconv.FormatInt(time.Now().UnixMilli(), 10), 0)
	pub := pipe.Publish(ctx, sh.Flow(group), "p")
	execPipe(ctx, pipe)
	return set.Err(), pub.Err()
}

// Resume deletes the pause flag as Pause set it and tells the
// subscribers; it reports whether the group was paused.
func Resume(ctx context.Context, c Cmds, sh Shard, group string) (was bool, err, notifyErr error) {
	pipe := c.Pipeline()
	del := pipe.Del(ctx, sh.Paused(group))
	pub := pipe.Publish(ctx, sh.Flow(group), "r")
	execPipe(ctx, pipe)
	return del.Val() == 1, del.Err(), pub.Err()
}

// Paused reports whether the pause flag of a group is set on partition 0
// (sh) of its topic.
func Paused(ctx context.Context, c Cmds, sh Shard, group string) (bool, error) {
	n, err := c.Exists(ctx, sh.Paused(group)).Result()
	return n == 1, err
}

// PausedGroups reads the pause flag of each group, in one round trip.
func PausedGroups(ctx context.Context, c Cmds, sh Shard, groups []string) ([]bool, error) {
	pipe := c.Pipeline()
	cmds := make([]*redis.IntCmd, len(groups))
	for n, g := range groups {
		cmds[n] = pipe.Exists(ctx, sh.Paused(g))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]bool, len(groups))
	for n, c := range cmds {
		out[n] = c.Val() == 1
	}
	return out, nil
}
