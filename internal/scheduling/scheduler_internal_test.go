package scheduling

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// A loop holds one pending wake-up. Found in review: a lease release that
// arrived while an ordinary wake-up was pending was dropped, so a standby
// took over only at its next check interval.
func TestScheduler_WakeKeepsTheWakeUpThatMattersMost(t *testing.T) {
	for _, c := range []struct{ first, second, want string }{
		{"d", wakeRelease, wakeRelease},
		{wakeRelease, "d", wakeRelease},
		{"d", wakeGroup, wakeGroup},
		{wakeGroup, wakeRelease, wakeRelease},
		{wakeResubscribed, "d", wakeResubscribed},
		{"d", "r", "r"}, // equal: either does
	} {
		s := &Scheduler{loops: map[store.Shard]chan string{"t": make(chan string, 1)}}
		s.wake("t", c.first)
		s.wake("t", c.second)
		s.wake("other", c.second) // no loop: ignored
		require.Equal(t, c.want, <-s.loops["t"], "%q then %q", c.first, c.second)
		require.Empty(t, s.loops["t"])
	}
}

// A group's next reclaim is due when the first entry left pending runs
// out, never sooner than a quarter of the visibility timeout or a check
// interval.
func TestReclaimEvery_FollowsTheOldestEntryLeftPending(t *testing.T) {
	for _, c := range []struct {
		vis, oldest, interval, want time.Duration
	}{
		{30 * time.Second, 0, 2 * time.Second, 30 * time.Second},                       // nothing pending
		{30 * time.Second, 10 * time.Second, 2 * time.Second, 20 * time.Second},        // runs out in 20 s
		{30 * time.Second, 29 * time.Second, 2 * time.Second, 7500 * time.Millisecond}, // a quarter at least
		{4 * time.Second, 3 * time.Second, 2 * time.Second, 2 * time.Second},           // a check interval at least
		{30 * time.Second, 45 * time.Second, 2 * time.Second, 7500 * time.Millisecond}, // idle past a shorter timeout
	} {
		if got := reclaimEvery(c.vis, c.oldest, c.interval); got != c.want {
			t.Errorf("reclaimEvery(%v, %v, %v) = %v, want %v", c.vis, c.oldest, c.interval, got, c.want)
		}
	}
}
