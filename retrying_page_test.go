package redisdelay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Retrying pages by (due time, member): retries due in the same
// millisecond (the retry set's score is the due ms: common for messages
// nacked together) are listed once each, across pages, whatever leaves
// the set or joins it between pages: the page's last member falling due,
// members before it falling due, a new retry due earlier.
func TestInspector_RetryingPagesEqualDueTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	tp := topic()
	insp := newInspector(t, client)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	require.NoError(t, sub.SubscribeInitialize(tp))

	// The retry set as retry_later writes it (lib.lua): score = due ms *
	// 1024, member "<attempt>:<id>"; written here so that they share a due
	// millisecond for sure, an hour ahead.
	key := store.Keys{Prefix: redisdelay.DefaultKeyPrefix}.Shard(tp, 0).Retry("g")
	score := float64(time.Now().Add(time.Hour).UnixMilli() * 1024)
	var all []string
	for n := range 9 {
		m := fmt.Sprintf("2:1-%d", n)
		all = append(all, m)
		require.NoError(t, client.ZAdd(ctx, key, redis.Z{Score: score, Member: m}).Err())
	}
	var seen []string
	page := func(cursor string) string {
		msgs, next, err := insp.Retrying(ctx, tp, "g", cursor, 2)
		require.NoError(t, err)
		for _, m := range msgs {
			seen = append(seen, m.ID[len("0:"):])
		}
		return next
	}

	cursor := page("") // 1-0, 1-1
	// The page's last falls due (leaves the set) before the next page.
	require.NoError(t, client.ZRem(ctx, key, "2:1-1").Err())
	cursor = page(cursor) // 1-2, 1-3
	// A member before the cursor falls due, and a retry due earlier joins.
	require.NoError(t, client.ZRem(ctx, key, "2:1-0").Err())
	require.NoError(t, client.ZAdd(ctx, key, redis.Z{Score: score - 1024, Member: "2:0-new"}).Err())
	for cursor != "" {
		cursor = page(cursor)
	}
	assert.Equal(t, all, seen, "each once, in order")
}
