package store

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Topics lists the topic registry: every topic a Publisher or Subscriber
// registered, valid or not.
func Topics(ctx context.Context, c Cmds, k Keys) ([]string, error) {
	return c.SMembers(ctx, k.Topics()).Result()
}

// RegisterTopic adds topic to the registry and stores its partition count
// want unless one is stored. It returns the count stored (as stored, so a
// mismatch can be shown) and whether the registry lacked the topic or its
// count. At maxmemory (noeviction) Redis refuses the writes even when they
// would change nothing: for a topic already registered the stored count is
// returned all the same, so a subscriber restarting then still joins a
// topic, to drain it.
func RegisterTopic(ctx context.Context, c Cmds, k Keys, topic string, want int) (stored string, added bool, err error) {
	pipe := c.Pipeline()
	known := pipe.SIsMember(ctx, k.Topics(), topic)
	add := pipe.SAdd(ctx, k.Topics(), topic)
	counted := pipe.HSetNX(ctx, k.Partitions(), topic, want)
	count := pipe.HGet(ctx, k.Partitions(), topic)
	if _, err := pipe.Exec(ctx); err != nil {
		if !isOOM(err) || !known.Val() || count.Err() != nil {
			return "", false, err
		}
	}
	return count.Val(), add.Val() == 1 || counted.Val(), nil
}

// AnnounceTopic tells discovering Managers of a newly registered topic, so
// they schedule it before their next refresh of the registry.
func AnnounceTopic(ctx context.Context, c Cmds, k Keys, topic string) error {
	return c.Publish(ctx, k.Registered(), topic).Err()
}

// Partitions reads the partition count of each topic: 1 for a topic
// without a stored count (used before partitions existed, or not used
// yet), at most limit.
func Partitions(ctx context.Context, c Cmds, k Keys, limit int, topics ...string) ([]int, error) {
	out := make([]int, len(topics))
	if len(topics) == 0 {
		return out, nil
	}
	vals, err := c.HMGet(ctx, k.Partitions(), topics...).Result()
	if err != nil {
		return nil, fmt.Errorf("read the partition counts of %d topic(s): %w", len(topics), err)
	}
	for i, v := range vals {
		s, _ := v.(string)
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			n = 1
		}
		out[i] = min(n, limit)
	}
	return out, nil
}

// Groups lists the consumer groups registered on a partition.
func Groups(ctx context.Context, c Cmds, sh Shard) ([]string, error) {
	return c.SMembers(ctx, sh.Groups()).Result()
}

// Wake wakes the schedulers of a partition with payload (see the wake-up
// kinds of internal/scheduling/scheduler.go), starting a loop that retired.
func Wake(ctx context.Context, c Cmds, sh Shard, payload string) error {
	return c.Publish(ctx, sh.Wake(), payload).Err()
}

// RedisTime is Redis's clock.
func RedisTime(ctx context.Context, c Cmds) (time.Time, error) { return c.Time(ctx).Result() }
