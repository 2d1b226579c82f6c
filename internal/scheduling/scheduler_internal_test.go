package scheduling

import (
	"testing"

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
