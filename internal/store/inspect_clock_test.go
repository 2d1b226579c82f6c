package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// Shift moves every member once, members tied at a batch's end included,
// and keeps a score that would go below 0 due at the epoch.
func TestShift_MovesEachMemberOnce(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	want := map[string]float64{}
	var zs []redis.Z
	for n := range 2500 {
		// runs of ties longer than a batch's end can hold
		score := float64((1_800_000_000_000 + int64(n/7)) * scoreScale)
		m := "m" + strconv.Itoa(n)
		zs = append(zs, redis.Z{Score: score, Member: m})
		want[m] = score - float64(time.Hour.Milliseconds()*scoreScale)
	}
	zs = append(zs, redis.Z{Score: 5*scoreScale + 3, Member: "early"})
	want["early"] = 3
	require.NoError(t, c.ZAdd(ctx, "set", zs...).Err())
	n, err := Shift(ctx, c, "set", time.Hour)
	require.NoError(t, err)
	assert.Equal(t, int64(len(zs)), n)
	got, err := c.ZRangeWithScores(ctx, "set", 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, got, len(zs))
	for _, z := range got {
		assert.Equal(t, want[z.Member.(string)], z.Score, z.Member)
	}
	n, err = Shift(ctx, c, "missing", time.Hour)
	require.NoError(t, err)
	assert.Zero(t, n)
}
