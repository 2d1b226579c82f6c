package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// The short scripts a Publish of plain messages runs (append.lua: due now;
// delayed.lua: delayed, before the far tier) store what publish.lua stores
// and answer what it answers, call by call: each case runs once through a
// short script and once through publish.lua (a capacity bound high enough
// never to refuse makes Publish use it), on two partitions, and the
// replies and the partitions' contents are compared.
func TestPublish_ShortScriptsMatchPublishLua(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	type msg struct {
		uuid, body string
		delayMs    int64
	}
	call := func(ms ...msg) *fairCall {
		fc := &fairCall{}
		for _, m := range ms {
			fc.Msgs = append(fc.Msgs, PubMessage{UUID: m.uuid, Delay: m.delayMs, Body: []byte(m.body), Far: FarArg{Bucket: -1}})
		}
		return fc
	}
	cases := []struct {
		name  string
		runs  [][]*fairCall // runs of Publish, each a batch of calls
		delay bool
	}{
		{"due now, one call", [][]*fairCall{{call(msg{"a", "A", 0})}}, false},
		{"due now, calls coalesced, a UUID twice", [][]*fairCall{{call(msg{"a", "A", 0}, msg{"b", "B", 0}), call(msg{"a", "X", 0})}}, false},
		{"delayed, one call", [][]*fairCall{{call(msg{"a", "A", 1000})}}, true},
		{"delayed, several messages and calls", [][]*fairCall{{call(msg{"a", "A", 1000}, msg{"b", "B", 500}), call(msg{"c", "C", 2000})}}, true},
		{"delayed, republished byte-identical: a no-op", [][]*fairCall{{call(msg{"a", "A", 1000})}, {call(msg{"a", "A", 3000})}}, true},
		{"delayed, republished with another body: refused", [][]*fairCall{{call(msg{"a", "A", 1000})}, {call(msg{"b", "B", 1000}, msg{"a", "X", 1000})}}, true},
		// (a call of one message alone takes delayed.lua's path without tables)
		{"delayed, one message republished with another body: refused", [][]*fairCall{{call(msg{"a", "A", 1000})}, {call(msg{"a", "X", 1000})}, {call(msg{"b", "B", 500})}}, true},
		{"delayed, a call of the run takes a UUID a call before it stored", [][]*fairCall{{call(msg{"a", "A", 1000}), call(msg{"a", "X", 1000}), call(msg{"a", "A", 1000}), call(msg{"b", "B", 1000})}}, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			short, general := Shard(fmt.Sprintf("t:{short%d}", i)), Shard(fmt.Sprintf("t:{general%d}", i))
			bound := PublishOpts{MaxReady: 1 << 30}
			if tc.delay {
				bound = PublishOpts{MaxWaiting: 1 << 30}
			}
			for _, batch := range tc.runs {
				rs, err := Publish(ctx, c, short, PublishOpts{}, batch)
				require.NoError(t, err)
				rg, err := Publish(ctx, c, general, bound, batch)
				require.NoError(t, err)
				require.Equal(t, rg.Statuses, rs.Statuses, "statuses")
				require.Equal(t, rg.Lost, rs.Lost, "registration marker")
			}
			require.Equal(t, contents(t, c, general), contents(t, c, short))
		})
	}
}

// contents is what a partition holds that a publish writes: the ready
// stream's bodies, the waiting set's members in due order with their
// bodies, and the sequence counter.
func contents(t *testing.T, c *redis.Client, sh Shard) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	entries, err := c.XRange(ctx, sh.Stream(), "-", "+").Result()
	require.NoError(t, err)
	for _, e := range entries {
		out = append(out, fmt.Sprint("ready ", e.Values))
	}
	ids, err := c.ZRange(ctx, sh.Waiting(), 0, -1).Result()
	require.NoError(t, err)
	for _, id := range ids {
		body, err := c.HGet(ctx, sh.Bodies(), id).Result()
		require.NoError(t, err)
		out = append(out, "waiting "+id+" "+body)
	}
	n, err := c.HLen(ctx, sh.Bodies()).Result()
	require.NoError(t, err)
	seq, _ := c.Get(ctx, sh.seq()).Result()
	return append(out, fmt.Sprint("bodies ", n, " seq ", seq))
}

// A delayed publish wakes the partition's schedulers (note "d") when its
// message is the new earliest one or the partition is dormant, and not
// when the message waits behind an earlier one: through delayed.lua's path
// for a call of one message and through its path for several.
func TestPublish_DelayedWakesOnANewEarliestMessage(t *testing.T) {
	c := freshClient(t)
	ctx := context.Background()
	for _, several := range []bool{false, true} {
		sh := Keys{Prefix: fmt.Sprint("wake", several)}.Shard("t", 0)
		since := wakeNotes(t, c, sh)
		n, count := 0, 1
		if several {
			count = 2
		}
		// notes publishes a message due in delay and returns what the
		// publish sent the schedulers
		notes := func(delay int64) []string {
			t.Helper()
			fc := &fairCall{}
			for range count {
				n++
				fc.Msgs = append(fc.Msgs, PubMessage{UUID: fmt.Sprint("m", n), Delay: delay, Body: []byte("b"), Far: FarArg{Bucket: -1}})
			}
			_, err := Publish(ctx, c, sh, PublishOpts{}, []*fairCall{fc})
			require.NoError(t, err)
			return since()
		}
		require.Equal(t, []string{"d"}, notes(60_000), "the first message (several %v)", several)
		require.Empty(t, notes(120_000), "a message behind it (several %v)", several)
		require.Equal(t, []string{"d"}, notes(30_000), "a new earliest message (several %v)", several)
		require.NoError(t, c.Set(ctx, sh.dormant(), "1", 0).Err())
		require.Equal(t, []string{"d"}, notes(120_000), "a dormant partition (several %v)", several)
	}
}

// Every publish path reads the partition's registration marker and its
// dormancy flag in one EXISTS (reg counted twice): each of the four
// combinations is told apart. A dormant partition is woken (note "d") and
// no longer dormant; a missing marker is written again and reported (Lost).
func TestPublish_ReadsRegistrationAndDormancyTogether(t *testing.T) {
	c := freshClient(t)
	ctx := context.Background()
	paths := []struct {
		name  string
		delay int64
		opts  PublishOpts
	}{
		{"append.lua", 0, PublishOpts{}},
		{"delayed.lua", 60_000, PublishOpts{}},
		{"publish.lua", 0, PublishOpts{MaxReady: 1 << 30}}, // a bound makes Publish use it
	}
	for _, p := range paths {
		for _, registered := range []bool{true, false} {
			for _, dormant := range []bool{true, false} {
				name := fmt.Sprintf("%s, registered %v, dormant %v", p.name, registered, dormant)
				sh := Keys{Prefix: "flags"}.Shard(name, 0)
				since := wakeNotes(t, c, sh)
				if registered {
					require.NoError(t, c.Set(ctx, sh.reg(), "1", 0).Err())
				}
				if dormant {
					require.NoError(t, c.Set(ctx, sh.dormant(), "1", 0).Err())
				}
				// a delayed message behind one already waiting wakes the
				// schedulers only when the partition is dormant
				if p.delay > 0 {
					require.NoError(t, c.ZAdd(ctx, sh.Waiting(), redis.Z{Score: 1, Member: "earlier"}).Err())
				}
				fc := &fairCall{PubArgs{Msgs: []PubMessage{{UUID: "m", Delay: p.delay, Body: []byte("b"), Far: FarArg{Bucket: -1}}}}}
				r, err := Publish(ctx, c, sh, p.opts, []*fairCall{fc})
				require.NoError(t, err, name)
				require.Equal(t, !registered, r.Lost, "%s: reported a lost marker", name)
				require.Equal(t, int64(1), c.Exists(ctx, sh.reg()).Val(), "%s: the marker is written", name)
				require.Equal(t, int64(0), c.Exists(ctx, sh.dormant()).Val(), "%s: not dormant after a publish", name)
				var want []string
				if dormant {
					want = []string{"d"}
				}
				require.Equal(t, want, since(), name)
			}
		}
	}
}
