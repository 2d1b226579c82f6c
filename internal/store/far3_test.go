package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestFar3_Element(t *testing.T) {
	body := string(Encode(message.NewMessage("0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11", []byte("p"))))
	keyed := message.NewMessage("0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11", []byte("p"))
	keyed.Metadata.Set("_redisdelay_business_key", "order-1")
	keyedBody := string(Encode(keyed))
	start := int64(1_780_000_000_000)
	for _, c := range []struct {
		m     farElem
		extra int // bytes after the 5-byte head, beside the body
	}{
		{farElem{Score: float64(start*1024 + 61_000*1024 + 7), Body: body}, 0},
		{farElem{Score: float64(start*1024 - 5_000*1024), Body: keyedBody, Key: "order-1", Prio: true}, 3}, // the key once: where the body has it
		{farElem{Score: float64(start*1024 + fpRelBias - 1), Body: body, Prio: true}, 0},
		{farElem{Score: float64(start*1024 - fpRelBias), Body: body, Key: string(make([]byte, 255))}, 3 + 255}, // not in the body
		{farElem{Score: float64(start * 1024), Body: body, Key: "0b1e"}, 3 + 4},                                // text, not the body's 16 bytes
	} {
		m := c.m
		e, err := encodeFar3(start, m)
		require.NoError(t, err)
		require.Len(t, e, 5+len(m.Body)+c.extra, "a 5-byte head")
		got, ok, bad := decodeFar(farFormat2, start, e)
		require.True(t, ok)
		require.False(t, bad)
		require.Equal(t, m, got)
	}
	_, err := encodeFar3(start, farElem{Score: float64(start*1024 + fpRelBias), Body: body})
	require.ErrorContains(t, err, "too far from its far bucket's start")
	_, err = encodeFar3(start, farElem{Score: float64(start * 1024), Body: body, Key: string(make([]byte, 256))})
	require.ErrorContains(t, err, "at most 255")
	e, err := encodeFar3(start, farElem{Score: float64(start * 1024), Body: body, Key: "abc"})
	require.NoError(t, err)
	for _, damaged := range []string{e[:5], e[:8], e[:9]} {
		_, ok, bad := decodeFar(farFormat2, start, damaged)
		require.False(t, ok, "%q", damaged)
		require.True(t, bad, "%q", damaged)
	}
	_, ok, bad := decodeFar(1, start, e)
	require.False(t, ok)
	require.True(t, bad, "a format 3 element in a format 1 bucket")
}

func TestFar3_Place(t *testing.T) {
	now := int64(1_000_000) // a bucket number
	for _, c := range []struct {
		b, pos        int64
		collided, key bool
		size          int
	}{
		{now + 5, 0, false, false, 5},
		{now, 65_535, false, false, 5},
		{now, 65_536, false, false, 7},
		{now + 43_200, 3, true, false, 7},
		{now - 100, 1<<24 - 1, true, false, 7},
		{now + fpLocBucketMod/2 - 1, 9, false, false, 5},
		{now - fpLocBucketMod/2, 9, false, false, 5},
		{now + 5, 0, false, true, 6},
		{now, 1<<24 - 1, false, true, 6},
		{now + 5, 7, true, true, 7},
	} {
		loc := fpLoc(c.b, c.pos, c.collided, c.key)
		require.Len(t, loc, c.size)
		b, pos, collided, err := fpParse(loc, now)
		require.NoError(t, err)
		require.Equal(t, [2]int64{c.b, c.pos}, [2]int64{b, pos})
		require.Equal(t, c.collided, collided)
		place, isKey := fpKeyLoc(loc)
		require.Equal(t, c.key, isKey)
		if isKey {
			require.Equal(t, fpLoc(c.b, c.pos, false, true), place, "the place less its flag")
		}
	}
	_, _, collided, err := fpParse("\x01", now)
	require.ErrorIs(t, err, errFpTombstone)
	require.True(t, collided)
	for _, bad := range []string{"", "abcd", "abcdefgh"} {
		_, _, _, err := fpParse(bad, now)
		require.ErrorContains(t, err, "is not a place")
	}
}

func TestFar3_Shape(t *testing.T) {
	p, err := fpShapeOf([]any{nil, nil})
	require.NoError(t, err)
	require.Equal(t, fpShape{L: fpMinLevel}, p)
	p, err = fpShapeOf([]any{"12", "100"})
	require.NoError(t, err)
	require.Equal(t, fpShape{L: 12, S: 100, Set: true}, p)
	for _, bad := range [][]any{{"10", nil}, {"x", nil}, {"11", "2048"}, {"11", "-1"}} {
		_, err := fpShapeOf(bad)
		require.ErrorContains(t, err, "is damaged", "%v", bad)
	}
	// Shards below S were split: their hashes take one bit more.
	p = fpShape{L: 11, S: 5}
	require.Equal(t, uint64(4+2048), p.shard(4+2048+4096))
	require.Equal(t, uint64(4), p.shard(4+4096))
	require.Equal(t, uint64(5), p.shard(5+2048))
	// Fields carry the address bits a split reads (bit L of the hash).
	h := uint64(1)<<11 | 1<<42 | 1<<43
	require.Equal(t, "\x80\x00\x00\x01", fpField(h), "bits 11 to 42")
	require.Equal(t, fpField(h), fpField(h|1<<10), "bits below 11 are the shard's alone")
}

// far3Env writes far messages of format 3 into a partition, as the
// writers of level 3 will (this release has none), and runs the readers.
type far3Env struct {
	t     *testing.T
	ctx   context.Context
	c     *redis.Client
	sh    Shard
	shape fpShape
	b     int64 // the bucket written to
}

func newFar3Env(t *testing.T, shape fpShape) *far3Env {
	c := freshClient(t)
	e := &far3Env{t: t, ctx: context.Background(), c: c, sh: Shard("t:{f3}:0"), shape: shape}
	e.b, _, _, _ = farPlace(time.Now().UnixMilli(), time.Now().Add(10*time.Minute).UnixMilli())
	require.NoError(t, c.HSet(e.ctx, e.sh.FarMeta(), "iL", shape.L, "iS", shape.S).Err())
	return e
}

// collide gives id the index hash of holder's UUID for the rest of the
// test: the same shard and fingerprint.
func collide(t *testing.T, id, holder string) {
	orig := fpHash
	fpHash = func(field string) uint64 {
		if field == farField(id) {
			return orig(farField(holder))
		}
		return orig(field)
	}
	t.Cleanup(func() { fpHash = orig })
}

// put writes a far message into the env's bucket (due dueIn from its
// start) and indexes it as a writer of level 3 will (WriteFar3).
func (e *far3Env) put(id string, dueIn time.Duration, key string, prio bool) {
	start := farBucketStart(e.b).UnixMilli()
	msg := message.NewMessage(id, []byte("payload of "+id))
	require.NoError(e.t, writeFar3At(e.ctx, e.c, e.sh, e.b, start, 0, msg, float64((start+dueIn.Milliseconds())*1024), key, prio))
}

// put2 writes a far message of format 2 into the env's bucket, as this
// release's publish.lua does.
func (e *far3Env) put2(id string, dueIn time.Duration) {
	t, ctx, c, sh := e.t, e.ctx, e.c, e.sh
	var rel [4]byte
	binary.BigEndian.PutUint32(rel[:], uint32(int32(dueIn.Milliseconds()*1024)))
	popped, _ := c.HGet(ctx, sh.FarMeta(), farPopped(2, e.b)).Int64()
	pos := c.LLen(ctx, sh.FarList(e.b)).Val() + popped
	require.NoError(t, c.RPush(ctx, sh.FarList(e.b), "\x02\x00"+string(rel[:])+string(Encode(message.NewMessage(id, []byte("payload of "+id))))).Err())
	require.NoError(t, c.HIncrBy(ctx, sh.FarMeta(), "L:"+strconv.FormatInt(e.b, 10), 1).Err())
	require.NoError(t, c.HIncrBy(ctx, sh.FarMeta(), "n", 1).Err())
	field := farField(id)
	require.NoError(t, c.HSet(ctx, sh.farIndex(farShard(field)), field, -(e.b<<farPosBits+pos)-1).Err())
}

// unpack unpacks the env's bucket as the scheduler holding the lease does.
func (e *far3Env) unpack() UnpackReply {
	require.NoError(e.t, e.c.Set(e.ctx, e.sh.Lease(), "me", time.Minute).Err())
	// its time has come (a publish gave it its own)
	require.NoError(e.t, e.c.ZAddXX(e.ctx, e.sh.FarZ(), redis.Z{Member: e.b}).Err())
	head, err := FarHead(e.ctx, e.c, e.sh, 2, e.b, FarUnpackBatch)
	require.NoError(e.t, err)
	r, err := Unpack(e.ctx, e.c, e.sh, "me", 2, e.b, head)
	require.NoError(e.t, err)
	return r
}

// index is every entry left in the format 3 index, by key and field (in
// hex) -> value (in hex).
func (e *far3Env) index() map[string]string {
	out := map[string]string{}
	keys, err := e.c.Keys(e.ctx, string(e.sh)+":fi*").Result()
	require.NoError(e.t, err)
	for _, k := range keys {
		m, err := e.c.HGetAll(e.ctx, k).Result()
		require.NoError(e.t, err)
		for f, v := range m {
			out[fmt.Sprintf("%s/%x", k, f)] = fmt.Sprintf("%x", v)
		}
	}
	return out
}

const (
	idA = "0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11"
	idB = "1c2f7d2b-8e8f-4d70-8e4c-3a7b2f0d1e22"
	idC = "2d3a8e3c-9f90-4e81-9f5d-4b8c3a1e2f33"
	idD = "ORDER-4" // not canonical: its far field is the text
	idE = "3e4b9f4d-a0a1-4f92-a06e-5c9d4b2f3a44"
)

// Format 3 elements are unpacked into the waiting set with their due
// times, business keys and priorities, and their index entries go: a
// collided holder leaves its tombstone, the side table its entry.
func TestFar3_Unpack(t *testing.T) {
	collide(t, idC, idA)
	for _, shape := range []fpShape{{L: 11}, {L: 11, S: 1500}, {L: 13, S: 7}} {
		t.Run(fmt.Sprintf("L%d_S%d", shape.L, shape.S), func(t *testing.T) {
			e := newFar3Env(t, shape)
			e.put(idA, 10*time.Second, "", false)
			e.put(idB, 20*time.Second, "key-b", true)
			e.put2(idE, 25*time.Second) // the formats share the bucket
			e.put(idC, 30*time.Second, "", false)
			e.put(idD, -3*time.Second, "", false) // due before its bucket's start (FarSlack)
			require.Len(t, e.index(), 5, "A's (collided), B's and its key's, D's, C's in the side table")

			r := e.unpack()
			require.Equal(t, UnpackReply{Moved: 5}, r)
			require.Zero(t, e.c.HLen(e.ctx, e.sh.farIndex(farShard(farField(idE)))).Val(), "format 2's index entry goes")
			start := farBucketStart(e.b).UnixMilli()
			for id, due := range map[string]int64{idA: 10_000, idB: 20_000, idC: 30_000, idD: -3_000, idE: 25_000} {
				s, err := e.c.ZScore(e.ctx, e.sh.Waiting(), id).Result()
				require.NoError(t, err, id)
				require.Equal(t, float64((start+due)*1024), s, id)
				body, err := e.c.HGet(e.ctx, e.sh.Bodies(), id).Result()
				require.NoError(t, err)
				msg, err := Decode([]byte(body))
				require.NoError(t, err)
				require.Equal(t, "payload of "+id, string(msg.Payload))
			}
			require.Equal(t, "key-b", e.c.HGet(e.ctx, e.sh.BkeyOf(), idB).Val())
			require.Equal(t, idB, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-b").Val(), "the key names the waiting message")
			require.Equal(t, map[string]string{idB: "1"}, e.c.HGetAll(e.ctx, e.sh.Prio()).Val())
			left := e.index()
			require.Len(t, left, 1, "only A's tombstone: %v", left)
			for _, v := range left {
				require.Equal(t, "01", v)
			}
			require.Zero(t, e.c.Exists(e.ctx, e.sh.FarList(e.b), e.sh.FarZ()).Val())
		})
	}
}

// Format 3 elements that a scheduler of release 0.2.0 parked (counted out
// of the far tier, index entries left) are moved into the waiting set by
// Unpark with their due times, keys and priorities, and their index
// entries go as unpacking removes them, though their positions are lost:
// a collided holder leaves its tombstone, the side table its entry. An
// element no release here reads stays parked; a UUID already waiting
// keeps its body.
func TestFar3_Unpark(t *testing.T) {
	collide(t, idC, idA)
	for _, shape := range []fpShape{{L: 11}, {L: 13, S: 7}} {
		t.Run(fmt.Sprintf("L%d_S%d", shape.L, shape.S), func(t *testing.T) {
			e := newFar3Env(t, shape)
			e.put(idA, 10*time.Second, "", false)
			e.put(idB, 20*time.Second, "key-b", true)
			e.put(idC, 30*time.Second, "", false)
			e.put(idD, -3*time.Second, "", false)
			e.put(idE, 40*time.Second, "", false)
			require.NoError(t, e.c.HSet(e.ctx, e.sh.Bodies(), idE, "waiting already").Err())
			require.NoError(t, e.c.ZAdd(e.ctx, e.sh.Waiting(), redis.Z{Score: 1, Member: idE}).Err())
			require.NoError(t, e.c.RPush(e.ctx, e.sh.FarList(e.b), "\x07not a format").Err())
			require.Len(t, e.index(), 6, "A's (collided), B's and its key's, D's, E's, C's in the side table")

			// release 0.2.0's unpack.lua: nothing read, everything parked
			start := farBucketStart(e.b).UnixMilli()
			els, err := e.c.LRange(e.ctx, e.sh.FarList(e.b), 0, -1).Result()
			require.NoError(t, err)
			for _, el := range els {
				require.NoError(t, e.c.RPush(e.ctx, e.sh.FarPark(), fmt.Sprintf("2:%d:%d:%s", e.b, start, el)).Err())
			}
			require.NoError(t, e.c.Del(e.ctx, e.sh.FarList(e.b)).Err())
			require.NoError(t, e.c.HIncrBy(e.ctx, e.sh.FarMeta(), "n", -5).Err())

			require.NoError(t, e.c.Set(e.ctx, e.sh.Lease(), "me", time.Minute).Err())
			moved, stale, err := Unpark(e.ctx, e.c, e.sh, "other", 6)
			require.NoError(t, err)
			require.True(t, stale, "not the lease holder: nothing done")
			require.Zero(t, moved)
			moved, stale, err = Unpark(e.ctx, e.c, e.sh, "me", 6)
			require.NoError(t, err)
			require.False(t, stale)
			require.EqualValues(t, 4, moved)
			for id, due := range map[string]int64{idA: 10_000, idB: 20_000, idC: 30_000, idD: -3_000} {
				s, err := e.c.ZScore(e.ctx, e.sh.Waiting(), id).Result()
				require.NoError(t, err, id)
				require.Equal(t, float64((start+due)*1024), s, id)
			}
			require.Equal(t, "waiting already", e.c.HGet(e.ctx, e.sh.Bodies(), idE).Val())
			require.Equal(t, float64(1), e.c.ZScore(e.ctx, e.sh.Waiting(), idE).Val(), "the waiting one stays")
			require.Equal(t, idB, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-b").Val(), "the key names the waiting message")
			require.Equal(t, "key-b", e.c.HGet(e.ctx, e.sh.BkeyOf(), idB).Val())
			require.Equal(t, map[string]string{idB: "1"}, e.c.HGetAll(e.ctx, e.sh.Prio()).Val())
			left := e.index()
			require.Len(t, left, 1, "only A's tombstone: %v", left)
			for _, v := range left {
				require.Equal(t, "01", v)
			}
			require.Zero(t, e.c.Exists(e.ctx, e.sh.fpSide(), e.sh.fpKeySide()).Val())
			require.Equal(t, []string{fmt.Sprintf("2:%d:%d:\x07not a format", e.b, start)}, e.c.LRange(e.ctx, e.sh.FarPark(), 0, -1).Val(), "left parked")
			moved, _, err = Unpark(e.ctx, e.c, e.sh, "me", 1)
			require.NoError(t, err)
			require.Zero(t, moved)
		})
	}
}

// Entries no release here reads, a batch's worth at the head of the park
// list, hold up none behind them.
func TestFar3_UnparkBehindUnreadable(t *testing.T) {
	e := newFar3Env(t, fpShape{L: 11})
	e.put(idA, 10*time.Second, "", false)
	start := farBucketStart(e.b).UnixMilli()
	el, err := e.c.LIndex(e.ctx, e.sh.FarList(e.b), 0).Result()
	require.NoError(t, err)
	for i := range UnparkBatch + 1 {
		require.NoError(t, e.c.RPush(e.ctx, e.sh.FarPark(), fmt.Sprintf("2:%d:%d:\x07unreadable %d", e.b, start, i)).Err())
	}
	require.NoError(t, e.c.RPush(e.ctx, e.sh.FarPark(), fmt.Sprintf("2:%d:%d:%s", e.b, start, el)).Err())
	require.NoError(t, e.c.Del(e.ctx, e.sh.FarList(e.b)).Err())
	require.NoError(t, e.c.Set(e.ctx, e.sh.Lease(), "me", time.Minute).Err())
	parked := int64(UnparkBatch + 2)
	for range 50 {
		moved, _, err := Unpark(e.ctx, e.c, e.sh, "me", parked)
		require.NoError(t, err)
		if moved == 1 {
			break
		}
	}
	require.Equal(t, int64(UnparkBatch+1), e.c.LLen(e.ctx, e.sh.FarPark()).Val(), "the unreadable ones stay")
	require.NoError(t, e.c.ZScore(e.ctx, e.sh.Waiting(), idA).Err(), "the one behind them moved on")
}

// A partition whose park list holds elements is not idle: its loop keeps
// running, so a trim moves them on even when nothing else is scheduled.
func TestFar3_ParkedIsNotIdle(t *testing.T) {
	c := freshClient(t)
	ctx := context.Background()
	sh := Shard("t:{idle}:0")
	idle, err := Idle(ctx, c, sh, nil, 0)
	require.NoError(t, err)
	require.True(t, idle, "nothing held")
	require.NoError(t, c.Del(ctx, sh.dormant()).Err())
	require.NoError(t, c.RPush(ctx, sh.FarPark(), "2:1:0:\x03parked").Err())
	idle, err = Idle(ctx, c, sh, nil, 0)
	require.NoError(t, err)
	require.False(t, idle)
	require.Zero(t, c.Exists(ctx, sh.dormant()).Val())
}

// A scheduler that read the index's shape before a doubling (L grew)
// changes nothing and reads again.
func TestFar3_UnpackStaleShape(t *testing.T) {
	e := newFar3Env(t, fpShape{L: 11})
	e.put(idA, 10*time.Second, "", false)
	require.NoError(t, e.c.Set(e.ctx, e.sh.Lease(), "me", time.Minute).Err())
	head, err := FarHead(e.ctx, e.c, e.sh, 2, e.b, FarUnpackBatch)
	require.NoError(t, err)
	// The doubling: every shard split, A's entry moved to its shard at L 12.
	h := fpHash(farField(idA))
	old, now := fpShape{L: 11}.shard(h), fpShape{L: 12}.shard(h)
	if old != now {
		require.NoError(t, e.c.Rename(e.ctx, e.sh.fpIndex(old), e.sh.fpIndex(now)).Err())
	}
	require.NoError(t, e.c.HSet(e.ctx, e.sh.FarMeta(), "iL", 12, "iS", 0).Err())
	r, err := Unpack(e.ctx, e.c, e.sh, "me", 2, e.b, head)
	require.NoError(t, err)
	require.True(t, r.Stale)
	require.Zero(t, e.c.ZCard(e.ctx, e.sh.Waiting()).Val())
	e.shape = fpShape{L: 12}
	require.Equal(t, UnpackReply{Moved: 1}, e.unpack())
	require.Empty(t, e.index())
}

// Cancel, Reschedule and Find reach a format 3 far message through
// FarPull: by its shard's entry, or by the side table when another
// message holds its fingerprint.
func TestFar3_Pull(t *testing.T) {
	collide(t, idC, idA)
	collide(t, idD, idA)
	e := newFar3Env(t, fpShape{L: 11, S: 3})
	e.put(idA, 10*time.Second, "", false)
	e.put(idB, 20*time.Second, "key-b", false)
	e.put(idC, 30*time.Second, "", true)
	start := farBucketStart(e.b).UnixMilli()

	// Find: only read.
	for i, id := range []string{idA, idB, idC} {
		body, score, found, err := FarPull(e.ctx, e.c, e.sh, id, true)
		require.NoError(t, err)
		require.True(t, found, id)
		require.Equal(t, float64((start+int64(i+1)*10_000)*1024), score)
		got, _ := storedUUID([]byte(body))
		require.Equal(t, id, got)
	}
	require.Zero(t, e.c.ZCard(e.ctx, e.sh.Waiting()).Val())
	// D's fingerprint is A's, and D is not far: A's entry is not D's.
	_, _, found, err := FarPull(e.ctx, e.c, e.sh, idD, false)
	require.NoError(t, err)
	require.False(t, found)

	// A collided holder pulled leaves a tombstone; C is still found.
	_, _, found, err = FarPull(e.ctx, e.c, e.sh, idA, false)
	require.NoError(t, err)
	require.True(t, found)
	require.Len(t, e.index(), 4, "B's and its key's, C's side entry, A's tombstone")
	require.NoError(t, FarPullMany(e.ctx, e.c, e.sh, []string{idB, idC, idD}))
	left := e.index()
	require.Len(t, left, 1, "A's tombstone: %v", left)
	for _, id := range []string{idA, idB, idC} {
		require.NotZero(t, e.c.ZScore(e.ctx, e.sh.Waiting(), id).Val(), id)
	}
	require.Equal(t, idB, e.c.HGet(e.ctx, e.sh.Bkeys(), "key-b").Val())
	require.Equal(t, "1", e.c.HGet(e.ctx, e.sh.Prio(), idC).Val())
	require.Zero(t, e.c.Exists(e.ctx, e.sh.FarList(e.b), e.sh.FarZ()).Val(), "the emptied bucket goes")
	_, _, found, err = FarPull(e.ctx, e.c, e.sh, idA, true)
	require.NoError(t, err)
	require.False(t, found, "pulled already")
}

// publish publishes id due in 30 s (near, looked up in the far tier) with
// the body put gives it, through the general script (a bounded waiting
// set), learning the index's shape in shapes; it returns the call's status.
func (e *far3Env) publish(shapes *FarShapes, m PubMessage) any {
	r, err := Publish(e.ctx, e.c, e.sh, PublishOpts{MaxWaiting: 1 << 20, Shapes: shapes}, []*fairCall{{PubArgs{Msgs: []PubMessage{m}}}})
	require.NoError(e.t, err)
	return r.Statuses[0]
}

func near3(id string) PubMessage {
	return PubMessage{UUID: id, Delay: 30_000, Body: Encode(message.NewMessage(id, []byte("payload of "+id))), Far: FarArgOf(id, 30*time.Second, false)}
}

// A publish of a UUID that waits in the far tier in format 3 finds it
// (no far filter here: it looks in the index) and pulls it first, as with format 2; a
// fingerprint that is another message's is confirmed absent by the pull,
// and the message is stored without a second lookup. The publisher learns
// the index's shape from the script.
func TestFar3_PublishLooksUp(t *testing.T) {
	collide(t, idC, idA)
	e := newFar3Env(t, fpShape{L: 12, S: 9})
	e.put(idA, 10*time.Second, "", false)
	e.put(idB, 20*time.Second, "", false) // the tier never empties (which drops the shape)
	var shapes FarShapes

	c := near3(idC)
	require.Equal(t, []any{"pull", idC}, e.publish(&shapes, c), "A's fingerprint entry could be C's")
	require.Equal(t, fpShape{L: 12, S: 9, Set: true}, shapes.load(e.sh), "learnt from the script")
	_, _, found, err := FarPull(e.ctx, e.c, e.sh, idC, false)
	require.NoError(t, err)
	require.False(t, found)
	c.Far.NotFar()
	require.Equal(t, int64(0), e.publish(&shapes, c))
	require.NotZero(t, e.c.ZScore(e.ctx, e.sh.Waiting(), idC).Val())

	require.Equal(t, []any{"pull", idA}, e.publish(&shapes, near3(idA)))
	_, _, found, err = FarPull(e.ctx, e.c, e.sh, idA, false)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, int64(0), e.publish(&shapes, near3(idA)), "byte-identical and waiting: a no-op")

	// A publisher that knows another shape (a doubling since) learns it.
	shapes.store(e.sh, fpShape{L: 11, Set: true})
	require.Equal(t, []any{"pull", idB}, e.publish(&shapes, near3(idB)))
	require.Equal(t, uint64(12), shapes.load(e.sh).L)
	require.Equal(t, int64(0), e.publish(nil, near3(idD)), "no shapes kept: learnt for the run")
}

// The test writer rounds a due time up to the ms, as the library does: a
// message is never due before the instant asked for.
func TestFar3_WriterNeverEarly(t *testing.T) {
	c := freshClient(t)
	ctx := context.Background()
	sh := Shard("t:{f3w}:0")
	due := time.Now().Add(10 * time.Minute).Truncate(time.Millisecond).Add(300 * time.Microsecond)
	require.NoError(t, WriteFar3(ctx, c, sh, message.NewMessage(idA, []byte("a")), due, "", false))
	b, start, _, _ := farPlace(time.Now().UnixMilli(), due.UnixMilli()+1)
	els, err := c.LRange(ctx, sh.FarList(b), 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, els, 1)
	m, ok, _ := decodeFar(2, start, els[0])
	require.True(t, ok)
	require.Equal(t, float64((due.UnixMilli()+1)*1024), m.Score)
}

// farUntilAt finds the until entry among any metadata before it, and a
// body cut short anywhere (or an element so cut) is read without a panic:
// no entry, or a damaged element.
func TestFar3_UntilAtAnyBody(t *testing.T) {
	msg := message.NewMessage(watermill.NewUUID(), []byte("payload"))
	msg.Metadata.Set("_redisdelay_business_key", "order-1")
	msg.Metadata.Set("_redisdelay_partition_key", "p")
	msg.Metadata.Set("_watermill_delayed_for", "1.5s")
	msg.Metadata.Set("_watermill_delayed_until", "2026-12-01T10:00:00Z")
	msg.Metadata.Set("A-custom-key", "before the rest")
	msg.Metadata.Set("zz", "after")
	body := string(Encode(msg))
	at, n, unix := farUntilAt([]byte(body))
	require.Greater(t, at, 0)
	require.Equal(t, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Unix(), unix)
	require.Equal(t, string(farUntilEntry(unix)), body[at:at+n])
	start := unix*1000 - 30_000
	e, err := encodeFar3(start, farElem{Score: float64(unix * 1000 * 1024), Body: body, Key: "order-1"})
	require.NoError(t, err)
	require.Len(t, e, 5+3+2+len(body)-n)
	for i := range len(body) {
		at, n, _ := farUntilAt([]byte(body[:i]))
		require.True(t, at == -1 || at+n <= i, "cut at %d", i)
	}
	for i := range len(e) {
		if m, ok := decodeFar3(start, e[:i]); ok {
			require.NotEqual(t, body, m.Body, "cut at %d", i)
		}
	}
	v1 := message.NewMessage("not-a-uuid", nil)
	v1.Metadata.Set("_watermill_delayed_until", "2026-12-01T10:00:00Z")
	at, _, _ = farUntilAt(Encode(v1))
	require.Greater(t, at, 0, "a UUID kept as text")
}
