package redisdelay

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

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
