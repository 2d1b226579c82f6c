package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The far tier keeps messages due far ahead compactly, so a backlog of
// tens of millions costs a fraction of what the waiting set and its hash
// of bodies cost per message, and the waiting set stays small and hot.
//
// A message due more than about farLead + farWidth ahead (a business key of
// at most 255 bytes and a priority allowed) goes into the far bucket of its
// due time: a list (<shard>:fc:<bucket>, one per farWidth of due time) of
// elements of format 2 (farElem, below: a 6-byte head with its due time
// from the bucket's start, its key, then its encoded body), in publish
// order. Lists pack their elements in listpacks of 8 KB, a few bytes of
// overhead each. The far index (<shard>:fx:<n>, 2^19 small hashes,
// listpack-encoded up to 128 fields at Redis's defaults) maps the
// message's UUID (16 bytes when canonical) to its bucket and position, for
// Cancel, Reschedule, Find and the duplicate check of a retried Publish. A
// far message's business key points to a mark in bkeys (FarHolderUUID),
// so a lookup by key knows to pull it first. The scheduler holding the
// partition's lease unpacks a bucket into the waiting set farLead before
// the bucket's first due time (unpack.lua), at most a batch per call,
// restoring its key (bkeyof, bkeys) and priority, so the waiting set only
// ever holds what falls due within about farLead + farWidth. Cancelling or
// moving a far message, or replacing it by its key, first pulls it into
// the waiting set (farpull.lua), where it is handled like any other; its
// list element becomes "" until the bucket is unpacked.
//
// Format 1, which the previous version wrote (<shard>:far, :fb:<bucket>),
// is read, unpacked and pulled the same way until it drains; see farElem
// and farLoc for what tells them apart.
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

// farLoc splits a far index value into the format of its bucket (1 or 2),
// bucket and position. Format 1 stores bucket × 2^24 + position, format 2
// the same negated, less one, so that a process of the previous version
// refuses it as "not a location" (an error) instead of reading the wrong
// list.
func farLoc(loc string) (v int, b, pos int64, err error) {
	x, err := strconv.ParseInt(loc, 10, 64)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("far index value %q is not a location", loc)
	}
	v = 1
	if x < 0 {
		v, x = 2, -x-1
	}
	return v, x >> farPosBits, x & (1<<farPosBits - 1), nil
}

// farPopped is the far meta field counting the elements popped from a
// bucket by unpacking; farLive the one counting its live elements.
func farPopped(v int, b int64) string {
	if v == 2 {
		return "P:" + strconv.FormatInt(b, 10)
	}
	return "p:" + strconv.FormatInt(b, 10)
}

// Far elements. Format 1 (lists :fb:<bucket>): the due score as an 8-byte
// big-endian double, then the encoded message; its first byte is 0x43 for
// any due time of this century. Format 2 (lists :fc:<bucket>):
//
//	byte 0      2, the format
//	byte 1      flags: 1 high priority, 2 a business key follows
//	bytes 2-5   the due score less the bucket's first due ms × 1024, a
//	            big-endian signed 32-bit integer
//	[key]       with flag 2: one byte of length, then the business key
//	rest        the encoded message
//
// "" is an element cancelled or moved to the waiting set. Anything else is
// refused, and left in place: see unpack.lua.
const farFormat2 = 2

// farElem is a decoded far element.
type farElem struct {
	Score float64
	Body  string
	Key   string // "" for none
	Prio  bool
}

// decodeFar decodes element e of a far bucket of format v (a bucket of
// format 2 holds elements of format 3 too: far3.go) whose first due ms is
// start; ok is false for a blank element or one that cannot be read (bad
// true).
func decodeFar(v int, start int64, e string) (m farElem, ok, bad bool) {
	if e == "" {
		return m, false, false
	}
	if v != farFormat2 {
		if len(e) < 9 || e[0] == farFormat2 || e[0] == farFormat3 {
			return m, false, true
		}
		return farElem{Score: math.Float64frombits(binary.BigEndian.Uint64([]byte(e[:8]))), Body: e[8:]}, true, false
	}
	if e[0] == farFormat3 {
		m, ok = decodeFar3(start, e)
		return m, ok, !ok
	}
	if len(e) < 7 || e[0] != farFormat2 || e[1]&^3 != 0 {
		return m, false, true
	}
	flags := e[1]
	rel := int32(binary.BigEndian.Uint32([]byte(e[2:6])))
	m.Score = float64(start*1024 + int64(rel))
	m.Prio = flags&1 != 0
	rest := e[6:]
	if flags&2 != 0 {
		n := int(rest[0])
		if len(rest) < 1+n+1 {
			return m, false, true
		}
		m.Key, rest = rest[1:1+n], rest[1+n:]
	}
	m.Body = rest
	return m, true, false
}

// FarArg is where publish.lua may look up and store a message in the far
// tier (see far.go).
type FarArg struct {
	Field    string        // the UUID's far index field
	Index    uint32        // its far index shard
	Filter   uint32        // where it is in the far filter (farSel)
	Lookup   bool          // a waiting message: looked up in the far index
	DueIn    time.Duration // its delay when it may go to the far tier, else 0
	Bucket   int64         // far bucket (farArg.place); -1: not for the far tier
	Start    int64         // the bucket's first due ms
	UnpackAt int64         // when the bucket is unpacked, ms
	// Format3: stored in format 3 (far3.go) if it goes to the far tier,
	// as a process writes at level 3 (WritesFar3).
	Format3 bool
	// notFar: a pull found no far message of this UUID, so an entry of its
	// fingerprint in the format 3 index is another message's (NotFar).
	notFar bool
	// keyOther: the place (fpLoc less its flag byte) of the format 3
	// index's entry at the business key's fingerprint that a lookup found
	// another key's (KeyElsewhere).
	keyOther string
}

// KeyElsewhere tells the next runs that the entry at the business key's
// fingerprint in the format 3 index, at place other (FarKeyLookup's), is
// another key's: they do not take it for the key's holder. An entry at
// another place (stored since) is looked up as any.
func (f *FarArg) KeyElsewhere(other string) { f.keyOther = other }

// NotFar tells the next runs that a pull found no far message with the
// UUID (its fingerprint's entry in the format 3 index is another
// message's): they do not look it up there again. The exact lookups (the
// waiting set, format 2's index) still run.
func (f *FarArg) NotFar() { f.notFar = true }

// FarArgOf is where a message may be looked up and stored in the far
// tier: one due far enough ahead may be stored there (mayFar), and a waiting message due farMargin or more ahead is
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
	f.Filter = farSel(f.Field)
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
	return FarPullKeyed(ctx, c, sh, uuid, "", peek)
}

// FarPullKeyed is FarPull of a message expected to hold business key key
// ("" for none known), as FarKeyLookup found it: a format 3 message's key
// entry then goes in the same script run, not in a second one that
// farpull.lua asks for once it has read the key.
func FarPullKeyed(ctx context.Context, c Cmds, sh Shard, uuid, key string, peek bool) (body string, score float64, found bool, err error) {
	field := farField(uuid)
	index := sh.farIndex(farShard(field))
	for range 5 {
		// The format 3 index's shape comes along, so that a partition
		// without one pays no round trip more, and with the shape the
		// process last saw, the shard it picks (used if it is still the
		// shape: a round trip less).
		var lc *redis.StringCmd
		var mc *redis.SliceCmd
		var pre *fpRead
		if known := lookupShapes.load(sh); known.Set {
			pre = uuidRead(sh, known, field)
		}
		pipeFailed(c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			lc = pipe.HGet(ctx, index, field)
			mc = pipe.HMGet(ctx, sh.FarMeta(), fpShapeFields...)
			pre.queue(ctx, pipe, sh)
			return nil
		}))
		loc, err := lc.Result()
		if err == redis.Nil {
			var again bool
			body, score, found, again, err = farPull3(ctx, c, sh, mc, pre, field, uuid, key, peek)
			if err != nil || !again {
				return body, score, found, err
			}
			continue
		}
		if err != nil {
			return "", 0, false, err
		}
		v, b, _, err := farLoc(loc)
		if err != nil {
			return "", 0, false, err
		}
		r, _, err := callFarPull(ctx, c, sh, v, b, farAt{index: index, field: field, loc: loc, mode: "2", full: field}, uuid, peek)
		if err != nil || r.Moved {
			return r.Body, r.Score, r.Moved, err
		}
	}
	return "", 0, false, fmt.Errorf("the far message %q kept moving while it was looked up", uuid)
}

// farPull3 is FarPullKeyed in the format 3 index, whose shape mc read
// (pre: the shard read beside it, by the shape the process knew, or nil):
// again when the message moved meanwhile.
func farPull3(ctx context.Context, c Cmds, sh Shard, mc *redis.SliceCmd, pre *fpRead, field, uuid, key string, peek bool) (body string, score float64, found, again bool, err error) {
	vals, err := mc.Result()
	if err != nil {
		return "", 0, false, false, err
	}
	shape, err := lookupShape(sh, vals)
	if err != nil || !shape.Set {
		return "", 0, false, false, err
	}
	r := pre.ifAt(shape)
	if r == nil {
		r = uuidRead(sh, shape, field)
		r.read(ctx, c, sh)
	}
	// The side table's entry is the message's for sure; the shard's may be
	// another message's of the same fingerprint.
	ats := make([]farAt, 0, 2)
	for _, e := range []struct {
		cmd *redis.StringCmd
		at  farAt
	}{{r.cc, farAt{index: sh.fpSide(), field: field, mode: "s", full: field}}, {r.sc, farAt{index: r.shard, field: r.fp, mode: "3", full: field}}} {
		loc, err := e.cmd.Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return "", 0, false, false, err
		}
		e.at.loc = loc
		if key != "" {
			e.at.key = shape.keyAt(sh, key)
		}
		ats = append(ats, e.at)
	}
	now := (time.Now().UnixMilli() - farEpoch) / FarWidth.Milliseconds()
	for _, at := range ats {
		b, _, _, err := fpParse(at.loc, now)
		if err == errFpTombstone {
			continue
		}
		if err != nil {
			return "", 0, false, false, err
		}
		r, other, err := callFarPull(ctx, c, sh, farFormat2, b, at, uuid, peek)
		if err != nil || r.Moved {
			return r.Body, r.Score, r.Moved, false, err
		}
		if !other {
			return "", 0, false, true, nil
		}
	}
	moved, err := r.moved()
	return "", 0, false, moved, err
}

// lookupShapes keeps each partition's format 3 index shape as this
// process's lookups last read it (FarPullKeyed, FarKeyLookup), so that the
// next lookup reads the shard it picks in its first round trip.
var lookupShapes FarShapes

// lookupShape is the shape in vals (iL, iS), kept in lookupShapes.
func lookupShape(sh Shard, vals []any) (fpShape, error) {
	shape, err := fpShapeOf(vals)
	if err == nil {
		lookupShapes.store(sh, shape)
	}
	return shape, err
}

// fpRead is a lookup's read of an entry in the format 3 index: the shard
// that shape picks and the side table, then the shape again.
type fpRead struct {
	shape                  fpShape
	h                      uint64 // the entry's hash: shape.shard(h) is shard's number
	shard, fp, side, field string
	sc, cc                 *redis.StringCmd
	after                  *redis.SliceCmd
}

// uuidRead is the read of the entry of far field field.
func uuidRead(sh Shard, shape fpShape, field string) *fpRead {
	return newFpRead(sh, shape, fpHash(field), sh.fpSide(), field)
}

// keyRead is the read of the entry of business key key.
func keyRead(sh Shard, shape fpShape, key string) *fpRead {
	return newFpRead(sh, shape, fpKeyHash(key), sh.fpKeySide(), key)
}

// newFpRead is the read of the entry of hash h, whose side table side
// names it field.
func newFpRead(sh Shard, shape fpShape, h uint64, side, field string) *fpRead {
	return &fpRead{shape: shape, h: h, shard: sh.fpIndex(shape.shard(h)), fp: fpField(h), side: side, field: field}
}

// queue adds the read to pipe (none for a nil r).
func (r *fpRead) queue(ctx context.Context, pipe redis.Pipeliner, sh Shard) {
	if r != nil {
		r.sc = pipe.HGet(ctx, r.shard, r.fp)
		r.cc = pipe.HGet(ctx, r.side, r.field)
		r.after = pipe.HMGet(ctx, sh.FarMeta(), fpShapeFields...)
	}
}

// read makes the read in a round trip of its own, after the shape was read.
func (r *fpRead) read(ctx context.Context, c Cmds, sh Shard) {
	afterShapeRead()
	pipeFailed(c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		r.queue(ctx, pipe, sh)
		return nil
	}))
}

// ifAt is r when it read the shard shape picks for its entry (read beside
// the shape, by the shape the process knew), else nil.
func (r *fpRead) ifAt(shape fpShape) *fpRead {
	if r == nil || r.shape.shard(r.h) != shape.shard(r.h) {
		return nil
	}
	return r
}

// moved reports whether the shape, read again after the entry, picks
// another shard for it than the read did: a split in between moved the
// entry the read did not find. A miss is a miss when the entry's shard
// stayed, however many other shards split meanwhile: a split moves only
// the entries of the shard it splits, and only on, so a shard that is the
// entry's under the shapes before and after the read was its shard all
// along. (Comparing whole shapes made lookups fail with "kept moving"
// during a busy fill, where nearly every publish call splits a shard.)
func (r *fpRead) moved() (bool, error) {
	vals, err := r.after.Result()
	if err != nil {
		return false, err
	}
	now, err := fpShapeOf(vals)
	return !now.Set || now.shard(r.h) != r.shape.shard(r.h), err
}

// afterShapeRead runs between a lookup's read of the format 3 index's
// shape and a read of the shard that shape picks in a round trip of its
// own: a hook for the tests, which split the shard there.
var afterShapeRead = func() {}

// FarPullMany is FarPull (not peeking) for many UUIDs of a partition, on
// two pipelines: the far index lookups, then farpull.lua for those found.
// A message that moved meanwhile, or one the far index does not hold while
// the partition has a format 3 index, is looked up again on its own.
func FarPullMany(ctx context.Context, c redis.Cmdable, sh Shard, uuids []string) error {
	pipe := c.Pipeline()
	locs := make([]*redis.StringCmd, len(uuids))
	fields := make([]string, len(uuids))
	for k, uuid := range uuids {
		fields[k] = farField(uuid)
		locs[k] = pipe.HGet(ctx, sh.farIndex(farShard(fields[k])), fields[k])
	}
	shape := pipe.HGet(ctx, sh.FarMeta(), fpShapeFields[0])
	execPipe(ctx, pipe)
	if err := shape.Err(); err != nil && err != redis.Nil {
		return err
	}
	has3 := shape.Val() != ""
	pipe = c.Pipeline()
	pulls := make([]pipedScript, len(uuids))
	var alone []string
	for k, uuid := range uuids {
		loc, err := locs[k].Result()
		if err == redis.Nil {
			if has3 {
				alone = append(alone, uuid)
			}
			continue // not in the far tier (any more)
		}
		if err != nil {
			return err
		}
		v, b, _, err := farLoc(loc)
		if err != nil {
			return err
		}
		keys, args := farPullArgs(sh, v, b, farAt{index: sh.farIndex(farShard(fields[k])), field: fields[k], loc: loc, mode: "2", full: fields[k]}, uuid, false)
		pulls[k] = pipeScript(ctx, pipe, farPullScript, keys, args...)
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
			alone = append(alone, uuids[k])
		}
	}
	for _, uuid := range alone {
		if _, _, _, err := FarPull(ctx, c, sh, uuid, false); err != nil {
			return err
		}
	}
	return nil
}

// FarKeyHolder reads which message holds business key in a partition,
// and reports whether it waits in the far tier: uuid is "" when none does
// or it is not far.
func FarKeyHolder(ctx context.Context, c Cmds, sh Shard, key string) (uuid string, err error) {
	uuid, _, err = FarKeyLookup(ctx, c, sh, key)
	return uuid, err
}

// FarKeyLookup finds the far holder of business key key in a partition:
// its UUID, "" when none waits in the far tier. bkeys marks a holder of
// format 2 (publish.lua); format 3's index marks one by the key's
// fingerprint (far3.go), confirmed here against the element. other is the
// place of the index's entry at the key's fingerprint when that entry is
// another key's (for FarArg.KeyElsewhere).
func FarKeyLookup(ctx context.Context, c Cmds, sh Shard, key string) (uuid, other string, err error) {
	for range 5 {
		// as FarPullKeyed: the shard the shape this process knew picks
		// comes along
		var hc *redis.StringCmd
		var mc *redis.SliceCmd
		var pre *fpRead
		if known := lookupShapes.load(sh); known.Set {
			pre = keyRead(sh, known, key)
		}
		pipeFailed(c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			hc = pipe.HGet(ctx, sh.Bkeys(), key)
			mc = pipe.HMGet(ctx, sh.FarMeta(), fpShapeFields[0], fpShapeFields[1], "nk")
			pre.queue(ctx, pipe, sh)
			return nil
		}))
		h, err := hc.Result()
		if err == nil {
			id, _ := FarHolderUUID(h)
			return id, "", nil
		}
		if err != redis.Nil {
			return "", "", err
		}
		vals, err := mc.Result()
		if err != nil {
			return "", "", err
		}
		shape, err := lookupShape(sh, vals[:2])
		if nk, _ := vals[2].(string); err != nil || !shape.Set || nk == "" {
			return "", "", err
		}
		r := pre.ifAt(shape)
		if r == nil {
			r = keyRead(sh, shape, key)
			r.read(ctx, c, sh)
		}
		uuid, other, again, err := farKeyLookup3(ctx, c, sh, r, key)
		if err != nil || !again {
			return uuid, other, err
		}
	}
	return "", "", fmt.Errorf("the far holder of business key %q kept moving while it was looked up", key)
}

// farKeyLookup3 is FarKeyLookup in the format 3 index, from read r of the
// key's entry: again when the entry moved meanwhile.
func farKeyLookup3(ctx context.Context, c Cmds, sh Shard, r *fpRead, key string) (uuid, other string, again bool, err error) {
	now := (time.Now().UnixMilli() - farEpoch) / FarWidth.Milliseconds()
	// The side table's entry is the key's for sure; the shard's, when a
	// key's, may be another key's of the same fingerprint.
	for _, e := range []struct {
		cmd *redis.StringCmd
		at  farAt
	}{{r.cc, farAt{index: sh.fpKeySide(), field: key, mode: "s", byKey: key}}, {r.sc, farAt{index: r.shard, field: r.fp, mode: "3", byKey: key}}} {
		loc, err := e.cmd.Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return "", "", false, err
		}
		place, isKey := fpKeyLoc(loc)
		if e.at.mode == "3" && !isKey {
			continue // a UUID's entry, or a tombstone
		}
		b, _, _, err := fpParse(loc, now)
		if err != nil {
			return "", "", false, err
		}
		e.at.loc = loc
		r, isOther, err := callFarPull(ctx, c, sh, farFormat2, b, e.at, "", true)
		if err != nil {
			return "", "", false, err
		}
		if r.Moved {
			id, _ := storedUUID([]byte(r.Body))
			return id, "", false, nil
		}
		if !isOther {
			return "", "", true, nil
		}
		if e.at.mode == "3" {
			other = place
		}
	}
	moved, err := r.moved()
	return "", other, moved, err
}

// FarHolderUUID reads a bkeys value: the UUID of the far message it marks
// as its key's holder, and true; or "", false for a value naming a message
// in the waiting set. A far holder's mark (farel.lua's far_mark) is "\x00\x01"
// and the UUID's 16 bytes when it is canonical, 24 bytes less than the
// text form, which older versions wrote ("\x00" and the UUID) and which
// stays for other UUIDs.
func FarHolderUUID(h string) (string, bool) {
	id, ok := strings.CutPrefix(h, "\x00")
	if !ok {
		return "", false
	}
	if len(id) == 17 && id[0] == 1 {
		return textUUID([]byte(id[1:])), true
	}
	return id, true
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

// FarBucketKey names far bucket b of format v, for logs.
func FarBucketKey(sh Shard, v int, b int64) string { return sh.farBucketKey(v, b) }

// FarBucketStartMs is the first due ms of far bucket b, as a parked
// element records it (unpack.lua).
func FarBucketStartMs(b int64) int64 { return farBucketStart(b).UnixMilli() }

// FarHeadRead is what FarHead read of a far bucket, for Unpack.
type FarHeadRead struct {
	Popped int64    // the bucket's popped count
	Els    []string // its first elements
	shape  fpShape  // the format 3 index's (far3.go)
}

// FarHead reads the popped count of far bucket b of format v, its first n
// elements, as unpack.lua takes them, and the shape of the format 3 index.
func FarHead(ctx context.Context, c Cmds, sh Shard, v int, b int64, n int) (FarHeadRead, error) {
	var m *redis.SliceCmd
	var e *redis.StringSliceCmd
	// A pipeline rather than MULTI, which Redis refuses at maxmemory; each
	// command's error is checked below.
	pipeFailed(c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		m = pipe.HMGet(ctx, sh.FarMeta(), farPopped(v, b), fpShapeFields[0], fpShapeFields[1])
		e = pipe.LRange(ctx, sh.farBucketKey(v, b), 0, int64(min(n, FarUnpackBatch))-1)
		return nil
	}))
	if err := e.Err(); err != nil {
		return FarHeadRead{}, err
	}
	vals, err := m.Result()
	if err != nil {
		return FarHeadRead{}, err
	}
	shape, err := fpShapeOf(vals[1:])
	if err != nil {
		return FarHeadRead{}, err
	}
	p, _ := vals[0].(string) // nil: a bucket never unpacked
	popped, _ := strconv.ParseInt(p, 10, 64)
	return FarHeadRead{Popped: popped, Els: e.Val(), shape: shape}, nil
}
