package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// ffEnv is a partition on a real Redis, and helpers to publish to it as
// the Publisher does (FarArgOf, Place).
type ffEnv struct {
	t      *testing.T
	ctx    context.Context
	c      *redis.Client
	sh     Shard
	far3   bool      // far messages stored in format 3
	shapes FarShapes // format 3's shape, as a publisher keeps it
}

func newFFEnv(t *testing.T) *ffEnv {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return &ffEnv{t: t, ctx: context.Background(), c: c, sh: Shard("t:{ff}:0")}
}

// publish publishes each of uuids as a call of its own, delayed by delay,
// and returns the statuses.
func (e *ffEnv) publish(delay time.Duration, body string, uuids ...string) []any {
	e.t.Helper()
	now := time.Now().UnixMilli()
	var calls []*fairCall
	for _, id := range uuids {
		f := FarArgOf(id, delay, true)
		f.Format3 = e.far3
		f.Place(now)
		calls = append(calls, &fairCall{PubArgs: PubArgs{Msgs: []PubMessage{{UUID: id, Delay: delay.Milliseconds(), Body: Encode(message.NewMessage(id, []byte(body))), Far: f}}}})
	}
	var out []any
	for c := 0; c < len(calls); c += 500 {
		r, err := Publish(e.ctx, e.c, e.sh, PublishOpts{Shapes: &e.shapes}, calls[c:min(c+500, len(calls))])
		require.NoError(e.t, err)
		out = append(out, r.Statuses...)
	}
	return out
}

// far publishes n new messages due in an hour (far) and returns their UUIDs.
func (e *ffEnv) far(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = watermill.NewUUID()
	}
	for _, s := range e.publish(time.Hour, "far ", ids...) {
		require.Equal(e.t, int64(0), s)
	}
	return ids
}

// indexReads counts the HGETs Redis ran (publish.lua's far index lookups:
// nothing else of a test reads a hash field by field).
func (e *ffEnv) indexReads() int64 {
	e.t.Helper()
	return commandCalls(e.t, e.c, "hget")
}

// commandCalls is how many times Redis has run the commands cmds (INFO
// commandstats), the ones scripts call included.
func commandCalls(t *testing.T, c *redis.Client, cmds ...string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var n int64
	for _, cmd := range cmds {
		if m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info); m != nil {
			k, _ := strconv.ParseInt(m[1], 10, 64)
			n += k
		}
	}
	return n
}

// nearFresh publishes n new messages due in 15 s (near, looked up in the far
// index unless the filter says no) and returns how many index reads they
// cost.
func (e *ffEnv) nearFresh(n int) int64 {
	e.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = watermill.NewUUID()
	}
	before := e.indexReads()
	for _, s := range e.publish(15*time.Second, "near ", ids...) {
		require.Equal(e.t, int64(0), s)
	}
	return e.indexReads() - before
}

// requireAllFound checks that a near publish of each far UUID, with another
// body, is told to pull it from the far tier first: the reuse is seen.
func (e *ffEnv) requireAllFound(ids []string) {
	e.t.Helper()
	for i, s := range e.publish(15*time.Second, "other ", ids...) {
		require.Equal(e.t, []any{"pull", ids[i]}, s, "a reused far UUID was not found")
	}
}

func (e *ffEnv) meta() map[string]string {
	m, err := e.c.HGetAll(e.ctx, e.sh.FarMeta()).Result()
	require.NoError(e.t, err)
	return m
}

// level is the storage level of the env's processes: 3 when they write
// format 3, else 2 (a reader of release 0.2.0 lives).
func (e *ffEnv) level() int {
	if e.far3 {
		return Level3
	}
	return Level2
}

func (e *ffEnv) trimSays() bool {
	r, err := Trim(e.ctx, e.c, e.sh, 0, e.level())
	require.NoError(e.t, err)
	return r.FarFilter
}

// The filter's bits are where Go computes them (a rebuild sets them there,
// publish.lua where it reads them), and a near publish into a partition
// with far messages reads the far index only on the filter's rare "maybe",
// yet every reuse of a far UUID is still seen.
func TestFarFilter_SkipsLookupsAndMissesNoReuse(t *testing.T) {
	e := newFFEnv(t)
	ids := e.far(2000)
	require.Equal(t, map[string]string{"n": "2000", "fm": "2000", "fb": "64", "fi": "2000"}, pick(e.meta(), "n", "fm", "fb", "fi"))
	for _, id := range ids {
		bit, err := e.c.GetBit(e.ctx, e.sh.farFilter(), int64(farSel(farField(id)))%(farFilterMinBlocks*512)).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), bit, "the bit of %s", id)
	}
	reads := e.nearFresh(2000)
	require.Less(t, reads, int64(200), "a near publish read the far index though the filter says the UUID is not there")
	e.requireAllFound(ids)
	require.False(t, e.trimSays(), "a filter within its capacity needs no rebuild")
}

// A publisher learns the filter's size from its runs and then sends a
// message only looked up with its bit, not its selector: the filter still
// answers for it, and a size the publisher knows wrong (the filter was
// rebuilt meanwhile, or the caller is confused) costs a run again with the
// right one, never a lookup skipped. Both selector modes.
func TestFarFilter_BitsTheCallerKnows(t *testing.T) {
	for _, far3 := range []bool{false, true} {
		t.Run(fmt.Sprintf("format3=%v", far3), func(t *testing.T) {
			e := newFFEnv(t)
			e.far3 = far3
			ids := e.far(1500) // with the 300 below, within the filter's capacity
			bits := uint64(farFilterMinBlocks * 512)
			require.Equal(t, bits, e.shapes.load(e.sh).FilterBits, "the size a publisher learned")
			require.Less(t, e.nearFresh(2000), int64(300))
			e.requireAllFound(ids)

			// far messages of a publisher that knows the size carry their
			// selectors, and set their bits
			more := e.far(300)
			for _, id := range more {
				sel := uint64(farSel(farField(id)))
				if far3 {
					sel = uint64(fpSel(fpHash(farField(id))))
				}
				bit, err := e.c.GetBit(e.ctx, e.sh.farFilter(), int64(sel%bits)).Result()
				require.NoError(t, err)
				require.Equal(t, int64(1), bit, "the bit of %s", id)
			}
			ids = append(ids, more...)

			for _, wrong := range []uint64{bits * 2, bits - 512, 1} {
				shape := e.shapes.load(e.sh)
				shape.FilterBits = wrong
				e.shapes.store(e.sh, shape)
				runs := commandCalls(t, e.c, "evalsha")
				require.Less(t, e.nearFresh(100), int64(40), "a publisher that knew the size wrong (%d) read the index for each message", wrong)
				require.Equal(t, int64(2), commandCalls(t, e.c, "evalsha")-runs, "runs of a publish of 100 whose publisher knew the size wrong: once, then again with it")
				require.Equal(t, bits, e.shapes.load(e.sh).FilterBits)
				shape.FilterBits = wrong
				e.shapes.store(e.sh, shape)
				e.requireAllFound(ids)
			}

			// untrusted (an older release moved n): every message is
			// looked up, whatever size the publisher knew
			require.NoError(t, e.c.HIncrBy(e.ctx, e.sh.FarMeta(), "n", 1).Err())
			// (one index read a message: with far3, format 2's index has no shard)
			require.Equal(t, int64(100), e.nearFresh(100))
			require.Zero(t, e.shapes.load(e.sh).FilterBits, "an untrusted filter's size is not kept")
		})
	}
}

// Past its capacity the filter is not trusted (every near publish reads the
// index, as without one); trim.lua asks for a rebuild, after which it is
// trusted again, sized for the far tier, and holds every far message.
func TestFarFilter_PastCapacityRebuilt(t *testing.T) {
	e := newFFEnv(t)
	ids := e.far(farFilterMinBlocks*farFilterPerBlock + 100)
	require.Equal(t, int64(300), e.nearFresh(300), "an overfull filter was trusted")
	require.True(t, e.trimSays())
	require.NoError(t, RebuildFarFilter(e.ctx, e.c, e.sh, "r1", e.level()))
	m := e.meta()
	require.Equal(t, strconv.FormatInt(farFilterBlocks(int64(len(ids))), 10), m["fb"])
	require.Equal(t, strconv.Itoa(len(ids)), m["fi"])
	require.NotContains(t, m, "fr")
	require.NotContains(t, m, "ft")
	require.False(t, e.trimSays())
	require.Less(t, e.nearFresh(2000), int64(200))
	e.requireAllFound(ids)
}

// Far messages published while a rebuild reads the index are in the filter
// it makes, whether they came before or after the index was read; a
// rebuild started later takes over from one under way.
func TestFarFilter_RebuildKeepsPublishesMeanwhile(t *testing.T) {
	e := newFFEnv(t)
	ids := e.far(3000)
	b, err := BeginFarFilter(e.ctx, e.c, e.sh, "r1", e.level())
	require.NoError(t, err)
	ids = append(ids, e.far(500)...)
	require.NoError(t, b.Scan(e.ctx, e.c))
	ids = append(ids, e.far(500)...)
	ok, err := b.Finish(e.ctx, e.c)
	require.NoError(t, err)
	require.True(t, ok)
	// the 500 published before the index was read count twice: fi errs
	// on the side of a rebuild too early
	fi, _ := strconv.Atoi(e.meta()["fi"])
	require.GreaterOrEqual(t, fi, 4000)
	require.LessOrEqual(t, fi, 4500)
	require.Less(t, e.nearFresh(2000), int64(200))
	e.requireAllFound(ids)

	// two at once: the later one wins, the earlier one stops
	b1, err := BeginFarFilter(e.ctx, e.c, e.sh, "r2", e.level())
	require.NoError(t, err)
	b2, err := BeginFarFilter(e.ctx, e.c, e.sh, "r3", e.level())
	require.NoError(t, err)
	require.NoError(t, b1.Scan(e.ctx, e.c))
	require.NoError(t, b2.Scan(e.ctx, e.c))
	ok, err = b1.Finish(e.ctx, e.c)
	require.NoError(t, err)
	require.False(t, ok, "a rebuild taken over finished")
	ok, err = b2.Finish(e.ctx, e.c)
	require.NoError(t, err)
	require.True(t, ok)
	e.requireAllFound(ids)
}

// A far message added or removed by a process of an older version (n
// moves, fm does not) makes the filter untrusted, and so does a filter
// missing while the far tier holds messages (all written by an older
// version, fm missing too): every near publish reads the index, and
// trim.lua asks for a rebuild.
func TestFarFilter_PreviousVersionMeansLookups(t *testing.T) {
	e := newFFEnv(t)
	ids := e.far(100)
	require.Less(t, e.nearFresh(50), int64(20))

	// the previous version's publish.lua adds a far message: n + 1 only
	require.NoError(t, e.c.HIncrBy(e.ctx, e.sh.FarMeta(), "n", 1).Err())
	require.Equal(t, int64(50), e.nearFresh(50))
	require.True(t, e.trimSays())
	require.NoError(t, RebuildFarFilter(e.ctx, e.c, e.sh, "r0", e.level()))
	require.Less(t, e.nearFresh(50), int64(20))
	// and its farpull.lua moves one out: n - 1 only
	require.NoError(t, e.c.HIncrBy(e.ctx, e.sh.FarMeta(), "n", -1).Err())
	require.Equal(t, int64(50), e.nearFresh(50))
	require.NoError(t, RebuildFarFilter(e.ctx, e.c, e.sh, "r1", e.level()))

	require.NoError(t, e.c.Del(e.ctx, e.sh.farFilter()).Err())
	require.NoError(t, e.c.HDel(e.ctx, e.sh.FarMeta(), "fb", "fi", "fm").Err())
	require.Equal(t, int64(50), e.nearFresh(50))
	require.True(t, e.trimSays())
	require.NoError(t, RebuildFarFilter(e.ctx, e.c, e.sh, "r2", e.level()))
	require.Less(t, e.nearFresh(500), int64(50))
	e.requireAllFound(ids)
}

// When the far tier empties the filter goes with it, and the next far
// message starts a small one; one that a rebuild under way installs after
// that is dropped at the next trim; a rebuild that never finished (its
// process died) is started again after FarFilterStale.
func TestFarFilter_EmptiedAndAbandoned(t *testing.T) {
	e := newFFEnv(t)
	noFilter := func() {
		t.Helper()
		n, err := e.c.Exists(e.ctx, e.sh.farFilter()).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the far filter is left")
		require.Empty(t, pick(e.meta(), "fb", "fi", "fm"))
	}
	ids := e.far(100)
	require.NoError(t, FarPullMany(e.ctx, e.c, e.sh, ids))
	noFilter()
	require.False(t, e.trimSays())

	ids = e.far(10)
	b, err := BeginFarFilter(e.ctx, e.c, e.sh, "r1", e.level())
	require.NoError(t, err)
	require.NoError(t, b.Scan(e.ctx, e.c))
	require.NoError(t, FarPullMany(e.ctx, e.c, e.sh, ids))
	ok, err := b.Finish(e.ctx, e.c)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, e.trimSays(), "an empty far tier's filter is kept")
	require.NoError(t, RebuildFarFilter(e.ctx, e.c, e.sh, "r2", e.level()))
	noFilter()
	require.False(t, e.trimSays())
	ids = e.far(10)
	require.Equal(t, map[string]string{"fb": "64", "fi": "10", "fm": "10"}, pick(e.meta(), "fb", "fi", "fm"))

	_, err = BeginFarFilter(e.ctx, e.c, e.sh, "dead", e.level())
	require.NoError(t, err)
	require.False(t, e.trimSays(), "a rebuild under way was started again")
	stale := FarFilterStale
	FarFilterStale = 0
	t.Cleanup(func() { FarFilterStale = stale })
	require.True(t, e.trimSays(), "an abandoned rebuild was not started again")
	require.NoError(t, RebuildFarFilter(e.ctx, e.c, e.sh, "r3", e.level()))
	e.requireAllFound(ids)
}

// farFilterBlocks is the size ffilter.lua's ff_blocks gives a filter
// rebuilt for n far messages: room for half as many again, in whole 4 KB
// pages.
func farFilterBlocks(n int64) int64 {
	b := (n*3/2 + farFilterPerBlock - 1) / farFilterPerBlock
	b = (b + farFilterMinBlocks - 1) / farFilterMinBlocks * farFilterMinBlocks
	return min(max(b, farFilterMinBlocks), farFilterMaxBlocks)
}

func pick(m map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// farSel's FNV-1a is hash/fnv's.
func TestFarFilter_HashIsFNV1a(t *testing.T) {
	for _, field := range []string{"", "a", "order-1", farField(watermill.NewUUID())} {
		h := fnv.New64a()
		h.Write([]byte(field))
		require.Equal(t, uint32(h.Sum64()), farSel(field), "%q", field)
	}
}

// Far messages of format 3 are in the filter too, at their fingerprint's
// bit: a near publish skips format 3's index on a 0 as format 2's, every
// reuse is still seen, and a rebuild reads the bits back from format 3's
// index (while publishes add more meanwhile).
func TestFarFilter_Format3(t *testing.T) {
	e := newFFEnv(t)
	e.far3 = true
	ids := e.far(2000)
	require.Equal(t, map[string]string{"n": "2000", "fm": "2000", "fb": "64", "fi": "2000"}, pick(e.meta(), "n", "fm", "fb", "fi"))
	require.Equal(t, "3", e.meta()["fs"], "a filter made by a format 3 writer has fpSel's selectors")
	for _, id := range ids {
		bit, err := e.c.GetBit(e.ctx, e.sh.farFilter(), int64(fpSel(fpHash(farField(id))))%(farFilterMinBlocks*512)).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), bit, "the bit of %s", id)
	}
	require.Less(t, e.nearFresh(2000), int64(300), "index reads of near publishes (on a maybe: format 3's index, and format 2's where one EXISTS finds a shard of it)")
	e.requireAllFound(ids)

	ids = append(ids, e.far(farFilterMinBlocks*farFilterPerBlock)...)
	require.Equal(t, int64(300), e.nearFresh(300), "an overfull filter was trusted, or format 2's index read though none of its shards exists")
	require.True(t, e.trimSays())
	b, err := BeginFarFilter(e.ctx, e.c, e.sh, "r1", Level3)
	require.NoError(t, err)
	ids = append(ids, e.far(300)...) // before the index is read
	require.NoError(t, b.Scan(e.ctx, e.c))
	ids = append(ids, e.far(300)...) // after
	ok, err := b.Finish(e.ctx, e.c)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, e.trimSays())
	require.Less(t, e.nearFresh(2000), int64(300))
	e.requireAllFound(ids)
}

// Without a filter to trust, a near publish reads format 2's index only
// when one EXISTS finds a shard of it among the call's: a tier of format
// 3 alone costs one index read a message, not two, and a message of format
// 2 among many new ones is still found, before and after its shard is the
// only one left.
func TestFarFilter_Format2ShardsAbsent(t *testing.T) {
	e := newFFEnv(t)
	ids2 := e.far(3) // format 2, as a process of release 0.2.0 writes
	e.far3 = true
	ids3 := e.far(farFilterMinBlocks*farFilterPerBlock + 100) // past the filter's size
	require.True(t, e.trimSays(), "the filter is not trusted")

	// each reused UUID in a run of 300 new ones (calls of one message)
	mixed := func(id string) {
		t.Helper()
		ids := []string{id}
		for range 299 {
			ids = append(ids, watermill.NewUUID())
		}
		st := e.publish(15*time.Second, "other ", ids...)
		require.Equal(t, []any{"pull", id}, st[0], "a reused far UUID was not found")
		for _, s := range st[1:] {
			require.Equal(t, int64(0), s)
		}
	}
	pull := func(id string) {
		t.Helper()
		_, _, found, err := FarPull(e.ctx, e.c, e.sh, id, false)
		require.NoError(t, err)
		require.True(t, found)
	}
	for _, id := range append(ids2, ids3[7]) { // the last of format 2 with its shard alone
		mixed(id)
		pull(id)
	}
	require.Equal(t, int64(500), e.nearFresh(500), "index reads with format 2 drained: format 3's, one a message")
	mixed(ids3[8])
}

// The filter's selectors have a mode (farSel's, as releases up to 0.2.0
// have them, or fpSel's, as a process writing format 3): a caller of the
// other mode neither trusts the filter nor keeps it trusted (it moves n
// and not fm), so it is rebuilt, in the scheduler's mode, from both
// formats' indexes; every reuse is seen throughout.
func TestFarFilter_Modes(t *testing.T) {
	e := newFFEnv(t)
	e.far3 = true
	ids := e.far(500)
	require.Less(t, e.nearFresh(100), int64(30))

	// a process at farSel's selectors (writing format 2) reads both
	// indexes, and its far messages leave the filter untrusted
	e.far3 = false
	// (format 2's too when one EXISTS finds a shard of it among the call's)
	require.GreaterOrEqual(t, e.nearFresh(100), int64(100), "a filter of the other mode was trusted (format 3's index read for each)")
	ids = append(ids, e.far(100)...)
	require.Equal(t, map[string]string{"n": "600", "fm": "500", "fs": "3"}, pick(e.meta(), "n", "fm", "fs"))
	e.far3 = true
	require.GreaterOrEqual(t, e.nearFresh(100), int64(100), "an untrusted filter: format 3's index read for each")
	e.requireAllFound(ids)
	require.True(t, e.trimSays())

	// rebuilt at fpSel's selectors: format 2's fields get theirs
	require.NoError(t, RebuildFarFilter(e.ctx, e.c, e.sh, "r1", Level3))
	require.Equal(t, "3", e.meta()["fs"])
	require.Less(t, e.nearFresh(100), int64(30))
	e.requireAllFound(ids)

	// a rebuild at farSel's while fpSel's publishes go on: they set the
	// wrong bits in the filter being rebuilt, so it is not trusted
	b, err := BeginFarFilter(e.ctx, e.c, e.sh, "r2", Level2)
	require.NoError(t, err)
	ids = append(ids, e.far(50)...)
	require.NoError(t, b.Scan(e.ctx, e.c))
	ok, err := b.Finish(e.ctx, e.c)
	require.NoError(t, err)
	require.True(t, ok)
	require.NotContains(t, e.meta(), "fs")
	require.True(t, e.trimSays())
	e.far3 = false
	require.GreaterOrEqual(t, e.nearFresh(100), int64(100), "a filter missing bits was trusted")
	e.requireAllFound(ids)

	// rebuilt at farSel's (a rollback to level 2 with format 3 messages
	// still far): it cannot hold format 3's fingerprints (their far fields
	// are not in the index), so a lookup reads format 3's index for each
	// message, format 2's on a 1 only
	require.NoError(t, RebuildFarFilter(e.ctx, e.c, e.sh, "r3", Level2))
	require.NotContains(t, e.meta(), "fs")
	reads := e.nearFresh(100)
	require.GreaterOrEqual(t, reads, int64(100))
	require.Less(t, reads, int64(130))
	e.requireAllFound(ids)
	require.False(t, e.trimSays())
	// the level moves on with no far message written since: a scheduler
	// of the new level has the filter rebuilt at its selectors
	e.far3 = true
	require.True(t, e.trimSays(), "a filter no publisher of the level trusts")
	e.far3 = false

	// and the last far message gone, the next one's filter has its mode
	require.NoError(t, e.c.Del(e.ctx, e.sh.FarMeta()).Err())
	e.far3 = true
	e.far(1)
	require.Equal(t, map[string]string{"n": "1", "fm": "1", "fs": "3"}, pick(e.meta(), "n", "fm", "fs"))
}

// A filter not trusted when its rebuild starts stays untrusted until the
// rebuild ends: the rebuild counts fm as n from its start, which would
// otherwise make a filter missing a far message's bit trusted again.
func TestFarFilter_UntrustedWhileRebuilt(t *testing.T) {
	e := newFFEnv(t)
	ids := e.far(100)
	// a process of an older version adds a far message: n + 1 only
	require.NoError(t, e.c.HIncrBy(e.ctx, e.sh.FarMeta(), "n", 1).Err())
	b, err := BeginFarFilter(e.ctx, e.c, e.sh, "r1", e.level())
	require.NoError(t, err)
	require.Equal(t, int64(50), e.nearFresh(50), "a filter untrusted before its rebuild was trusted during it")
	require.NoError(t, b.Scan(e.ctx, e.c))
	ok, err := b.Finish(e.ctx, e.c)
	require.NoError(t, err)
	require.True(t, ok)
	require.Less(t, e.nearFresh(50), int64(20))
	e.requireAllFound(ids)
}
