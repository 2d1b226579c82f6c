package redisdelay

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// checkLookup checks the topic and the UUID (by "uuid") or business key
// (by "key") that a cancel, find or reschedule (verb) looks for.
func checkLookup(verb, topic, by, value string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	if value == "" {
		what := map[string]string{"uuid": "message UUID", "key": "business key"}[by]
		return fmt.Errorf("%w: %s in topic %q: the %s is empty", ErrInvalidMessage, verb, topic, what)
	}
	return nil
}

// inPartitions runs try on the partitions of topic until it reports done,
// first on the one value hashes to (where a waiting message is unless a
// PartitionKey placed it), then on the others. A message waits in one
// partition only, so a try that acts on it acts once.
func inPartitions(k store.Keys, topic string, parts int, value string, try func(sh store.Shard) (done bool, err error)) (bool, error) {
	home := meta.PartitionOf(value, parts)
	for n := range parts {
		if done, err := try(k.Shard(topic, (home+n)%parts)); err != nil || done {
			return done, err
		}
	}
	return false, nil
}

// recall removes a waiting message of topic found by its UUID (by "uuid")
// or business key (by "key").
func recall(ctx context.Context, client redis.UniversalClient, k store.Keys, topic string, parts int, by, value string) (bool, error) {
	if err := checkLookup("cancel", topic, by, value); err != nil {
		return false, err
	}
	removed, err := inPartitions(k, topic, parts, value, func(sh store.Shard) (bool, error) {
		return withFar(ctx, client, sh, by, value, func() (bool, error) {
			return store.Cancel(ctx, client, sh, by, value)
		})
	})
	if err != nil {
		return false, wrap(err, "cancel %s in topic %q", recallWhat(by, value), topic)
	}
	return removed, nil
}

// withFar runs try, a cancel or reschedule of the waiting message with the
// UUID or business key value in partition sh, after moving that message
// from the far tier into the waiting set if it is there (farpull.lua), for
// try to find it. A business key whose holder waits in the far tier again
// when try found nothing (a publish replaced the holder meanwhile) is
// pulled and tried again.
func withFar(ctx context.Context, client redis.UniversalClient, sh store.Shard, by, value string, try func() (bool, error)) (bool, error) {
	for range 5 {
		uuid := value
		if by == "key" {
			var err error
			if uuid, err = store.FarKeyHolder(ctx, client, sh, value); err != nil {
				return false, err
			}
		}
		if uuid != "" {
			key := ""
			if by == "key" {
				key = value
			}
			if _, _, _, err := store.FarPullKeyed(ctx, client, sh, uuid, key, false); err != nil {
				return false, err
			}
		}
		done, err := try()
		if done || err != nil || by != "key" {
			return done, err
		}
		again, err := store.FarKeyHolder(ctx, client, sh, value)
		if err != nil || again == "" {
			return false, err
		}
	}
	return false, fmt.Errorf("the holder of business key %q kept moving into the far tier", value)
}

// recallWhat names what a cancel looks for, in errors.
func recallWhat(by, value string) string {
	if by == "key" {
		return fmt.Sprintf("business key %q", value)
	}
	return fmt.Sprintf("message %q", value)
}

// rescheduleDelay checks a reschedule's arguments and returns the delay
// from now to due, rounded up to whole milliseconds (0 when due has
// passed). limitName names the setting maxDelay comes from; "" for the
// 100-year limit alone.
func rescheduleDelay(topic, by, value string, due, now time.Time, maxDelay time.Duration, limitName string) (time.Duration, error) {
	if err := checkLookup("reschedule", topic, by, value); err != nil {
		return 0, err
	}
	if due.IsZero() {
		return 0, fmt.Errorf("%w: reschedule %s in topic %q: the due time is the zero time.Time: give the instant it is to be delivered (time.Now().Add(d) to delay it by d)",
			ErrInvalidDelay, recallWhat(by, value), topic)
	}
	d := meta.RoundUpMs(due.Sub(now))
	switch {
	case d > meta.MaxDelay:
		return 0, fmt.Errorf("%w: reschedule %s in topic %q: due in %s, beyond the limit of 100 years: use a nearer due time",
			ErrInvalidDelay, recallWhat(by, value), topic, meta.DescribeDelay(d))
	case limitName != "" && d > maxDelay:
		return 0, fmt.Errorf("%w: reschedule %s in topic %q: due in %s, beyond %s (%s): use a nearer due time, or raise %[5]s if that is intended",
			ErrInvalidDelay, recallWhat(by, value), topic, d, limitName, maxDelay)
	}
	return d, nil
}

// reschedule moves the waiting message of topic found by its UUID (by
// "uuid") or business key (by "key") to be due d after Redis's now. Each
// partition's try is atomic, so the message is moved at most once.
func reschedule(ctx context.Context, client redis.UniversalClient, k store.Keys, topic string, parts int, by, value string, d time.Duration) (bool, error) {
	moved, err := inPartitions(k, topic, parts, value, func(sh store.Shard) (bool, error) {
		return withFar(ctx, client, sh, by, value, func() (bool, error) {
			return store.Reschedule(ctx, client, sh, by, value, d.Milliseconds())
		})
	})
	if err != nil {
		return false, wrap(err, "reschedule %s in topic %q", recallWhat(by, value), topic)
	}
	return moved, nil
}
