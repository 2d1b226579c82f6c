package store

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// spec3 is a message pub3 publishes into the env's bucket.
type spec3 struct {
	id    string
	dueIn time.Duration // from the bucket's start
	key   string        // business key ("" for none), policy replace
	prio  bool
	// keyOther: the place of the entry at the key's fingerprint that a
	// lookup found another key's (FarArg.KeyElsewhere)
	keyOther string
}

// pub3 publishes specs as one call through publish.lua, as a publisher
// writing format 3 does (FarArg.Format3), learning the shape in shapes; it
// returns the call's status.
func (e *far3Env) pub3(shapes *FarShapes, specs ...spec3) any {
	start := farBucketStart(e.b).UnixMilli()
	now := time.Now().UnixMilli()
	msgs := make([]PubMessage, len(specs))
	for i, s := range specs {
		delay := time.Duration(start-now)*time.Millisecond + s.dueIn
		f := FarArgOf(s.id, delay, true)
		f.Format3 = true
		f.Place(now)
		f.KeyElsewhere(s.keyOther)
		require.Equal(e.t, e.b, f.Bucket, "placed in the env's bucket")
		key := ""
		if s.key != "" {
			key = "x" + s.key
		}
		msgs[i] = PubMessage{UUID: s.id, Delay: delay.Milliseconds(), Key: key, Prio: s.prio, Far: f,
			Body: Encode(message.NewMessage(s.id, []byte("payload of "+s.id)))}
	}
	return e.send(shapes, msgs)
}

func (e *far3Env) send(shapes *FarShapes, msgs []PubMessage) any {
	r, err := Publish(e.ctx, e.c, e.sh, PublishOpts{Shapes: shapes}, []*fairCall{{PubArgs{Msgs: msgs}}})
	require.NoError(e.t, err)
	return r.Statuses[0]
}

// pub3New is pub3 for messages none of which is far yet, as the publisher
// runs it: a message whose fingerprint's entry is another's is pulled,
// not found, and sent again without that lookup (NotFar).
func (e *far3Env) pub3New(shapes *FarShapes, s spec3) any {
	st := e.pub3(shapes, s)
	if pull, ok := st.([]any); ok {
		require.Equal(e.t, []any{"pull", s.id}, pull)
		_, _, found, err := FarPull(e.ctx, e.c, e.sh, s.id, false)
		require.NoError(e.t, err)
		require.False(e.t, found)
		start := farBucketStart(e.b).UnixMilli()
		now := time.Now().UnixMilli()
		delay := time.Duration(start-now)*time.Millisecond + s.dueIn
		f := FarArgOf(s.id, delay, true)
		f.Format3 = true
		f.Place(now)
		f.NotFar()
		st = e.send(shapes, []PubMessage{{UUID: s.id, Delay: delay.Milliseconds(), Far: f,
			Body: Encode(message.NewMessage(s.id, []byte("payload of "+s.id)))}})
	}
	return st
}

// peek finds id in the far tier (FarPull, only reading).
func (e *far3Env) peek(id string) bool {
	_, _, found, err := FarPull(e.ctx, e.c, e.sh, id, true)
	require.NoError(e.t, err)
	return found
}

// newWriteEnv is a far3Env whose partition has no format 3 index yet.
func newWriteEnv(t *testing.T) *far3Env {
	e := newFar3Env(t, fpShape{L: fpMinLevel})
	require.NoError(t, e.c.HDel(e.ctx, e.sh.FarMeta(), fpShapeFields...).Err())
	return e
}

// A publisher writing format 3 stores far messages as format 3 elements
// indexed by fingerprint (no format 2 index entry, no far filter bit),
// starts the index's shape, finds them again (a retried publish), and the
// scheduler unpacks them with their keys and priorities.
func TestFar3_Write(t *testing.T) {
	e := newWriteEnv(t)
	var shapes FarShapes
	require.Equal(t, int64(0), e.pub3(&shapes,
		spec3{id: idA, dueIn: 10 * time.Second},
		spec3{id: idB, dueIn: 20 * time.Second, key: "key-b", prio: true},
		spec3{id: idD, dueIn: 30 * time.Second}))
	require.Equal(t, fpShape{L: fpMinLevel, Set: true}, shapes.load(e.sh), "learnt from the run")
	els := e.c.LRange(e.ctx, e.sh.FarList(e.b), 0, -1).Val()
	require.Len(t, els, 3)
	for _, el := range els {
		require.Equal(t, byte(farFormat3), el[0])
	}
	meta := e.c.HGetAll(e.ctx, e.sh.FarMeta()).Val()
	require.Equal(t, "3", meta["n"])
	require.Equal(t, "3", meta["fm"], "fm moves with n")
	require.Equal(t, "11", meta["iL"])
	require.Equal(t, "0", meta["iS"])
	require.Equal(t, "3", meta["fi"], "counted in the far filter")
	for _, id := range []string{idA, idB, idD} {
		require.Zero(t, e.c.Exists(e.ctx, e.sh.farIndex(farShard(farField(id)))).Val(), "no format 2 entry")
		bit, err := e.c.GetBit(e.ctx, e.sh.farFilter(), int64(fpSel(fpHash(farField(id))))%(farFilterMinBlocks*512)).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), bit, "the format 3 bit of %s", id)
	}
	idx := e.index()
	require.Len(t, idx, 4, "three UUIDs' entries and a business key's")
	kh := fpKeyHash("key-b")
	keyEntry := fmt.Sprintf("%s/%x", e.sh.fpIndex(fpShape{L: fpMinLevel}.shard(kh)), fpField(kh))
	for k, v := range idx {
		if k == keyEntry {
			require.Equal(t, fmt.Sprintf("%x", fpLoc(e.b, 1, false, true)), v, "the key's entry: B's place, flagged a key's")
			continue
		}
		require.Len(t, v, 10, "a 5-byte place: %s", k)
	}
	require.Zero(t, e.c.HExists(e.ctx, e.sh.Bkeys(), "key-b").Val(), "no far mark: the index marks the key")
	require.Equal(t, "1", meta["nk"])

	// A retried publish finds them (pull first); a new one does not.
	require.Equal(t, []any{"pull", idA}, e.pub3(&shapes, spec3{id: idA, dueIn: 10 * time.Second}))
	require.Equal(t, []any{"pullkey", "key-b"}, e.pub3(&shapes, spec3{id: idE, dueIn: 40 * time.Second, key: "key-b"}), "its key's far holder")
	holder, other, err := FarKeyLookup(e.ctx, e.c, e.sh, "key-b")
	require.NoError(t, err)
	require.Equal(t, idB, holder)
	require.Empty(t, other)
	for _, id := range []string{idA, idB, idD} {
		require.True(t, e.peek(id), id)
	}
	require.False(t, e.peek(idE))

	r := e.unpack()
	require.Equal(t, UnpackReply{Moved: 3}, r)
	start := farBucketStart(e.b).UnixMilli()
	for id, due := range map[string]int64{idA: 10_000, idB: 20_000, idD: 30_000} {
		s, err := e.c.ZScore(e.ctx, e.sh.Waiting(), id).Result()
		require.NoError(t, err, id)
		// the score is Redis's clock's due ms (within a second of the
		// test's) and a sequence number
		require.InDelta(t, float64((start+due)*1024), s, 1024*1000, id)
	}
	require.Equal(t, "key-b", e.c.HGet(e.ctx, e.sh.BkeyOf(), idB).Val())
	require.Equal(t, idB, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-b").Val())
	require.Equal(t, map[string]string{idB: "1"}, e.c.HGetAll(e.ctx, e.sh.Prio()).Val())
	require.Empty(t, e.index())
	require.Zero(t, e.c.Exists(e.ctx, e.sh.FarMeta()).Val(), "the shape goes with the last far message")
}

// Fingerprints taken in a shard send the newcomer to the side table and
// flag the holder's entry; a flagged holder removed leaves a tombstone,
// which the next message of the fingerprint takes over, flag kept.
func TestFar3_WriteCollisions(t *testing.T) {
	collide(t, idC, idA)
	collide(t, idE, idA)
	e := newWriteEnv(t)
	var shapes FarShapes
	require.Equal(t, int64(0), e.pub3(&shapes, spec3{id: idA, dueIn: 10 * time.Second}))
	require.Equal(t, int64(0), e.pub3New(&shapes, spec3{id: idC, dueIn: 20 * time.Second}), "A's entry is a maybe: C is pulled, not found, sent again")
	h := fpHash(farField(idA))
	shard, fp := e.sh.fpIndex(shapes.load(e.sh).shard(h)), fpField(h)
	entry := func() string { return e.c.HGet(e.ctx, shard, fp).Val() }
	require.Len(t, entry(), 7)
	require.Equal(t, byte(fpLocCollided), entry()[0], "A's entry flagged")
	side := e.c.HGetAll(e.ctx, e.sh.fpSide()).Val()
	require.Len(t, side, 1)
	require.Len(t, side[farField(idC)], 5, "C's place in the side table")
	require.True(t, e.peek(idA))
	require.True(t, e.peek(idC))

	_, _, found, err := FarPull(e.ctx, e.c, e.sh, idA, false)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "\x01", entry(), "a tombstone")
	require.True(t, e.peek(idC), "still found by the side table")

	require.Equal(t, int64(0), e.pub3New(&shapes, spec3{id: idE, dueIn: 30 * time.Second}))
	require.Len(t, entry(), 7, "E took the tombstone's place")
	require.Equal(t, byte(fpLocCollided), entry()[0], "flag kept: C is in the side table")
	require.True(t, e.peek(idE))
	require.True(t, e.peek(idC))
	require.False(t, e.peek(idA))

	require.Equal(t, UnpackReply{Moved: 2}, e.unpack())
	require.Zero(t, e.c.HLen(e.ctx, e.sh.fpSide()).Val())
}

// A run storing format 3 splits one shard per 48 messages the tier holds
// past its shards' share, from the shape its caller knew, through a
// doubling of L; a caller that knew another S splits nothing and learns
// the shape. Every message stays found, and unpacking empties the index.
func TestFar3_WriteSplits(t *testing.T) {
	for _, c := range []struct {
		name        string
		from, known fpShape // :fmeta's, and the caller's
		want        fpShape
	}{
		{"splits", fpShape{L: 11}, fpShape{L: 11, Set: true}, fpShape{L: 11, S: 3, Set: true}},
		{"doubles", fpShape{L: 11, S: 2046}, fpShape{L: 11, S: 2046, Set: true}, fpShape{L: 12, S: 1, Set: true}},
		{"stale S", fpShape{L: 11, S: 5}, fpShape{L: 11, S: 2, Set: true}, fpShape{L: 11, S: 5, Set: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newFar3Env(t, c.from)
			// The tier holds its shards' share already (format 2's, say):
			// 100 more are past it by 100 / 48 shards.
			held := 48 * (1<<c.from.L + c.from.S)
			require.NoError(t, e.c.HSet(e.ctx, e.sh.FarMeta(), "n", held, "fm", held).Err())
			var shapes FarShapes
			shapes.store(e.sh, c.known)
			specs := make([]spec3, 100)
			for i := range specs {
				specs[i] = spec3{id: fmt.Sprintf("0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c%04d", i), dueIn: time.Duration(i) * time.Millisecond}
			}
			require.Equal(t, int64(0), e.pub3(&shapes, specs...))
			require.Equal(t, c.want, shapes.load(e.sh))
			meta := e.c.HMGet(e.ctx, e.sh.FarMeta(), fpShapeFields...).Val()
			require.Equal(t, []any{strconv.FormatUint(c.want.L, 10), strconv.FormatUint(c.want.S, 10)}, meta)
			// each entry in the shard its hash names by the new shape
			for k := range e.index() {
				var n uint64
				var f string
				_, err := fmt.Sscanf(k[len(e.sh)+len(":fi:"):], "%d/%s", &n, &f)
				require.NoError(t, err, k)
				for _, s := range specs {
					if h := fpHash(farField(s.id)); fmt.Sprintf("%x", fpField(h)) == f {
						require.Equal(t, c.want.shard(h), n, "%s in shard %d", s.id, n)
					}
				}
			}
			for _, s := range specs {
				require.True(t, e.peek(s.id), s.id)
			}
			e.shape = c.want
			require.NoError(t, e.c.HSet(e.ctx, e.sh.FarMeta(), "n", 100, "fm", 100).Err())
			require.Equal(t, UnpackReply{Moved: 100}, e.unpack())
			require.Empty(t, e.index())
		})
	}
}

// A rollback to level 2 (RewriteShard) moves the far messages of format 3
// into the waiting set, where release 0.2.0 reads them, and leaves those
// of format 2 in the far tier.
func TestFar3_RewriteToLevel2(t *testing.T) {
	e := newWriteEnv(t)
	require.Equal(t, int64(0), e.pub3(nil, spec3{id: idA, dueIn: 10 * time.Second}, spec3{id: idB, dueIn: 20 * time.Second, key: "key-b"}))
	e.put2(idE, 30*time.Second)
	n, err := RewriteShard(e.ctx, e.c, e.sh, Level2)
	require.NoError(t, err)
	require.Equal(t, Rewritten{Far: 2}, n)
	for _, id := range []string{idA, idB} {
		require.NotZero(t, e.c.ZScore(e.ctx, e.sh.Waiting(), id).Val(), id)
		require.False(t, e.peek(id), id)
	}
	require.Equal(t, idB, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-b").Val(), "its key names the waiting message")
	require.True(t, e.peek(idE), "format 2 stays")
	require.Empty(t, e.index())
	n, err = RewriteShard(e.ctx, e.c, e.sh, Level2)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to move")
}

// A publish that only looks a message up passes the shard its S picks; a
// run that finds S moved past the message's h mod 2^L (a split since the
// publisher learnt S) cannot read the right shard and answers a pull,
// which finds the message, or finds nothing and the message is stored.
func TestFar3_LookupAfterSplit(t *testing.T) {
	e := newFar3Env(t, fpShape{L: 11, S: 9})
	// UUIDs whose shard was split: h mod 2^11 below 9
	var split []string
	for len(split) < 2 {
		id := watermill.NewUUID()
		if fpHash(farField(id))&(1<<11-1) < 9 {
			split = append(split, id)
		}
	}
	e.put(split[0], 10*time.Second, "", false)
	var stale FarShapes
	stale.store(e.sh, fpShape{L: 11, Set: true}) // learnt before the splits
	require.Equal(t, []any{"pull", split[0]}, e.publish(&stale, near3(split[0])))
	require.Equal(t, uint64(9), stale.load(e.sh).S, "learnt S from the run")
	require.True(t, e.peek(split[0]))

	stale.store(e.sh, fpShape{L: 11, Set: true})
	m := near3(split[1])
	require.Equal(t, []any{"pull", split[1]}, e.publish(&stale, m), "a maybe: not read")
	require.False(t, e.peek(split[1]))
	m.Far.NotFar()
	require.Equal(t, int64(0), e.publish(&stale, m))

	var known FarShapes
	known.store(e.sh, fpShape{L: 11, S: 9, Set: true})
	require.Equal(t, []any{"pull", split[0]}, e.publish(&known, near3(split[0])), "read in its shard")
	require.Equal(t, int64(0), e.publish(&known, near3(watermill.NewUUID())))
}

// A lookup by UUID or by business key reads the index's shape, then the
// shard it picks: a split in between (a publish storing format 3) moves
// the entry to the shard above, so the lookup reads the shape again with
// the shard and looks again when it moved, never answering "not found"
// for a message that waits.
func TestFar3_LookupDuringSplit(t *testing.T) {
	e := newFar3Env(t, fpShape{L: 11, S: 0})
	id, key := watermill.NewUUID(), "order-split"
	// both in shard 0 with bit 11 set: moved by the split of shard 0
	orig := fpHash
	fpHash = func(field string) uint64 {
		switch field {
		case farField(id):
			return 0x5a5a5a5a<<12 | 1<<11
		case "k\x00" + key:
			return 0x3c3c3c3c<<12 | 1<<11
		}
		return orig(field)
	}
	t.Cleanup(func() { fpHash = orig })
	e.put(id, 10*time.Second, key, false)
	require.Len(t, e.c.HGetAll(e.ctx, e.sh.fpIndex(0)).Val(), 2)

	splits := 0
	afterShapeRead = func() {
		if splits > 0 {
			return
		}
		splits++
		// fi_split of shard 0 at L 11: entries whose fingerprint's lowest
		// bit (the hash's bit 11) is set go to shard 2048
		src, dst := e.sh.fpIndex(0), e.sh.fpIndex(1<<11)
		for f, v := range e.c.HGetAll(e.ctx, src).Val() {
			if f[3]&1 == 1 {
				require.NoError(t, e.c.HSet(e.ctx, dst, f, v).Err())
				require.NoError(t, e.c.HDel(e.ctx, src, f).Err())
			}
		}
		require.NoError(t, e.c.HSet(e.ctx, e.sh.FarMeta(), "iS", 1).Err())
	}
	t.Cleanup(func() { afterShapeRead = func() {} })

	lookupShapes.store(e.sh, fpShape{}) // no shape known: a round trip for the shard
	_, _, found, err := FarPull(e.ctx, e.c, e.sh, id, true)
	require.NoError(t, err)
	require.True(t, found, "a message whose entry a split moved was not found")
	require.Equal(t, 1, splits)
	require.Empty(t, e.c.HGetAll(e.ctx, e.sh.fpIndex(0)).Val(), "the hook split the shard")

	// the key's lookup, the same way (the shard split back first)
	require.NoError(t, e.c.Rename(e.ctx, e.sh.fpIndex(1<<11), e.sh.fpIndex(0)).Err())
	require.NoError(t, e.c.HSet(e.ctx, e.sh.FarMeta(), "iS", 0).Err())
	splits = 0
	lookupShapes.store(e.sh, fpShape{})
	holder, _, err := FarKeyLookup(e.ctx, e.c, e.sh, key)
	require.NoError(t, err)
	require.Equal(t, id, holder, "a holder whose key's entry a split moved was not found")
	require.Equal(t, 1, splits)
}

// A lookup reads the shard that the shape this process last read picks in
// its first round trip, beside the shape: one round trip less while the
// shape stays, and the same answer when it moved since (read again).
func TestFar3_LookupShapeKnown(t *testing.T) {
	e := newFar3Env(t, fpShape{L: 11, S: 1})
	// entries outside shard 0 (split), whose bit 11 picks another shard
	// at L 12
	placed := func(h uint64) bool { return h&(1<<11-1) >= 1 && h&(1<<11) != 0 }
	id, keyed, key := watermill.NewUUID(), watermill.NewUUID(), ""
	for !placed(fpHash(farField(id))) {
		id = watermill.NewUUID()
	}
	for i := 0; key == "" || !placed(fpKeyHash(key)); i++ {
		key = fmt.Sprintf("order-known-%d", i)
	}
	e.put(id, 10*time.Second, "", false)
	e.put(keyed, 20*time.Second, key, false)
	var trips atomic.Int64
	e.c.AddHook(tripCounter{&trips})
	// each lookup's round trips from a shape known (cached) or not
	measure := func(known fpShape, lookup func()) int64 {
		t.Helper()
		lookupShapes.store(e.sh, known)
		before := trips.Load()
		lookup()
		return trips.Load() - before
	}
	pull := func() {
		_, _, found, err := FarPull(e.ctx, e.c, e.sh, id, true)
		require.NoError(t, err)
		require.True(t, found)
	}
	holder := func() {
		h, _, err := FarKeyLookup(e.ctx, e.c, e.sh, key)
		require.NoError(t, err)
		require.Equal(t, keyed, h)
	}
	for _, lookup := range []func(){pull, holder} {
		lookup() // the scripts loaded
		cold := measure(fpShape{}, lookup)
		t.Logf("round trips of a lookup, the shape not known: %d", cold)
		require.Equal(t, cold-1, measure(fpShape{L: 11, S: 1, Set: true}, lookup), "the shape known: the shard read in the first round trip")
		measure(fpShape{}, lookup) // keeps the shape it read
		require.Equal(t, cold-1, measure(lookupShapes.load(e.sh), lookup), "the shape the lookup before kept")
		require.Equal(t, cold-1, measure(fpShape{L: 11, Set: true}, lookup), "a shape from before another shard split: the entry's shard all the same")
		require.Equal(t, cold, measure(fpShape{L: 12, Set: true}, lookup), "a shape that picks another shard: read again")
	}
}

// A lookup that misses (a UUID or key not in the far tier) while
// publishes split other shards answers "not found" at once: only a split
// of the entry's own shard can have moved it. (Comparing whole shapes, a
// busy fill's splits made every try look moved, and the lookup failed
// with "kept moving", failing the Publish whose duplicate check asked for
// it; found by the backlog ladder's 50M fill.)
func TestFar3_LookupMissBesideSplits(t *testing.T) {
	e := newFar3Env(t, fpShape{L: 11, S: 0})
	// shards below 8 split during the lookups; these entries are above
	var id, key string
	for id == "" || fpHash(farField(id))&(1<<11-1) < 8 {
		id = watermill.NewUUID()
	}
	for i := 0; key == "" || fpKeyHash(key)&(1<<11-1) < 8; i++ {
		key = fmt.Sprintf("order-absent-%d", i)
	}
	e.put(watermill.NewUUID(), 10*time.Second, "", false) // an index exists
	require.NoError(t, e.c.HSet(e.ctx, e.sh.FarMeta(), "nk", 1).Err())
	splits := 0
	afterShapeRead = func() {
		// another shard splits (it holds nothing to move here)
		splits++
		require.NoError(t, e.c.HIncrBy(e.ctx, e.sh.FarMeta(), "iS", 1).Err())
	}
	t.Cleanup(func() { afterShapeRead = func() {} })

	lookupShapes.store(e.sh, fpShape{}) // a round trip for the shard: the hook's
	_, _, found, err := FarPull(e.ctx, e.c, e.sh, id, true)
	require.NoError(t, err)
	require.False(t, found)
	require.Equal(t, 1, splits, "one try")

	lookupShapes.store(e.sh, fpShape{})
	holder, _, err := FarKeyLookup(e.ctx, e.c, e.sh, key)
	require.NoError(t, err)
	require.Empty(t, holder)
	require.Equal(t, 2, splits, "one try")
}

// tripCounter counts a client's round trips: commands and pipelines.
type tripCounter struct{ n *atomic.Int64 }

func (tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// A format 3 element keeps Watermill's until metadata as its place and its
// seconds less the due second's (2 bytes instead of 7) when it is whole
// seconds in UTC within 127 s of the due time, and a business key where the
// body has it; both readers (Lua's unpack, Go's decodeFar) give back the
// body byte for byte, so a retried Publish compares equal.
func TestFar3_WriteDerivesUntil(t *testing.T) {
	e := newWriteEnv(t)
	var shapes FarShapes
	start := farBucketStart(e.b)
	due := start.Add(20 * time.Second)
	cases := []struct {
		until, key string
		derived    bool
	}{
		{due.UTC().Format(time.RFC3339), "", true},                         // delay.For's
		{due.Add(time.Second).UTC().Format(time.RFC3339), "key-b", true},   // with a key
		{due.Add(-100 * time.Second).UTC().Format(time.RFC3339), "", true}, // within 127 s
		{due.In(time.FixedZone("", 7200)).Format(time.RFC3339), "", false}, // not UTC
		{due.UTC().Format("2006-01-02T15:04:05.000Z07:00"), "", false},     // milliseconds: text
		{due.Add(10 * time.Minute).UTC().Format(time.RFC3339), "", false},  // too far from the due time
		{time.Unix(-86400, 0).UTC().Format(time.RFC3339), "", false},       // before 1970
		{"", "key-g", false}, // none
	}
	now := time.Now().UnixMilli()
	delay := time.Duration(start.UnixMilli()-now)*time.Millisecond + 20*time.Second
	var msgs []PubMessage
	bodies := map[string][]byte{}
	for i, c := range cases {
		id := watermill.NewUUID()
		msg := message.NewMessage(id, []byte(fmt.Sprintf("payload %d", i)))
		msg.Metadata.Set("_watermill_delayed_for", "10m0s")
		if c.until != "" {
			msg.Metadata.Set("_watermill_delayed_until", c.until)
		}
		key := ""
		if c.key != "" {
			msg.Metadata.Set("_redisdelay_business_key", c.key)
			key = "x" + c.key
		}
		f := FarArgOf(id, delay, true)
		f.Format3 = true
		f.Place(now)
		require.Equal(t, e.b, f.Bucket)
		bodies[id] = Encode(msg)
		msgs = append(msgs, PubMessage{UUID: id, Delay: delay.Milliseconds(), Key: key, Far: f, Body: bodies[id]})
	}
	require.Equal(t, int64(0), e.send(&shapes, msgs))
	els := e.c.LRange(e.ctx, e.sh.FarList(e.b), 0, -1).Val()
	require.Len(t, els, len(cases))
	for i, el := range els {
		c, id := cases[i], msgs[i].UUID
		require.Equal(t, c.derived, el[1]&0x20 != 0, "case %d (%q): until derived", i, c.until)
		want := 5 + len(bodies[id])
		if c.derived {
			want += 2 - 7
		}
		if c.key != "" {
			want += 3 // its length and where the body has it
		}
		require.Len(t, el, want, "case %d", i)
		m, ok, bad := decodeFar(farFormat2, farBucketStart(e.b).UnixMilli(), el)
		require.True(t, ok)
		require.False(t, bad)
		require.Equal(t, string(bodies[id]), m.Body, "case %d: Go's reader", i)
		require.Equal(t, c.key, m.Key, "case %d", i)
		g, err := encodeFar3(farBucketStart(e.b).UnixMilli(), m)
		require.NoError(t, err)
		require.Equal(t, el, g, "case %d: Go's writer writes what publish.lua does", i)
	}
	// a retried publish: pulled (Lua's reader), then equal
	require.Equal(t, []any{"pull", msgs[1].UUID}, e.send(&shapes, msgs[1:2]))
	_, _, found, err := FarPull(e.ctx, e.c, e.sh, msgs[1].UUID, false)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, int64(0), e.send(&shapes, msgs[1:2]), "byte-identical: a no-op")
	require.Equal(t, UnpackReply{Moved: int64(len(cases) - 1)}, e.unpack())
	for _, m := range msgs {
		require.Equal(t, string(bodies[m.UUID]), e.c.HGet(e.ctx, e.sh.Bodies(), m.UUID).Val(), "Lua's reader")
	}
	require.Equal(t, msgs[1].UUID, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-b").Val())
	require.Equal(t, msgs[7].UUID, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-g").Val())
}
