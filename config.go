package redisdelay

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/names"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// DefaultKeyPrefix namespaces every key when a config leaves KeyPrefix empty.
const DefaultKeyPrefix = "redisdelay"

// Scheduling defaults, shared by Managers and the schedulers Subscribers embed.
const (
	defaultCheckInterval = 2 * time.Second
	defaultPromoteBatch  = 256
	defaultTrimInterval  = 10 * time.Second
)

// Message lifecycle defaults.
const (
	defaultMaxAttempts         = 16
	defaultVisibilityTimeout   = 30 * time.Second
	defaultMaxDeadLetters      = 100_000
	defaultConsumerIdleTimeout = time.Hour
	defaultCloseTimeout        = 10 * time.Second
	defaultBlockTime           = 30 * time.Second
	defaultHandlerTimeout      = 30 * time.Minute
	defaultPublishTimeout      = 10 * time.Second
	defaultMaxDelay            = 366 * 24 * time.Hour
	defaultMaxMessageSize      = 1 << 20
	defaultReplicaTimeout      = time.Second
)

func defaultPrefix(p string) string {
	if p == "" {
		return DefaultKeyPrefix
	}
	return p
}

func validateCommon(config string, client redis.UniversalClient, prefix string) error {
	if client == nil {
		return fmt.Errorf("redisdelay: %s.Client is nil: pass a redis.UniversalClient, e.g. redis.NewClient(&redis.Options{Addr: \"127.0.0.1:6379\"})", config)
	}
	return validateName(config+".KeyPrefix", prefix)
}

// nameProblem says what would break the key layout in a name (empty when
// nothing); see names.Problem, shared with the prommetrics Collector.
func nameProblem(what, s string) string { return names.Problem(what, s) }

func validateName(what, s string) error {
	if p := nameProblem(what, s); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidName, p)
	}
	return nil
}

func validateTopic(topic string) error {
	if p := nameProblem("topic", topic); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidTopic, p)
	}
	return nil
}

func positive(what string, d, least time.Duration) error {
	if d < least {
		return fmt.Errorf("redisdelay: %s is %s: use at least %s (0 means the default)", what, d, least)
	}
	return nil
}

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

// registerTopic adds the topic to the registry Managers discover topics
// from and stores its partition count if none is stored yet. It fails with
// ErrPartitionMismatch when another count is stored; config names the
// setting for the message. It reports whether the registry lacked the
// topic or its count.
func registerTopic(ctx context.Context, client store.Cmds, k store.Keys, topic string, want int, config string) (bool, error) {
	stored, added, err := store.RegisterTopic(ctx, client, k, topic, want)
	if err != nil {
		return false, wrap(err, "register topic %q", topic)
	}
	if n, _ := strconv.Atoi(stored); n != want {
		return false, fmt.Errorf("%w: topic %q has %s partitions in Redis (stored by the first Publisher or Subscriber that used it) but %s gives it %d: "+
			"give every Publisher and Subscriber of the topic the same count; to change the count of a topic in use, publish to a new topic and let the old one drain",
			ErrPartitionMismatch, topic, stored, config, want)
	}
	if !added {
		return false, nil
	}
	if err := store.AnnounceTopic(ctx, client, k, topic); err != nil {
		return true, wrap(err, "register topic %q: tell the Managers", topic)
	}
	return true, nil
}

// storedPartitions reads the partition count of each topic from Redis: 1
// for a topic without a stored count (used before partitions existed, or
// not used yet).
func storedPartitions(ctx context.Context, client store.Cmds, k store.Keys, topics ...string) ([]int, error) {
	return store.Partitions(ctx, client, k, maxPartitions, topics...)
}
