package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// promote.lua reads the flag hashes of a batch of 32 or more due messages
// (business keys, high priority, groups) whole when Redis keeps them as
// listpacks (lib.lua's hash_fields), field by field otherwise, and deletes
// only the flags the promoted messages have. The same messages are
// promoted in two partitions, one whose flag hashes are listpacks and one
// whose hashes a long dummy value made hashtables: what is left, delivered
// and kept must be the same.
func TestPromote_FlagHashesReadWholeOrByField(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	// 300 waiting an hour: a third keyed, a third high-priority, a third
	// grouped; 100 due now, some keyed, high-priority or grouped (no
	// consumer group: a grouped one stays for the first)
	msg := func(name string, delayMs int64, i int, key, prio, group bool) PubMessage {
		m := PubMessage{UUID: fmt.Sprintf("%s-%d", name, i), Delay: delayMs, Body: []byte(fmt.Sprintf("%s-%d", name, i)), Prio: prio, Far: FarArg{Bucket: -1}}
		if key {
			m.Key = fmt.Sprintf("r%s-%d", name, i) // policy r (reject), then the key
		}
		if group {
			m.Group = fmt.Sprintf("%s-%d", name, i)
		}
		return m
	}
	later, soon := &fairCall{}, &fairCall{}
	for i := range 300 {
		later.Msgs = append(later.Msgs, msg("later", 3_600_000, i, i%3 == 1, i%3 == 0, i%3 == 2))
	}
	for i := range 100 {
		soon.Msgs = append(soon.Msgs, msg("soon", 1, i, i%5 == 0, i%7 == 0, i%11 == 0))
	}

	state := func(sh Shard) []string {
		var out []string
		for _, h := range []string{sh.BkeyOf(), sh.Bkeys(), sh.Prio(), sh.GroupOf()} {
			all, err := c.HGetAll(ctx, h).Result()
			require.NoError(t, err)
			delete(all, "dummy")
			out = append(out, fmt.Sprint(h[strings.LastIndex(h, ":"):], " ", all))
		}
		entries, err := c.XRange(ctx, sh.Stream(), "-", "+").Result()
		require.NoError(t, err)
		for _, e := range entries {
			out = append(out, fmt.Sprint("ready ", e.Values))
		}
		waiting, err := c.ZRange(ctx, sh.Waiting(), 0, -1).Result()
		require.NoError(t, err)
		return append(out, fmt.Sprint("waiting ", waiting))
	}
	run := func(sh Shard, wide bool) []string {
		_, err := Publish(ctx, c, sh, PublishOpts{MaxWaiting: 1 << 30}, []*fairCall{later, soon})
		require.NoError(t, err)
		want := "listpack"
		if wide {
			for _, h := range []string{sh.BkeyOf(), sh.Prio(), sh.GroupOf()} {
				require.NoError(t, c.HSet(ctx, h, "dummy", strings.Repeat("x", 100)).Err())
			}
			want = "hashtable"
		}
		for _, h := range []string{sh.BkeyOf(), sh.Prio(), sh.GroupOf()} {
			require.Equal(t, want, c.ObjectEncoding(ctx, h).Val(), h)
		}
		// promoted as they fall due (1 ms after the publish), until only
		// the 300 waiting an hour are left
		require.Eventually(t, func() bool {
			_, err := Promote(ctx, c, sh, PromoteArgs{Batch: 256, Owner: "owner", Lease: time.Minute, MayTake: true, Extend: true})
			require.NoError(t, err)
			return c.ZCard(ctx, sh.Waiting()).Val() == 300
		}, 5*time.Second, time.Millisecond)
		return state(sh)
	}
	whole, byField := run("t:{listpack}", false), run("t:{hashtable}", true)
	require.Equal(t, byField, whole)
	require.Contains(t, whole[len(whole)-1], "later-299", "the waiting ones stay")
	require.Equal(t, 90, len(whole)-5, "the due ones are delivered but the 10 grouped")
}

// A call that finishes a high-priority message's fan-out has less than its
// batch left; when the first due message is then grouped and its copies
// (one per consumer group) do not fit, the call moves nothing more. It
// used to remove the whole waiting set all the same (ZREMRANGEBYRANK 0 -1,
// the bodies left behind): with more than 128 consumer groups and the
// default batch, any grouped message at the head as a fan-out ended.
func TestPromote_GroupedHeadAfterAFanOutStaysWaiting(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	sh := Keys{Prefix: "t"}.Shard("topic", 0)
	groups := []string{"g1", "g2", "g3"}

	// a grouped message due first, two plain ones after it
	for i, group := range []string{"tenant", "", ""} {
		m := PubMessage{UUID: fmt.Sprint("m", i), Delay: int64(1 + i), Body: []byte(fmt.Sprint("m", i)), Group: group, Far: FarArg{Bucket: -1}}
		_, err := Publish(ctx, c, sh, PublishOpts{}, []*fairCall{{PubArgs{Msgs: []PubMessage{m}}}})
		require.NoError(t, err)
	}
	// a high-priority message's fan-out in progress, no group given a copy
	// yet: the next call copies it to all three, leaving 1 of its batch of 4
	require.NoError(t, c.HSet(ctx, sh.Fanout(), "m", "high", "id", "h").Err())
	// all three due, by Redis's clock as the script reads it
	require.Eventually(t, func() bool {
		now, err := c.Time(ctx).Result()
		require.NoError(t, err)
		last, err := c.ZRangeWithScores(ctx, sh.Waiting(), -1, -1).Result()
		require.NoError(t, err)
		return len(last) == 1 && last[0].Score <= float64(now.UnixMilli()*1024)
	}, 5*time.Second, time.Millisecond)

	args := PromoteArgs{Groups: groups, Batch: 4, Owner: "o", Lease: time.Minute, MayTake: true}
	r, err := Promote(ctx, c, sh, args)
	require.NoError(t, err)
	require.Zero(t, r.Moved, "the grouped head does not fit beside the fan-out")
	require.Zero(t, r.Wait, "more is due: call again at once")
	require.EqualValues(t, 3, c.ZCard(ctx, sh.Waiting()).Val(), "the waiting set is kept whole")

	// the next calls move everything: nothing lost, nothing twice
	for range 5 {
		_, err := Promote(ctx, c, sh, args)
		require.NoError(t, err)
	}
	require.Zero(t, c.ZCard(ctx, sh.Waiting()).Val())
	require.Zero(t, c.HLen(ctx, sh.Bodies()).Val())
	require.Equal(t, []string{"m1", "m2"}, streamBodies(t, c, sh.Stream()))
	for _, g := range groups {
		require.Equal(t, []string{"high", "m0"}, streamBodies(t, c, sh.Redelivery(g)), g)
	}
}

// streamBodies is the field m of each entry of a stream, in order.
func streamBodies(t *testing.T, c *redis.Client, stream string) []string {
	t.Helper()
	es, err := c.XRange(context.Background(), stream, "-", "+").Result()
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprint(e.Values["m"]))
	}
	return out
}
