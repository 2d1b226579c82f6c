package redisdelay

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// maxPartitions bounds a topic's partition count: each is a set of keys,
// a reader per subscription and a scheduler loop.
const maxPartitions = 256

// partitionCount is the configured partition count of a topic.
func partitionCount(def int, perTopic map[string]int, topic string) int {
	if n, ok := perTopic[topic]; ok && n > 0 {
		return n
	}
	return max(def, 1)
}

// validatePartitions checks the partition settings of a config.
func validatePartitions(config string, def int, perTopic map[string]int) error {
	if def < 0 || def > maxPartitions {
		return fmt.Errorf("redisdelay: %s.Partitions is %d: use 1 to %d (0 means 1)", config, def, maxPartitions)
	}
	for topic, n := range perTopic {
		if p := nameProblem(config+".TopicPartitions key", topic); p != "" {
			return fmt.Errorf("%w: %s", ErrInvalidTopic, p)
		}
		if n < 1 || n > maxPartitions {
			return fmt.Errorf("redisdelay: %s.TopicPartitions[%q] is %d: use 1 to %d", config, topic, n, maxPartitions)
		}
	}
	return nil
}

// partitionOf returns the partition (0 to n-1) a partition key or UUID
// hashes to.
func partitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// messagePartition is the partition of a message published in a call whose
// first message has the UUID first: that of its PartitionKey, else of its
// BusinessKey, else of first.
func messagePartition(msg *message.Message, first string, n int) int {
	if k := msg.Metadata.Get(PartitionKey); k != "" {
		return partitionOf(k, n)
	}
	if k := msg.Metadata.Get(BusinessKey); k != "" {
		return partitionOf(k, n)
	}
	return partitionOf(first, n)
}

// registerTopic adds the topic to the registry Managers discover topics
// from and stores its partition count if none is stored yet. It fails with
// ErrPartitionMismatch when another count is stored; config names the
// setting for the message. It reports whether the registry lacked the
// topic or its count.
func registerTopic(ctx context.Context, client store.Cmds, k store.Keys, topic string, want int, config string) (bool, error) {
	pipe := client.Pipeline()
	known := pipe.SIsMember(ctx, k.Topics(), topic)
	added := pipe.SAdd(ctx, k.Topics(), topic)
	counted := pipe.HSetNX(ctx, k.Partitions(), topic, want)
	stored := pipe.HGet(ctx, k.Partitions(), topic)
	if _, err := pipe.Exec(ctx); err != nil {
		// At maxmemory (noeviction) Redis refuses the writes even when they
		// would change nothing: a subscriber restarting then must still
		// join a topic already registered, to drain it.
		if !store.IsOOM(err) || !known.Val() || stored.Err() != nil {
			return false, wrap(err, "register topic %q", topic)
		}
	}
	if n, _ := strconv.Atoi(stored.Val()); n != want {
		return false, fmt.Errorf("%w: topic %q has %s partitions in Redis (stored by the first Publisher or Subscriber that used it) but %s gives it %d: "+
			"give every Publisher and Subscriber of the topic the same count; to change the count of a topic in use, publish to a new topic and let the old one drain",
			ErrPartitionMismatch, topic, stored.Val(), config, want)
	}
	if added.Val() == 0 && !counted.Val() {
		return false, nil
	}
	// Discovering Managers schedule it now rather than at their next
	// refresh of the registry.
	if err := client.Publish(ctx, k.Registered(), topic).Err(); err != nil {
		return true, wrap(err, "register topic %q: tell the Managers", topic)
	}
	return true, nil
}

// storedPartitions reads the partition count of each topic from Redis: 1
// for a topic without a stored count (used before partitions existed, or
// not used yet).
func storedPartitions(ctx context.Context, client store.Cmds, k store.Keys, topics ...string) ([]int, error) {
	out := make([]int, len(topics))
	if len(topics) == 0 {
		return out, nil
	}
	vals, err := client.HMGet(ctx, k.Partitions(), topics...).Result()
	if err != nil {
		return nil, fmt.Errorf("read the partition counts of %d topic(s): %w", len(topics), err)
	}
	for i, v := range vals {
		s, _ := v.(string)
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			n = 1
		}
		out[i] = min(n, maxPartitions)
	}
	return out, nil
}
