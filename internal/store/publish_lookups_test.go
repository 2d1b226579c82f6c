package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// publish.lua looks the business keys of a run (:bkeys) and the UUIDs of
// its waiting messages (:bodies) up whole when Redis keeps the hash as a
// listpack and 32 or more are asked for (lib.lua's hash_fields), field by
// field otherwise. The same run is published into two partitions holding
// the same 300 keyed messages, one whose hashes are listpacks and one
// whose hashes a long dummy value made hashtables: statuses and what is
// stored must be the same.
func TestPublish_LookupsReadWholeOrByField(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	// bodies of under 64 bytes, so :bodies is a listpack too
	msg := func(name string, i int, policy, key string) PubMessage {
		m := PubMessage{UUID: fmt.Sprintf("%s-%d", name, i), Delay: 3_600_000, Body: []byte(fmt.Sprintf("%s-%d", name, i)), Far: FarArg{Bucket: -1}}
		if policy != "" {
			m.Key = policy + key
		}
		return m
	}
	call := func(n int, f func(i int) PubMessage) *fairCall {
		fc := &fairCall{}
		for i := range n {
			fc.Msgs = append(fc.Msgs, f(i))
		}
		return fc
	}
	held := call(300, func(i int) PubMessage { return msg("held", i, "r", fmt.Sprint("k", i)) })
	run := []*fairCall{
		// keys held: refused (reject), dropped (keep-first), replaced
		// (replace), each call of 40
		call(40, func(i int) PubMessage { return msg("reject", i, "r", fmt.Sprint("k", i)) }),
		call(40, func(i int) PubMessage { return msg("keep", i, "k", fmt.Sprint("k", 40+i)) }),
		call(40, func(i int) PubMessage { return msg("replace", i, "x", fmt.Sprint("k", 80+i)) }),
		// new keys, and no key
		call(40, func(i int) PubMessage { return msg("new", i, "r", fmt.Sprint("n", i)) }),
		call(40, func(i int) PubMessage { return msg("plain", i, "", "") }),
		// the waiting ones again: byte-identical (no-op), another body
		// (refused)
		call(40, func(i int) PubMessage { return held.Msgs[120+i] }),
		call(40, func(i int) PubMessage {
			m := held.Msgs[160+i]
			m.Body = []byte("changed")
			return m
		}),
		// a key of the run itself: the replace call's, then a new one's
		call(40, func(i int) PubMessage { return msg("again", i, "r", fmt.Sprint("k", 80+i)) }),
		call(40, func(i int) PubMessage { return msg("again2", i, "x", fmt.Sprint("n", i)) }),
	}

	state := func(sh Shard) []string {
		var out []string
		for _, h := range []string{sh.Bkeys(), sh.BkeyOf(), sh.Bodies()} {
			all, err := c.HGetAll(ctx, h).Result()
			require.NoError(t, err)
			delete(all, "dummy")
			out = append(out, fmt.Sprint(h[strings.LastIndex(h, ":"):], " ", all))
		}
		waiting, err := c.ZRange(ctx, sh.Waiting(), 0, -1).Result()
		require.NoError(t, err)
		return append(out, fmt.Sprint("waiting ", waiting))
	}
	publish := func(sh Shard, wide bool) (statuses []string, after []string) {
		r, err := Publish(ctx, c, sh, PublishOpts{}, []*fairCall{held})
		require.NoError(t, err)
		require.EqualValues(t, 0, r.Statuses[0])
		want := "listpack"
		if wide {
			for _, h := range []string{sh.Bkeys(), sh.Bodies()} {
				require.NoError(t, c.HSet(ctx, h, "dummy", strings.Repeat("x", 100)).Err())
			}
			want = "hashtable"
		}
		for _, h := range []string{sh.Bkeys(), sh.Bodies()} {
			require.Equal(t, want, c.ObjectEncoding(ctx, h).Val(), h)
		}
		r, err = Publish(ctx, c, sh, PublishOpts{}, run)
		require.NoError(t, err)
		for i := range run {
			dup, refusal, pulls, _ := r.Status(i)
			statuses = append(statuses, fmt.Sprintf("%q %+v %v", dup, refusal, pulls))
		}
		return statuses, state(sh)
	}
	wholeStatus, whole := publish(Keys{Prefix: "listpack"}.Shard("t", 0), false)
	byFieldStatus, byField := publish(Keys{Prefix: "hashtable"}.Shard("t", 0), true)
	require.Equal(t, byFieldStatus, wholeStatus)
	require.Equal(t, byField, whole)
	t.Logf("statuses: %v", wholeStatus)
	// what the lookups found, as the statuses say
	require.Contains(t, wholeStatus[0], "Kind:key Key:k0 Holder:held-0", "a held key is refused")
	require.Equal(t, `"" <nil> []`, wholeStatus[1], "keep-first: dropped")
	require.Equal(t, `"" <nil> []`, wholeStatus[2], "replaced")
	require.Equal(t, `"held-160" <nil> []`, wholeStatus[6], "another body of a waiting message is refused")
	require.Contains(t, wholeStatus[7], "Kind:key Key:k80 Holder:replace-0", "a key the run took is refused")
	require.Contains(t, whole[len(whole)-1], "replace-39")
	require.NotContains(t, whole[len(whole)-1], "held-80 ", "replaced")
	require.NotContains(t, whole[len(whole)-1], "keep-0", "dropped")
}
