// Package pause holds the library's own pauses after a failure of Redis.
package pause

import (
	"context"
	"time"
)

// The library's own pauses: after a failure of Redis (a read, a flush, a
// tick) and before trying again. Not the retry policy of messages, which is
// in internal/consumption/delivery.go (a Nack) and the group policy stored for
// reclaim (the root package's groupPolicy).

// Backoff is the pause after the n-th consecutive failure: 100ms more each
// time, up to limit.
func Backoff(n int, limit time.Duration) time.Duration {
	return min(time.Duration(n)*100*time.Millisecond, limit)
}

// Sleep waits d, or less when ctx ends.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
