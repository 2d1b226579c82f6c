package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

func TestLevel_Names(t *testing.T) {
	require.True(t, legacyName("worker-0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11"))
	require.True(t, legacyName("0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11"))
	require.False(t, legacyName(NameAtLevel("worker-0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11", 2)))
	require.False(t, legacyName("worker-9"), "another tool's consumer")
	require.False(t, legacyName("x0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11"))
	require.Equal(t, Level1, NameLevel("worker-0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11"))
	require.Equal(t, Level1, NameLevel("0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11"))
	require.Equal(t, Level1, NameLevel("a~sx"))
	require.Equal(t, Level1, NameLevel("a~s0"))
	require.Equal(t, 2, NameLevel(NameAtLevel("worker-x", 2)))
	require.Equal(t, 7, NameLevel(NameAtLevel("a~s3", 7)))
}

// announce.lua: the level written is the oldest a live reader reads, once
// every live reader has read it for the settle time; an older reader (one
// announcing, or a legacy one the scan saw) brings it down at once; a pin
// caps it; a process leaving or expiring counts no more.
func TestLevel_Announce(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	k := Keys{Prefix: "lv"}
	defer func(d time.Duration) { LevelSettle = d }(LevelSettle)
	LevelSettle = time.Hour

	newP := ProcInfo{ID: "new", Level: 2, Version: "0.2.0", Role: "publisher", Host: "h/1"}
	st, err := Announce(ctx, c, k, newP, true, "", 0, false)
	require.NoError(t, err)
	require.Equal(t, 1, st.Level, "not settled: level 1, which every release reads")
	require.Equal(t, 2, st.Read)

	// The settle time passes (the operator's settle field: no restart).
	require.NoError(t, SetSettle(ctx, c, k, 0))
	st, err = Announce(ctx, c, k, newP, true, "", 0, false)
	require.NoError(t, err)
	require.Equal(t, 2, st.Level)

	// A reader of release 0.1.0, seen by the scan: level 1 at once.
	st, err = Announce(ctx, c, k, newP, true, "consumer x of group g on lv:{t}", LegacyWindow, false)
	require.NoError(t, err)
	require.Equal(t, 1, st.Level)
	require.Equal(t, 1, st.Read)
	require.False(t, st.Legacy.IsZero())
	r, err := ReadRegistry(ctx, c, k)
	require.NoError(t, err)
	require.Equal(t, "consumer x of group g on lv:{t}", r.LegacyWhat)
	require.Len(t, r.Procs, 1)
	require.Equal(t, ProcInfo{ID: "new", Level: 2, Version: "0.2.0", Role: "publisher", Host: "h/1", Expires: r.Procs[0].Expires}, r.Procs[0])

	// Its sighting lapses: back to 2 once settled again.
	require.NoError(t, c.HDel(ctx, k.levels().State(), "legacy").Err())
	require.NoError(t, SetSettle(ctx, c, k, time.Hour))
	st, err = Announce(ctx, c, k, newP, true, "", 0, false)
	require.NoError(t, err)
	require.Equal(t, 1, st.Level, "settling again")
	require.NoError(t, SetSettle(ctx, c, k, 0))
	st, err = Announce(ctx, c, k, newP, true, "", 0, false)
	require.NoError(t, err)
	require.Equal(t, 2, st.Level)

	// An announced reader of level 1 (a release between): 1 at once, until
	// it leaves.
	old := ProcInfo{ID: "old", Level: 1, Version: "0.1.5", Role: "subscriber", Host: "h/2"}
	st, err = Announce(ctx, c, k, old, true, "", 0, false)
	require.NoError(t, err)
	require.Equal(t, 1, st.Level)
	require.Equal(t, 2, st.Live)
	st, err = Announce(ctx, c, k, old, false, "", 0, false)
	require.NoError(t, err)
	require.Equal(t, 2, st.Level)
	require.Equal(t, 1, st.Live)

	// An expired process counts no more.
	_, err = Announce(ctx, c, k, old, true, "", 0, false)
	require.NoError(t, err)
	require.NoError(t, c.ZAdd(ctx, k.levels().Procs(), redis.Z{Score: 1, Member: "old"}).Err())
	st, err = Announce(ctx, c, k, newP, true, "", 0, false)
	require.NoError(t, err)
	require.Equal(t, 2, st.Level)
	require.Equal(t, 1, st.Live)

	// A pin caps the level written, and never raises it.
	require.NoError(t, PinLevel(ctx, c, k, 1))
	st, err = Announce(ctx, c, k, newP, true, "", 0, false)
	require.NoError(t, err)
	require.Equal(t, 1, st.Level)
	require.Equal(t, 2, st.Agreed)
	r, err = ReadRegistry(ctx, c, k)
	require.NoError(t, err)
	require.Equal(t, 1, r.Level())
	require.NoError(t, PinLevel(ctx, c, k, 0))
	st, err = Announce(ctx, c, k, newP, true, "", 0, false)
	require.NoError(t, err)
	require.Equal(t, 2, st.Level)
	require.ErrorContains(t, PinLevel(ctx, c, k, LevelNewest+1), fmt.Sprintf("this release knows levels 1 to %d", LevelNewest))

	// A newer release's process reads a newer level; the level written
	// stays the oldest live reader's, 2.
	newer := ProcInfo{ID: "newer", Level: LevelNewest + 1, Version: "9.9.9", Role: "manager", Host: "h/3"}
	st, err = Announce(ctx, c, k, newer, true, "", 0, false)
	require.NoError(t, err)
	require.Equal(t, 2, st.Level)
	require.Equal(t, 2, st.Read)
}

// On keys where nothing was ever stored, the first process writes the
// newest level at once: no release wrote there, so a rollback finds
// nothing of the newer level that it needs the settle time for.
func TestLevel_FreshStartsAtTheNewestLevel(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	defer func(d time.Duration) { LevelSettle = d }(LevelSettle)
	LevelSettle = time.Hour

	k := Keys{Prefix: "fresh"}
	fresh, err := Fresh(ctx, c, k)
	require.NoError(t, err)
	require.True(t, fresh)
	st, err := Announce(ctx, c, k, ProcInfo{ID: "a", Level: 2}, true, "", 0, fresh)
	require.NoError(t, err)
	require.Equal(t, 2, st.Level)

	// Topics registered and their groups created (SubscribeInitialize) but
	// nothing stored: fresh.
	used := Keys{Prefix: "used"}
	require.NoError(t, c.SAdd(ctx, used.Topics(), "orders").Err())
	require.NoError(t, c.XGroupCreateMkStream(ctx, used.Shard("orders", 0).Stream(), "g", "$").Err())
	fresh, err = Fresh(ctx, c, used)
	require.NoError(t, err)
	require.True(t, fresh)
	require.NoError(t, c.ZAdd(ctx, used.Shard("orders", 0).Waiting(), redis.Z{Score: 1, Member: "m"}).Err())
	fresh, err = Fresh(ctx, c, used)
	require.NoError(t, err)
	require.False(t, fresh)
	st, err = Announce(ctx, c, used, ProcInfo{ID: "a", Level: 2}, true, "", 0, fresh)
	require.NoError(t, err)
	require.Equal(t, 1, st.Level)
}

// ScanLegacy sees a consumer whose name has no level mark and that read
// within the window, and a scheduler lease or membership of such a name;
// consumers marked with a level, and idle ones, are not readers to wait for.
func TestLevel_ScanLegacy(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	k := Keys{Prefix: "scan"}
	sh := k.Shard("t", 0)
	sh1 := k.Shard("t", 1)
	require.NoError(t, c.XGroupCreateMkStream(ctx, sh.Stream(), "g", "0").Err())
	// Redis 7.0 counts a consumer's reads that found something only.
	read := func(consumer string) {
		require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: sh.Stream(), Values: []string{"m", "x"}}).Err())
		require.NoError(t, c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: consumer, Streams: []string{sh.Stream(), ">"}, Count: 1, Block: -1}).Err())
	}

	seen, err := ScanLegacy(ctx, c, []Shard{sh, sh1}, time.Minute)
	require.NoError(t, err)
	require.Empty(t, seen)

	read(NameAtLevel("w-1", 2))
	seen, err = ScanLegacy(ctx, c, []Shard{sh, sh1}, time.Minute)
	require.NoError(t, err)
	require.Empty(t, seen)

	read("w-other") // not named as release 0.1.0 names its consumers
	seen, err = ScanLegacy(ctx, c, []Shard{sh, sh1}, time.Minute)
	require.NoError(t, err)
	require.Empty(t, seen)
	read("w-old-0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11")
	seen, err = ScanLegacy(ctx, c, []Shard{sh, sh1}, time.Minute)
	require.NoError(t, err)
	require.Contains(t, seen, "consumer w-old-0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11 of group g")
	time.Sleep(20 * time.Millisecond)
	seen, err = ScanLegacy(ctx, c, []Shard{sh, sh1}, 10*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, seen, "idle beyond the window: gone")

	require.NoError(t, c.Set(ctx, sh1.Lease(), "0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11", time.Minute).Err())
	seen, err = ScanLegacy(ctx, c, []Shard{sh, sh1}, 10*time.Millisecond)
	require.NoError(t, err)
	require.Contains(t, seen, "scheduler 0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11")
	require.NoError(t, c.Set(ctx, sh1.Lease(), NameAtLevel("x", 2), time.Minute).Err())

	require.NoError(t, c.ZAdd(ctx, sh.schedulers(), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "1b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11"}).Err())
	seen, err = ScanLegacy(ctx, c, []Shard{sh, sh1}, 10*time.Millisecond)
	require.NoError(t, err)
	require.Contains(t, seen, "scheduler 1b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11")
	require.NoError(t, c.Del(ctx, sh.schedulers()).Err())

	// Idle processes, seen by what they listen to: a channel without its
	// level mark is an older release's.
	listen := func(channels ...string) *redis.PubSub {
		ps := c.Subscribe(ctx, channels...)
		_, err := ps.Receive(ctx)
		require.NoError(t, err)
		for range channels[1:] {
			_, err := ps.Receive(ctx)
			require.NoError(t, err)
		}
		return ps
	}
	newSub := listen(LevelMark(sh1.Bell()), sh1.Bell(), LevelMark(sh1.Wake()), sh1.Wake())
	seen, err = ScanLegacy(ctx, c, []Shard{sh, sh1}, 10*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, seen)
	oldSub := listen(sh1.Bell())
	seen, err = ScanLegacy(ctx, c, []Shard{sh, sh1}, 10*time.Millisecond)
	require.NoError(t, err)
	require.Contains(t, seen, "1 subscriber process(es) waiting on scan:{t~1}:p1:bell")
	require.NoError(t, oldSub.Close())
	oldSched := listen(sh1.Wake())
	seen, err = ScanLegacy(ctx, c, []Shard{sh, sh1}, 10*time.Millisecond)
	require.NoError(t, err)
	require.Contains(t, seen, "1 scheduler process(es) listening on scan:{t~1}:p1:wake")
	require.NoError(t, oldSched.Close())

	// A listener without the mark that is gone when the scan counts again
	// (legacyConfirm later) is no reader of release 0.1.0: the scan counts
	// again 2 s after its first count, and the listener leaves 300 ms after
	// the scan began (a scan slower than that to count saw none at all).
	defer func(d time.Duration) { legacyConfirm = d }(legacyConfirm)
	legacyConfirm = 2 * time.Second
	brief := listen(sh1.Bell())
	left := make(chan error, 1)
	time.AfterFunc(300*time.Millisecond, func() { left <- brief.Close() })
	seen, err = ScanLegacy(ctx, c, []Shard{sh, sh1}, 10*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, <-left)
	require.Empty(t, seen, "a count of a moment")
	require.NoError(t, newSub.Close())
}

// One live process at a time is given the scan, until it leaves or stops
// announcing.
func TestLevel_ScanGivenToOne(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	k := Keys{Prefix: "sc"}
	a, b := ProcInfo{ID: "a", Level: 2}, ProcInfo{ID: "b", Level: 2}
	st, err := Announce(ctx, c, k, a, true, "", 0, false)
	require.NoError(t, err)
	require.True(t, st.Scan)
	st, err = Announce(ctx, c, k, b, true, "", 0, false)
	require.NoError(t, err)
	require.False(t, st.Scan)
	st, err = Announce(ctx, c, k, a, true, "", 0, false)
	require.NoError(t, err)
	require.True(t, st.Scan, "kept by its holder")
	_, err = Announce(ctx, c, k, a, false, "", 0, false)
	require.NoError(t, err)
	st, err = Announce(ctx, c, k, b, true, "", 0, false)
	require.NoError(t, err)
	require.True(t, st.Scan, "taken at once when its holder left")
	require.NoError(t, c.HSet(ctx, k.levels().State(), "scanuntil", 1).Err())
	st, err = Announce(ctx, c, k, a, true, "", 0, false)
	require.NoError(t, err)
	require.True(t, st.Scan, "taken when its holder stopped announcing")
}
