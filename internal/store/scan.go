package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Scanning a partition's waiting messages in bounded steps, for searches
// and bulk actions: the waiting set by (score, member) (NearRange) or with
// ZSCAN (NearScan), and the far tier bucket by bucket, each bucket by
// position (FarRange). A position survives changes between steps: the
// waiting set is read from a score on, or from a ZSCAN cursor, and a far
// bucket's positions count from its first element ever (its popped count
// plus the index), so none shifts as messages are removed or unpacked.

// ScoreMin and ScoreMax are the score bounds of the messages due in
// [from, to): the zero time leaves a side open.
func ScoreMin(from time.Time) float64 {
	if from.IsZero() {
		return math.Inf(-1)
	}
	return float64(from.UnixMilli() * scoreScale)
}

func ScoreMax(to time.Time) float64 {
	if to.IsZero() {
		return math.Inf(1)
	}
	return float64(CeilMs(to)*scoreScale) - 1
}

// CeilMs is t in ms since the epoch, rounded up: a message due in the ms
// that holds t, and before t, is due before it (due times are whole ms).
func CeilMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

func formatScore(f float64) string {
	switch {
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsInf(f, 1):
		return "+inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// NearRange reads up to n members of the waiting set with scores in
// [min, max], skipping the first offset, in (score, member) order.
func NearRange(ctx context.Context, c redis.Cmdable, sh Shard, min, max float64, offset, n int) ([]WaitingMember, error) {
	zs, err := c.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
		Key: sh.Waiting(), Start: formatScore(min), Stop: formatScore(max), ByScore: true,
		Offset: int64(offset), Count: int64(n),
	}).Result()
	if err != nil {
		return nil, err
	}
	out := make([]WaitingMember, len(zs))
	for k, z := range zs {
		id, _ := z.Member.(string)
		out[k] = WaitingMember{ID: id, Score: z.Score, Shard: sh}
	}
	return out, nil
}

// NearScan reads about n members of the waiting set, with their scores,
// with ZSCAN from cursor on (0: the start), and returns the cursor to go on
// from, 0 once the scan went round. Unlike a read by score, a full scan
// (from cursor 0 back to 0, in any number of calls, however far apart)
// returns every member that stays in the set from its first call to its
// last, whatever scores change meanwhile: a member rescheduled to a score
// a read by score has passed would be missed. It may return a member
// twice (when Redis resized the set in between). A set small enough to be
// kept packed comes back whole in one call.
func NearScan(ctx context.Context, c redis.Cmdable, sh Shard, cursor uint64, n int) ([]WaitingMember, uint64, error) {
	kv, next, err := c.ZScan(ctx, sh.Waiting(), cursor, "", int64(n)).Result()
	if err != nil {
		return nil, 0, err
	}
	out := make([]WaitingMember, 0, len(kv)/2)
	for k := 0; k+1 < len(kv); k += 2 {
		score, err := strconv.ParseFloat(kv[k+1], 64)
		if err != nil {
			return nil, 0, fmt.Errorf("waiting set member %q has the score %q: %w", kv[k], kv[k+1], err)
		}
		out = append(out, WaitingMember{ID: kv[k], Score: score, Shard: sh})
	}
	return out, next, nil
}

// A far bucket reference (ref) names a bucket of either format in due
// order: 2 × its number for format 1 (written by the previous version),
// 2 × its number + 1 for format 2. Cursors and pages carry refs.
func farRef(v int, b int64) int64 { return 2*b + int64(v-1) }

// FarRefOf is the first far bucket reference of the bucket of a due time.
func FarRefOf(due time.Time) int64 { return 2 * FarBucketOf(due) }

// FarRefBucket is the bucket number of a far bucket reference.
func FarRefBucket(ref int64) int64 { return ref >> 1 }

func farUnref(ref int64) (v int, b int64) { return int(ref&1) + 1, ref >> 1 }

// FarBuckets returns up to n far bucket references (see farRef) of a
// partition from reference from on, in order, of both formats.
func FarBuckets(ctx context.Context, c redis.Cmdable, sh Shard, from int64, n int) ([]int64, error) {
	var out []int64
	for v := 1; v <= 2; v++ {
		fromB := from / 2
		if v == 1 {
			fromB = (from + 1) / 2
		}
		bs, err := farBucketsOf(ctx, c, sh.farZset(v), fromB, n)
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			out = append(out, farRef(v, b))
		}
	}
	slices.Sort(out)
	return out[:min(n, len(out))], nil
}

// farBucketsOf returns up to n bucket numbers of the far zset key from
// bucket from on, in order.
func farBucketsOf(ctx context.Context, c redis.Cmdable, key string, from int64, n int) ([]int64, error) {
	// The far set scores each bucket by when it is unpacked (its start
	// less FarLead), which grows with the bucket number; read from a width
	// earlier, for a bucket scored by other settings, and skip those.
	min := "-inf"
	if from > 0 {
		min = strconv.FormatInt(farEpoch+(from-1)*FarWidth.Milliseconds()-FarLead.Milliseconds(), 10)
	}
	var out []int64
	for offset := int64(0); len(out) < n; offset += int64(n) + 2 {
		members, err := c.ZRangeArgs(ctx, redis.ZRangeArgs{
			Key: key, Start: min, Stop: "+inf", ByScore: true, Offset: offset, Count: int64(n) + 2,
		}).Result()
		if err != nil {
			return nil, err
		}
		for _, m := range members {
			b, err := strconv.ParseInt(m, 10, 64)
			if err == nil && b >= from && len(out) < n {
				out = append(out, b)
			}
		}
		if len(members) < n+2 {
			break
		}
	}
	return out, nil
}

// FarBucketOf is the far bucket of a due time.
func FarBucketOf(due time.Time) int64 {
	return (due.UnixMilli() - farEpoch) / FarWidth.Milliseconds()
}

// FarRange reads up to n elements of the far bucket of reference ref (see
// farRef) from position pos on (counted from the bucket's first element
// ever) and returns the messages among them, each with its position; next
// is the position after the last element read, and done reports that the
// bucket has no more.
func FarRange(ctx context.Context, c redis.Cmdable, sh Shard, ref, pos int64, n int) (ms []FarMember, next int64, done bool, err error) {
	v, b := farUnref(ref)
	poppedField := farPopped(v, b)
	key := sh.farBucketKey(v, b)
	start := farBucketStart(b).UnixMilli()
	readPopped := func(cmd *redis.StringCmd) (int64, error) {
		if err := cmd.Err(); err != nil && err != redis.Nil {
			return 0, err
		}
		p, _ := strconv.ParseInt(cmd.Val(), 10, 64)
		return p, nil
	}
	// The elements are read with the popped count they are counted from:
	// an unpack between two reads shifts them (tried again).
	for range 3 {
		pipe := c.Pipeline()
		popped := pipe.HGet(ctx, sh.FarMeta(), poppedField)
		length := pipe.LLen(ctx, key)
		_, _ = pipe.Exec(ctx)
		p, err := readPopped(popped)
		if err != nil {
			return nil, 0, false, err
		}
		if err := length.Err(); err != nil {
			return nil, 0, false, err
		}
		from := max(pos-p, 0) // elements before p were unpacked meanwhile
		if from >= length.Val() {
			return nil, max(p+length.Val(), pos), true, nil
		}
		pipe = c.Pipeline()
		again := pipe.HGet(ctx, sh.FarMeta(), poppedField)
		rng := pipe.LRange(ctx, key, from, from+int64(n)-1)
		_, _ = pipe.Exec(ctx)
		p2, err := readPopped(again)
		if err != nil {
			return nil, 0, false, err
		}
		if err := rng.Err(); err != nil {
			return nil, 0, false, err
		}
		if p2 != p {
			continue
		}
		els := rng.Val()
		for k, e := range els {
			if m, ok := farMember(sh, v, start, e); ok {
				ms = append(ms, FarMember{WaitingMember: m, Pos: p + from + int64(k), Format3: e[0] == farFormat3})
			}
		}
		next = p + from + int64(len(els))
		return ms, next, len(els) == 0 || next >= p+length.Val(), nil
	}
	return nil, 0, false, fmt.Errorf("far bucket %d kept being unpacked while it was read", b)
}

// FarMember is a message of the far tier and its position in its bucket.
type FarMember struct {
	WaitingMember
	Pos     int64
	Format3 bool // an element of format 3 (far3.go)
}

// farMember decodes element e of a far bucket of format v whose first due
// ms is start: its due score and the encoded message. A blank element (a
// message cancelled or moved to the waiting set) or one that cannot be
// read is skipped (unpack.lua leaves the latter in place, and logs it).
func farMember(sh Shard, v int, start int64, e string) (WaitingMember, bool) {
	m, ok, _ := decodeFar(v, start, e)
	if !ok {
		return WaitingMember{}, false
	}
	body := m.Body
	id, _ := storedUUID([]byte(body))
	return WaitingMember{ID: id, Score: m.Score, Shard: sh, Body: &body}, true
}
