package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// collideKey makes business key key's fingerprint in the format 3 index
// that of key holder (fpKeyHash) for the test.
func collideKey(t *testing.T, key, holder string) {
	orig := fpHash
	fpHash = func(field string) uint64 {
		if field == "k\x00"+key {
			return orig("k\x00" + holder)
		}
		return orig(field)
	}
	t.Cleanup(func() { fpHash = orig })
}

// Business keys of format 3 far messages are marked in the index, not in
// bkeys: a key whose fingerprint another key holds goes to the keys' side
// table; a publish of a key held in the far tier answers "pullkey", even
// from a publisher that knows no index shape; FarKeyLookup finds each
// holder by its key, and names the place of an entry that is another
// key's, which a run then does not take for the key's (KeyElsewhere);
// pulling and unpacking take the key entries away, giving the keys back to
// bkeys, and the count nk goes with them.
func TestFar3_KeyMarks(t *testing.T) {
	collideKey(t, "key-2", "key-1")
	e := newWriteEnv(t)
	var shapes FarShapes
	require.Equal(t, int64(0), e.pub3(&shapes, spec3{id: idA, dueIn: 10 * time.Second, key: "key-1"}))

	// key-2's fingerprint is key-1's: a maybe, which the lookup settles
	require.Equal(t, []any{"pullkey", "key-2"}, e.pub3(&shapes, spec3{id: idB, dueIn: 20 * time.Second, key: "key-2"}))
	holder, other, err := FarKeyLookup(e.ctx, e.c, e.sh, "key-2")
	require.NoError(t, err)
	require.Empty(t, holder)
	require.Len(t, other, 6, "key-1's entry's place, less its flag")
	require.Equal(t, int64(0), e.pub3(&shapes, spec3{id: idB, dueIn: 20 * time.Second, key: "key-2", keyOther: other}))
	kh := fpKeyHash("key-1")
	shard, fp := e.sh.fpIndex(shapes.load(e.sh).shard(kh)), fpField(kh)
	entry := func() string { return e.c.HGet(e.ctx, shard, fp).Val() }
	require.Equal(t, fpLoc(e.b, 0, true, true), entry(), "key-1's entry: A's place, collided")
	require.Equal(t, map[string]string{"key-2": fpLoc(e.b, 1, false, true)}, e.c.HGetAll(e.ctx, e.sh.fpKeySide()).Val())
	require.Equal(t, "2", e.c.HGet(e.ctx, e.sh.FarMeta(), "nk").Val())
	require.Zero(t, e.c.HLen(e.ctx, e.sh.Bkeys()).Val(), "no far marks")
	for key, want := range map[string]string{"key-1": idA, "key-2": idB, "key-3": ""} {
		holder, _, err := FarKeyLookup(e.ctx, e.c, e.sh, key)
		require.NoError(t, err)
		require.Equal(t, want, holder, key)
	}

	// Either key held far is a maybe for any publish, a publisher that
	// knows no shape (the run asks for it) and a message due too soon to
	// be looked up or stored far included.
	require.Equal(t, []any{"pullkey", "key-2"}, e.pub3(&shapes, spec3{id: idC, dueIn: 30 * time.Second, key: "key-2"}))
	soon := PubMessage{UUID: idC, Delay: 1000, Key: "rkey-1", Far: FarArgOf(idC, time.Second, true),
		Body: Encode(message.NewMessage(idC, []byte("soon")))}
	require.Equal(t, []any{"pullkey", "key-1"}, e.send(&FarShapes{}, []PubMessage{soon}))

	// A pulled (by its UUID): its key's entry leaves a tombstone (key-2
	// is in the side table), key-1 goes back to bkeys; key-2 is still
	// found.
	_, _, found, err := FarPull(e.ctx, e.c, e.sh, idA, false)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "\x01", entry())
	require.Equal(t, idA, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-1").Val())
	require.Equal(t, "key-1", e.c.HGet(e.ctx, e.sh.BkeyOf(), idA).Val())
	require.Equal(t, "1", e.c.HGet(e.ctx, e.sh.FarMeta(), "nk").Val())
	holder, _, err = FarKeyLookup(e.ctx, e.c, e.sh, "key-2")
	require.NoError(t, err)
	require.Equal(t, idB, holder)
	// key-1 is held in the waiting set now: a publish is checked there
	require.Equal(t, []any{"key", "key-1", idA}, e.send(&shapes, []PubMessage{soon}))

	// B unpacked: key-2 to bkeys, the side table and the counts gone.
	require.Equal(t, UnpackReply{Moved: 1}, e.unpack())
	require.Equal(t, idB, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-2").Val())
	require.Zero(t, e.c.Exists(e.ctx, e.sh.fpKeySide(), e.sh.FarMeta()).Val())
}

// Key entries split with the shards they are in, and count towards the
// splits (n + nk): 100 keyed far messages past the shards' share make 200
// entries, so five splits where plain ones make three; every holder stays
// found by its key, and unpacking empties the index and gives every key
// back to bkeys.
func TestFar3_KeyMarksSplit(t *testing.T) {
	e := newFar3Env(t, fpShape{L: 11})
	held := 48 * (1 << 11)
	require.NoError(t, e.c.HSet(e.ctx, e.sh.FarMeta(), "n", held, "fm", held).Err())
	var shapes FarShapes
	shapes.store(e.sh, fpShape{L: 11, Set: true})
	specs := make([]spec3, 100)
	for i := range specs {
		specs[i] = spec3{id: fmt.Sprintf("0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c%04d", i), dueIn: time.Duration(i) * time.Millisecond, key: fmt.Sprintf("order-%d", i)}
	}
	require.Equal(t, int64(0), e.pub3(&shapes, specs...))
	want := fpShape{L: 11, S: 5, Set: true}
	require.Equal(t, want, shapes.load(e.sh))
	require.Equal(t, "100", e.c.HGet(e.ctx, e.sh.FarMeta(), "nk").Val())
	for _, s := range specs {
		kh := fpKeyHash(s.key)
		loc, err := e.c.HGet(e.ctx, e.sh.fpIndex(want.shard(kh)), fpField(kh)).Result()
		require.NoError(t, err, "%s's entry in the shard the new shape names", s.key)
		require.Equal(t, byte(fpLocKey), loc[0]&fpLocKey)
		holder, _, err := FarKeyLookup(e.ctx, e.c, e.sh, s.key)
		require.NoError(t, err)
		require.Equal(t, s.id, holder, s.key)
	}
	e.shape = want
	require.NoError(t, e.c.HSet(e.ctx, e.sh.FarMeta(), "n", 100, "fm", 100).Err())
	require.Equal(t, UnpackReply{Moved: 100}, e.unpack())
	require.Empty(t, e.index())
	require.Zero(t, e.c.Exists(e.ctx, e.sh.FarMeta()).Val())
	require.Equal(t, int64(100), e.c.HLen(e.ctx, e.sh.Bkeys()).Val(), "every key back in bkeys")
}

// A message whose business key's fingerprint is its own UUID's, in the
// same shard: the key's entry goes to the keys' side table (the UUID's is
// the shard's, of another kind, at the same place), the key is found, and
// pulling the message takes each entry away by its kind, leaving only the
// UUID's tombstone.
func TestFar3_KeyMarksOwnUUID(t *testing.T) {
	orig := fpHash
	fpHash = func(field string) uint64 {
		if field == "k\x00key-c" {
			return orig(farField(idC))
		}
		return orig(field)
	}
	t.Cleanup(func() { fpHash = orig })
	e := newWriteEnv(t)
	var shapes FarShapes
	require.Equal(t, int64(0), e.pub3(&shapes, spec3{id: idC, dueIn: 10 * time.Second, key: "key-c"}))
	require.Equal(t, map[string]string{"key-c": fpLoc(e.b, 0, false, true)}, e.c.HGetAll(e.ctx, e.sh.fpKeySide()).Val())
	holder, _, err := FarKeyLookup(e.ctx, e.c, e.sh, "key-c")
	require.NoError(t, err)
	require.Equal(t, idC, holder)
	_, _, found, err := FarPull(e.ctx, e.c, e.sh, idC, false)
	require.NoError(t, err)
	require.True(t, found)
	require.Zero(t, e.c.HLen(e.ctx, e.sh.fpKeySide()).Val(), "the key's side entry goes")
	left := e.index()
	require.Len(t, left, 1, "the UUID's tombstone: %v", left)
	for _, v := range left {
		require.Equal(t, "01", v)
	}
	require.Equal(t, idC, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-c").Val())
}

// A far filter rebuilt from format 3's shards counts the messages, not
// their business keys' entries (key lookups do not read it, and it is
// sized for the messages): fi is n, and the trim does not ask for another
// rebuild.
func TestFar3_KeyMarksFilter(t *testing.T) {
	e := newWriteEnv(t)
	var shapes FarShapes
	require.Equal(t, int64(0), e.pub3(&shapes,
		spec3{id: idA, dueIn: 10 * time.Second, key: "key-1"},
		spec3{id: idB, dueIn: 20 * time.Second, key: "key-2"},
		spec3{id: idC, dueIn: 30 * time.Second}))
	require.NoError(t, RebuildFarFilter(e.ctx, e.c, e.sh, "t", Level3))
	meta := e.c.HGetAll(e.ctx, e.sh.FarMeta()).Val()
	require.Equal(t, "3", meta["fi"], "the three messages' bits, not the keys'")
	require.Equal(t, "3", meta["fm"])
	r, err := Trim(e.ctx, e.c, e.sh, 0, Level3)
	require.NoError(t, err)
	require.False(t, r.FarFilter, "no rebuild asked")
}

// FarPullKeyed removes the key's entry in the run that moves the message
// when the key given is the message's, and falls back to asking when it
// is not: either way every entry of the message goes, and no other's.
func TestFar3_KeyMarksPullKeyed(t *testing.T) {
	e := newWriteEnv(t)
	var shapes FarShapes
	require.Equal(t, int64(0), e.pub3(&shapes,
		spec3{id: idA, dueIn: 10 * time.Second, key: "key-1"},
		spec3{id: idB, dueIn: 20 * time.Second, key: "key-2"}))
	_, _, found, err := FarPullKeyed(e.ctx, e.c, e.sh, idA, "key-2", false)
	require.NoError(t, err)
	require.True(t, found, "pulled, though the key given was another's")
	require.Len(t, e.index(), 2, "B's entries left")
	holder, _, err := FarKeyLookup(e.ctx, e.c, e.sh, "key-2")
	require.NoError(t, err)
	require.Equal(t, idB, holder)
	runs := commandCalls(t, e.c, "eval", "evalsha")
	_, _, found, err = FarPullKeyed(e.ctx, e.c, e.sh, idB, "key-2", false)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, runs+1, commandCalls(t, e.c, "eval", "evalsha"), "one run when the key given is the message's")
	require.Empty(t, e.index())
	require.Equal(t, map[string]string{"key-1": idA, "key-2": idB}, e.c.HGetAll(e.ctx, e.sh.Bkeys()).Val())
	require.Zero(t, e.c.Exists(e.ctx, e.sh.FarMeta()).Val())
}

// A far message of format 3 that replaces a waiting holder of its business
// key takes the key out of :bkeys (its index entry marks it now), and the
// replaced message goes.
func TestFar3_KeyMarksReplaceWaiting(t *testing.T) {
	e := newWriteEnv(t)
	near := PubMessage{UUID: idA, Delay: time.Minute.Milliseconds(), Key: "xkey-1",
		Body: Encode(message.NewMessage(idA, []byte("near")))}
	require.Equal(t, int64(0), e.send(nil, []PubMessage{near}))
	require.Equal(t, idA, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-1").Val())
	var shapes FarShapes
	require.Equal(t, int64(0), e.pub3(&shapes, spec3{id: idB, dueIn: 10 * time.Second, key: "key-1"}))
	require.Zero(t, e.c.Exists(e.ctx, e.sh.Bkeys()).Val(), "the key's mark is its index entry")
	holder, _, err := FarKeyLookup(e.ctx, e.c, e.sh, "key-1")
	require.NoError(t, err)
	require.Equal(t, idB, holder)
	require.Zero(t, e.c.ZCard(e.ctx, e.sh.Waiting()).Val(), "the replaced message went")
}
