package store

import (
	"context"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The far tier keeps messages due far ahead compactly, so a backlog of
// tens of millions costs a fraction of what the waiting set and its hash
// of bodies cost per message, and the waiting set stays small and hot.
//
// A message due more than about farLead + farWidth ahead, with no business
// key and no priority, goes into the far bucket of its due time: a list
// (<shard>:fb:<bucket>, one per farWidth of due time) of its due score and
// encoded body, in publish order. Lists pack their elements in listpacks
// of 8 KB, a few bytes of overhead each. The far index (<shard>:fx:<n>, 2^19
// small hashes, listpack-encoded up to 128 fields at Redis's defaults) maps
// the message's UUID (16 bytes when canonical) to its bucket and position,
// for Cancel, Reschedule, Find and the duplicate check of a retried
// Publish. The scheduler holding the partition's lease unpacks a bucket
// into the waiting set farLead before the bucket's first due time
// (unpack.lua), at most a batch per call, so the waiting set only ever holds
// what falls due within about farLead + farWidth, plus messages with
// business keys or priority. Cancelling or moving a far message first pulls
// it into the waiting set (farpull.lua), where it is handled like any
// other; its list element becomes "" until the bucket is unpacked.
//
// The far tier is invisible in the API: counts, Waiting, the histogram and
// every lookup include it.
const (
	// defaultFarWidth is the span of due times of one far bucket.
	defaultFarWidth = time.Minute
	// defaultFarLead is how long before its first due time a far bucket is
	// unpacked into the waiting set: enough for a bucket of a million
	// messages, and for a scheduler that is a few seconds late.
	defaultFarLead = time.Minute
	// defaultFarMargin keeps a publish out of a bucket about to be unpacked
	// (the publisher's clock may run ahead of Redis's).
	defaultFarMargin = 5 * time.Second
)

// The far tier's timing: the defaults above, shortened for the tests
// (SetFarTier in export_test.go).
var FarWidth, FarLead, FarMargin = defaultFarWidth, defaultFarLead, defaultFarMargin

// FarSlack is how far outside its bucket publish.lua lets a message be due:
// the publisher picks the bucket by its own clock, and a message due at the
// very end of a bucket (delay.For's due times fall at the end of a whole
// second) would otherwise miss it by the time the script runs. Below a
// quarter of the width, so a message is never due after those of the
// bucket after next (Inspector.Waiting reads one bucket more for that), and
// below the lead, so it is never unpacked after it is due.
func FarSlack() time.Duration {
	return min(FarMargin, FarWidth/4, FarLead/2)
}

// farEpoch is the origin of far bucket numbers, so that bucket × 2^24 +
// position stays exact in a Lua number (2^53) for a century of due times.
var farEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

const (
	farIndexShards = 1 << 19
	farPosBits     = 24
	FarUnpackBatch = 1000 // elements moved per unpack.lua call, at most
)

// farField is the field of a UUID in the far index: its 16 bytes when the
// UUID is canonical (watermill.NewUUID's form), else the UUID itself.
func farField(uuid string) string {
	if b, ok := binaryUUID(uuid); ok {
		return string(b[:])
	}
	return uuid
}

// farShard is the far index shard holding a field.
func farShard(field string) uint32 {
	return crc32.ChecksumIEEE([]byte(field)) & (farIndexShards - 1)
}

// farPlace is the far bucket of a message due at dueMs, the bucket's first
// due ms and when it is unpacked; ok is false when the message is due too
// soon for the far tier (by the publisher's clock: publish.lua checks
// again with Redis's).
func farPlace(nowMs, dueMs int64) (b, start, unpackAt int64, ok bool) {
	return farPlaceIn(FarWidth, FarLead, FarMargin, nowMs, dueMs)
}

func farPlaceIn(width, lead, margin time.Duration, nowMs, dueMs int64) (b, start, unpackAt int64, ok bool) {
	w := width.Milliseconds()
	if dueMs < farEpoch {
		return 0, 0, 0, false
	}
	b = (dueMs - farEpoch) / w
	start = farEpoch + b*w
	unpackAt = start - lead.Milliseconds()
	return b, start, unpackAt, unpackAt > nowMs+margin.Milliseconds()
}

// farLoc splits a far index value into bucket and position.
func farLoc(loc string) (b, pos int64, err error) {
	v, err := strconv.ParseInt(loc, 10, 64)
	if err != nil || v < 0 {
		return 0, 0, fmt.Errorf("far index value %q is not a location", loc)
	}
	return v >> farPosBits, v & (1<<farPosBits - 1), nil
}

// FarArg is where publish.lua may look up and store a message in the far
// tier (see far.go).
type FarArg struct {
	Field    string        // the UUID's far index field
	Index    uint32        // its far index shard
	Lookup   bool          // a waiting message: looked up in the far index
	DueIn    time.Duration // its delay when it may go to the far tier, else 0
	Bucket   int64         // far bucket (farArg.place); -1: not for the far tier
	Start    int64         // the bucket's first due ms
	UnpackAt int64         // when the bucket is unpacked, ms
}

// FarArgOf is where a message may be looked up and stored in the far
// tier: one due far enough ahead, with no business key and no priority, may
// be stored there, and a waiting message due farMargin or more ahead is
// looked up there first, so the tiers never hold one UUID twice. Nearer
// ones are not looked up: the lookup would cost every publish of a
// message due soon a read of the far index, which grows with the far
// backlog, and such a message can be in the far tier only if published
// before with a due time two minutes or more ahead of then, and so, when a
// retry, more than a minute ago.
// The bucket is chosen later, by place.
func FarArgOf(uuid string, delay time.Duration, mayFar bool) FarArg {
	f := FarArg{Bucket: -1}
	if delay < FarMargin {
		return f
	}
	f.Field = farField(uuid)
	f.Index = farShard(f.Field)
	f.Lookup = true
	if mayFar {
		f.DueIn = delay
	}
	return f
}

// Place chooses the far bucket of a message that may go there, by the
// clock nowMs.
func (f *FarArg) Place(nowMs int64) {
	if f.DueIn == 0 {
		return
	}
	if b, start, at, ok := farPlace(nowMs, nowMs+f.DueIn.Milliseconds()); ok {
		f.Bucket, f.Start, f.UnpackAt = b, start, at
	}
}

// FarPull moves the far message with uuid, if any, into the partition's
// waiting set (farpull.lua), or with peek only reads it. It returns the
// message's encoded body and due score; found is false when no far message
// has that UUID. A message unpacked or moved at the same moment is looked
// up again.
func FarPull(ctx context.Context, c Cmds, sh Shard, uuid string, peek bool) (body string, score float64, found bool, err error) {
	field := farField(uuid)
	index := sh.farIndex(farShard(field))
	for range 5 {
		loc, err := c.HGet(ctx, index, field).Result()
		if err == redis.Nil {
			return "", 0, false, nil
		}
		if err != nil {
			return "", 0, false, err
		}
		b, _, err := farLoc(loc)
		if err != nil {
			return "", 0, false, err
		}
		r, err := callFarPull(ctx, c, sh, b, index, field, loc, uuid, peek)
		if err != nil || r.Moved {
			return r.Body, r.Score, r.Moved, err
		}
	}
	return "", 0, false, fmt.Errorf("the far message %q kept moving while it was looked up", uuid)
}

// FarPullMany is FarPull (not peeking) for many UUIDs of a partition, on
// two pipelines: the far index lookups, then farpull.lua for those found.
// A message that moved meanwhile is looked up again on its own.
func FarPullMany(ctx context.Context, c redis.Cmdable, sh Shard, uuids []string) error {
	pipe := c.Pipeline()
	locs := make([]*redis.StringCmd, len(uuids))
	fields := make([]string, len(uuids))
	for k, uuid := range uuids {
		fields[k] = farField(uuid)
		locs[k] = pipe.HGet(ctx, sh.farIndex(farShard(fields[k])), fields[k])
	}
	execPipe(ctx, pipe)
	pipe = c.Pipeline()
	pulls := make([]pipedScript, len(uuids))
	for k, uuid := range uuids {
		loc, err := locs[k].Result()
		if err == redis.Nil {
			continue // not in the far tier (any more)
		}
		if err != nil {
			return err
		}
		b, _, err := farLoc(loc)
		if err != nil {
			return err
		}
		pulls[k] = pipeScript(ctx, pipe, farPullScript,
			[]string{sh.Far(), sh.FarMeta(), sh.FarBucket(b), sh.farIndex(farShard(fields[k])), sh.Waiting(), sh.Bodies()},
			fields[k], loc, uuid, b, sh.Wake(), "0")
	}
	execPipe(ctx, pipe)
	for k, p := range pulls {
		if p.Cmd == nil {
			continue
		}
		res, err := p.Result(ctx, c).Slice()
		if err != nil {
			return err
		}
		if n, _ := res[0].(int64); n != 1 {
			if _, _, _, err := FarPull(ctx, c, sh, uuids[k], false); err != nil {
				return err
			}
		}
	}
	return nil
}

// farOverdue is how long ago the first due time of the partition's first far
// bucket (ZRANGE far 0 0) passed with the bucket still packed: no
// scheduler unpacked it. 0 when none is overdue.
func farOverdue(head *redis.ZSliceCmd, now time.Time) time.Duration {
	zs := head.Val()
	if len(zs) == 0 {
		return 0
	}
	m, _ := zs[0].Member.(string)
	b, err := strconv.ParseInt(m, 10, 64)
	if err != nil {
		return 0
	}
	return max(now.Sub(farBucketStart(b)), 0)
}

// farBucketStart is the first due time of far bucket b (farPlaceIn's
// start, at the current width).
func farBucketStart(b int64) time.Time {
	return time.UnixMilli(farEpoch + b*FarWidth.Milliseconds())
}
