package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Schedulers pace a group's reclaims by when the first entry left pending
// runs out (scheduling's reclaimEvery): reclaim.lua reports the longest
// idle time among the entries it left, and nothing else.
func TestReclaim_ReportsTheOldestEntryLeftPending(t *testing.T) {
	c := freshClient(t)
	ctx := context.Background()
	sh := Keys{Prefix: "pace"}.Shard("t", 0)
	const vis = time.Minute
	_, err := InitGroup(ctx, c, sh, "cg", GroupPolicy{Visibility: vis})
	require.NoError(t, err)

	sweep := func() ReclaimReply {
		t.Helper()
		r, err := Reclaim(ctx, c, sh, "cg", 256, false, ReclaimStart)
		require.NoError(t, err)
		require.Zero(t, r.Next.Stream, "one call sweeps a short list")
		return r
	}
	r := sweep()
	require.Equal(t, vis, r.Vis)
	require.Zero(t, r.Oldest, "nothing pending")

	// Entries delivered to a consumer, their idle times set (XCLAIM IDLE)
	// rather than waited for.
	pending := func(key string, idle time.Duration) {
		t.Helper()
		id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"m", "x", "a", "1"}}).Result()
		require.NoError(t, err)
		require.NoError(t, c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "cg", Consumer: "c1", Streams: []string{key, ">"}, Count: 1}).Err())
		require.NoError(t, c.Do(ctx, "XCLAIM", key, "cg", "c1", 0, id, "IDLE", idle.Milliseconds(), "JUSTID").Err())
	}
	pending(sh.Stream(), 20*time.Second)
	pending(sh.Redelivery("cg"), 35*time.Second)
	pending(sh.Stream(), 5*time.Second)
	pending(sh.Stream(), 2*time.Minute) // run out: reclaimed, so not counted

	r = sweep()
	require.EqualValues(t, 1, r.Requeued)
	require.GreaterOrEqual(t, r.Oldest, 35*time.Second, "the redelivery stream's entry is the oldest left")
	require.Less(t, r.Oldest, 40*time.Second)
}

// A subscriber that stores a shorter visibility timeout wakes the
// schedulers (note "g"), which sweep the group again at once rather than
// at the pace the longer timeout allowed; a longer or the same one does not.
func TestInitGroup_WakesSchedulersOnAShorterVisibilityTimeout(t *testing.T) {
	c := freshClient(t)
	ctx := context.Background()
	sh := Keys{Prefix: "pace"}.Shard("t", 0)
	since := wakeNotes(t, c, sh)

	// notes returns what init published.
	notes := func(vis time.Duration) []string {
		t.Helper()
		_, err := InitGroup(ctx, c, sh, "cg", GroupPolicy{Visibility: vis})
		require.NoError(t, err)
		return since()
	}
	require.Equal(t, []string{"g"}, notes(time.Minute), "a new group")
	require.Empty(t, notes(time.Minute), "the same timeout")
	require.Empty(t, notes(2*time.Minute), "a longer timeout")
	require.Equal(t, []string{"g"}, notes(10*time.Second), "a shorter timeout")
}
