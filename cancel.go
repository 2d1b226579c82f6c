package redisdelay

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// recall removes a waiting message of topic found by its UUID (by "uuid")
// or business key (by "key"), looking first in the partition the value
// hashes to (where a message is unless a PartitionKey placed it), then in
// the others.
func recall(ctx context.Context, client redis.UniversalClient, k keys, topic string, parts int, by, value string) (bool, error) {
	if err := validateTopic(topic); err != nil {
		return false, err
	}
	if value == "" {
		what := map[string]string{"uuid": "message UUID", "key": "business key"}[by]
		return false, fmt.Errorf("%w: cancel in topic %q: the %s is empty", ErrInvalidMessage, topic, what)
	}
	home := partitionOf(value, parts)
	for i := range parts {
		sh := k.shard(topic, (home+i)%parts)
		removed, err := callCancel(ctx, client, sh, by, value)
		if err != nil {
			return false, wrap(err, "cancel %s in topic %q", recallWhat(by, value), topic)
		}
		if removed {
			return true, nil
		}
	}
	return false, nil
}

// recallWhat names what a cancel looks for, in errors.
func recallWhat(by, value string) string {
	if by == "key" {
		return fmt.Sprintf("business key %q", value)
	}
	return fmt.Sprintf("message %q", value)
}
