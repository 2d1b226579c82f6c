package levels

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// One announcer per client and prefix, whatever the components holding
// it: one process in the registry, its roles joined; the last release
// takes it out at once.
func TestLevels_OneProcessPerClientAndPrefix(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	k := store.Keys{Prefix: "lv"}

	pub := Acquire(c, "lv", "publisher", watermill.NopLogger{})
	sub := Acquire(c, "lv", "subscriber", watermill.NopLogger{})
	other := Acquire(c, "other", "publisher", watermill.NopLogger{})
	require.Equal(t, store.LevelNewest, pub.Wait(ctx), "nothing stored: the newest level at once")
	require.Equal(t, store.LevelNewest, sub.Level())
	require.Equal(t, store.LevelNewest, other.Wait(ctx))

	r, err := store.ReadRegistry(ctx, c, k)
	require.NoError(t, err)
	require.Len(t, r.Procs, 1)
	require.Equal(t, "publisher+subscriber", r.Procs[0].Role)
	require.Equal(t, Version, r.Procs[0].Version)

	pub.Release()
	pub.Release() // a second release is a no-op
	r, err = store.ReadRegistry(ctx, c, k)
	require.NoError(t, err)
	require.Len(t, r.Procs, 1)
	sub.Release()
	r, err = store.ReadRegistry(ctx, c, k)
	require.NoError(t, err)
	require.Empty(t, r.Procs, "the last release leaves the registry at once")
	other.Release()
}

// Redis unreachable: the level is 1, which every release reads, and Wait
// ends with its context.
func TestLevels_Unreachable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	h := Acquire(c, "lv", "publisher", watermill.NopLogger{})
	defer h.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.Equal(t, store.Level1, h.Wait(ctx))
}

// The client closed under a holder (a program closing it before its
// publisher): the announcements stop at the next tick, quietly, where
// they would fail and log every 30 s for as long as the process runs.
func TestLevels_ClientClosedStopsAnnouncements(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	logger := watermill.NewCaptureLogger()
	h := Acquire(c, "lv", "publisher", logger)
	defer h.Release()
	ctx := context.Background()
	require.Equal(t, store.LevelNewest, h.Wait(ctx))

	require.NoError(t, c.Close())
	h.a.kick <- struct{}{}
	select {
	case <-h.a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the announcer still runs on a closed client")
	}
	require.Empty(t, logger.Captured()[watermill.ErrorLogLevel])
	require.Equal(t, store.LevelNewest, h.Level(), "the level last announced stays")
}
