package store

import (
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Format 3 of the far tier (issue 50), storage level 3: this release
// reads it everywhere (unpack.lua, farpull.lua, publish.lua's duplicate
// check, the recurring overlap check, unpark.lua) and writes it in
// publish.lua (FarArg.Format3) at level 3, unless SetWriteFar2 says
// otherwise (tests, the bench). What it changes against format 2:
//
// Elements. A format 3 element sits in the lists of format 2 (:fz and
// :fc:<bucket>, their P: and L: counts), told apart by its first byte:
//
//	byte 0      3, the format
//	bytes 1-4   a big-endian 32-bit word: bit 31 high priority, bit 30 a
//	            business key, bit 29 the until metadata derived, bits
//	            0-28 the due score less the bucket's first due ms × 1024,
//	            plus 2^28
//	[key]       with bit 30: one byte of length n, then a big-endian
//	            16-bit offset in the stored message where its n bytes
//	            are the business key (its metadata holds the key, so
//	            the element holds it once: publish.lua points at the
//	            first place the message's bytes equal the key's); 65535
//	            when that is not within 65,535 bytes: then the key
//	[until]     with bit 29: the place in the encoded message of its
//	            until entry, which the element leaves out (one byte),
//	            and the entry's seconds less the due second's (a signed
//	            byte): Watermill's _watermill_delayed_until in whole
//	            seconds, UTC, as delay.For and delay.Until write it,
//	            costs 2 bytes instead of 7 (farUntilAt, farUntilEntry)
//	rest        the encoded message (less its until entry, with bit 29)
//
// Both readers give the encoded message back byte for byte, so a retried
// Publish of a far message compares equal once pulled. Watermill's
// _watermill_delayed_for cannot be derived so: it holds the instant of the
// delay.For or delay.Until call, which nothing else records (and
// middleware.DelayOnError reads it back), so it stays in the message.
//
// A process of release 0.2.0 parks such an element (unpack.lua) rather
// than reading it wrong, and this release's scheduler moves it on
// (Unpark); a format 3 reader parks what it cannot read the same way.
//
// The index. Instead of the UUID's 16 bytes in 2^19 fixed shards (format
// 2's :fx:<n>, 41.7 B a message at 5M), a 4-byte fingerprint of the UUID in
// hash shards whose number follows the tier's size by linear hashing,
// about 15 B a message at any size (bench/README.md, "Format 3's index").
// A message's hash h is the first 8 bytes of the SHA-1 of its far field
// (farField). The partition's index has shards <shard>:fi:<n> for n <
// 2^L + S, L (at least fpMinLevel) and the split pointer S in :fmeta's iL
// and iS (absent: no format 3 index was ever written; L fpMinLevel, S 0).
// A message's shard is h mod 2^L, or h mod 2^(L+1) when that is below S
// (shards below S were split). Its field is the 32 bits of h from bit
// fpMinLevel, so a split (moving the fields whose bit L is set to shard n
// + 2^L, then S+1; 2^L + S reaching 2^(L+1) makes L+1 and S 0) reads the
// fields alone.
//
// The field's value is the message's place: fpLoc. A fingerprint already
// taken in its shard by another message sends the newcomer's place to the
// side table (:fic, its far field -> its place), and flags the shard's
// entry as collided; removing a collided holder leaves a tombstone (the
// flag alone), so that a lookup of that fingerprint still reads the side
// table. A writer meeting a tombstone takes its place, flag kept. Every
// hit is confirmed against the element, which holds the whole UUID.
//
// Business keys. A far message of format 3 with a business key marks its
// key in the same shards, not in :bkeys (format 2's far mark costs about
// 110 B a message in a hash of millions of entries): an entry at the
// key's fingerprint (fpKeyHash, a hash of its own, so key and UUID
// entries mix in the shards and split alike) whose place, flagged as a
// key's (fpLocKey, always the 7-byte form), is the holder's. Colliding
// keys go to their own side table (:fkc, key -> place), so a key and a
// UUID never share a side table's field; :fmeta's nk counts the key
// entries (the shards split by n + nk). A lookup of a key that :bkeys does
// not hold reads its entry (publish.lua); a hit, confirmed against the
// element (which holds the key), names the holder, which the caller pulls
// into the waiting set: there the policies apply as to any holder.
const (
	farFormat3 = 3
	// fpMinLevel is the index's smallest L: 2,048 shards.
	fpMinLevel = 11
	// fpRelBias is what a format 3 head adds to the score's offset from
	// its bucket, so the offset is stored unsigned in 29 bits.
	fpRelBias = 1 << 28
	// The flags of a format 3 head's 32-bit word.
	fpPrio  = 1 << 31 // high priority
	fpKeyed = 1 << 30 // a business key
	fpUntil = 1 << 29 // the until metadata derived from the due time
	// fpLocBucketMod is the range of the bucket number a place stores (3
	// bytes); a reader takes the bucket of that residue nearest its own
	// clock's (fpBucket): 16 million buckets, 31 years at the default
	// width, so a far tier reaching 15 years either way of now is exact.
	fpLocBucketMod = 1 << 24
	// fpLocCollided flags a place (its 7-byte form) or a tombstone.
	fpLocCollided = 1
	// fpLocKey flags a business key's place (its 7-byte form).
	fpLocKey = 2
	// fpKeyInline is a keyed element's offset when its key follows.
	fpKeyInline = 1<<16 - 1
)

// encodeFar3 is a format 3 element of a bucket whose first due ms is
// start, as publish.lua writes it.
func encodeFar3(start int64, m farElem) (string, error) {
	rel := int64(m.Score) - start*1024
	if rel < -fpRelBias || rel >= fpRelBias {
		return "", fmt.Errorf("due score %.0f is too far from its far bucket's start %d for format 3", m.Score, start)
	}
	if len(m.Key) > 255 {
		return "", fmt.Errorf("business key of %d bytes: a far element holds at most 255", len(m.Key))
	}
	w := uint32(rel + fpRelBias)
	if m.Prio {
		w |= fpPrio
	}
	body := m.Body
	var until []byte
	if at, n, unix := farUntilAt([]byte(body)); at >= 0 {
		if d := unix - int64(m.Score)/1024/1000; d >= -128 && d < 128 {
			w |= fpUntil
			until = []byte{byte(at), byte(int8(d))}
			body = body[:at] + body[at+n:]
		}
	}
	e := make([]byte, 5, 5+3+len(m.Key)+2+len(body))
	e[0] = farFormat3
	if m.Key != "" {
		w |= fpKeyed
		e = append(e, byte(len(m.Key)))
		if at := strings.Index(body, m.Key); at >= 0 && at < fpKeyInline {
			e = binary.BigEndian.AppendUint16(e, uint16(at))
		} else {
			e = binary.BigEndian.AppendUint16(e, fpKeyInline)
			e = append(e, m.Key...)
		}
	}
	binary.BigEndian.PutUint32(e[1:], w)
	e = append(e, until...)
	return string(append(e, body...)), nil
}

// decodeFar3 decodes format 3 element e (e[0] is 3) of a bucket whose
// first due ms is start; ok is false when it is damaged.
func decodeFar3(start int64, e string) (m farElem, ok bool) {
	if len(e) < 6 {
		return m, false
	}
	w := binary.BigEndian.Uint32([]byte(e[1:5]))
	m.Score = float64(start*1024 + int64(w&(fpUntil-1)) - fpRelBias)
	m.Prio = w&fpPrio != 0
	rest := e[5:]
	keyAt, keyLen := -1, 0
	if w&fpKeyed != 0 {
		if len(rest) < 4 {
			return m, false
		}
		keyLen, keyAt = int(rest[0]), int(binary.BigEndian.Uint16([]byte(rest[1:3])))
		rest = rest[3:]
		if keyAt == fpKeyInline {
			if len(rest) < keyLen+1 {
				return m, false
			}
			m.Key, rest, keyAt = rest[:keyLen], rest[keyLen:], -1
		}
		if keyLen == 0 {
			return m, false
		}
	}
	untilAt, d := -1, int64(0)
	if w&fpUntil != 0 {
		if len(rest) < 3 || int(rest[0]) > len(rest)-2 {
			return m, false
		}
		untilAt, d, rest = int(rest[0]), int64(int8(rest[1])), rest[2:]
	}
	// the key points into the message as stored, its until entry left out
	if keyAt >= 0 {
		if keyAt+keyLen > len(rest) {
			return m, false
		}
		m.Key = rest[keyAt : keyAt+keyLen]
	}
	if untilAt >= 0 {
		rest = rest[:untilAt] + string(farUntilEntry(int64(m.Score)/1024/1000+d)) + rest[untilAt:]
	}
	m.Body = rest
	return m, true
}

// farUntilEntry is the encoded metadata entry of a until key of Unix
// seconds unix in UTC (appendWellKnown's).
func farUntilEntry(unix int64) []byte {
	b := binary.AppendUvarint(make([]byte, 0, 12), 2*wellKnownDelayedUntil+1)
	b = binary.AppendVarint(b, unix)
	return binary.AppendVarint(b, 0)
}

// farUntilAt is where encoded message body has the entry a format 3
// element derives from its due time: Watermill's until key in whole
// seconds, UTC, from 1970 on (farUntilEntry), starting within its first
// 255 bytes (the element keeps its place in one byte); at is -1 when it
// has none such, else n is its length and unix its seconds.
func farUntilAt(body []byte) (at, n int, unix int64) {
	at = -1
	eachEntry(body, func(k uint64, start, size int) bool {
		if k/2 != wellKnownDelayedUntil || k%2 == 0 {
			return true
		}
		r := reader{b: body[start:]}
		r.uvarint()
		if u, zone := r.varint(), r.varint(); zone == 0 && u >= 0 && start <= 254 {
			at, n, unix = start, size, u
		}
		return false
	})
	return at, n, unix
}

// fpHash is the index hash of a far field (a variable: tests make two
// UUIDs collide).
var fpHash = func(field string) uint64 {
	s := sha1.Sum([]byte(field))
	return binary.BigEndian.Uint64(s[:8])
}

// fpKeyHash is the index hash of business key key: "k", a zero byte (no
// far field begins so: its UUID's 16 bytes, or text), and the key.
func fpKeyHash(key string) uint64 { return fpHash("k\x00" + key) }

// fpShardArg is the binary argument that names the shards of a hash whose
// low bits are low (h mod 2^L, or -1 - that: see publish.lua) in a
// script's KEYS, a the shard h mod 2^L and b the shard h mod 2^(L+1).
func fpShardArg(low int64, a, b int) []byte {
	arg := binary.BigEndian.AppendUint32(make([]byte, 0, 20), uint32(int32(low)))
	arg = binary.BigEndian.AppendUint32(arg, uint32(a))
	return binary.BigEndian.AppendUint32(arg, uint32(b))
}

// fpField is the index field of hash h: its 32 bits from bit fpMinLevel.
func fpField(h uint64) string {
	var f [4]byte
	binary.BigEndian.PutUint32(f[:], fpSel(h))
	return string(f[:])
}

// fpSel is where a message of hash h is in the far filter (farfilter.go):
// its format 3 bit is this modulo the filter's bits. The fingerprint's 32
// bits, so a rebuild reads it back from the index's fields.
func fpSel(h uint64) uint32 { return uint32(h >> fpMinLevel) }

// fpShape is a partition's index shape, L and S (see above), and the size
// of its far filter as a publisher knows them.
type fpShape struct {
	L, S uint64
	Set  bool // :fmeta holds iL: a format 3 index was written
	// FilterBits is the far filter's size in bits as a publish last found
	// it trusted at the publisher's selectors (0: none known). A message
	// only looked up is then sent with its bit, not its selector
	// (publish.lua, which checks the size).
	FilterBits uint64
}

// shard is the index shard of hash h.
func (p fpShape) shard(h uint64) uint64 {
	if n := h & (1<<p.L - 1); n >= p.S {
		return n
	}
	return h & (1<<(p.L+1) - 1)
}

// fpShapeOf reads the shape from :fmeta's iL and iS (HMGET's two replies).
func fpShapeOf(vals []any) (fpShape, error) {
	p := fpShape{L: fpMinLevel}
	ls, _ := vals[0].(string)
	if ls == "" {
		return p, nil
	}
	ss, _ := vals[1].(string)
	l, errL := strconv.ParseUint(ls, 10, 8)
	s, errS := uint64(0), error(nil)
	if ss != "" {
		s, errS = strconv.ParseUint(ss, 10, 64)
	}
	if errL != nil || errS != nil || l < fpMinLevel || l > 40 || s >= 1<<l {
		return p, fmt.Errorf("the far index's shape in %s (iL %q, iS %q) is damaged", "fmeta", ls, ss)
	}
	return fpShape{L: l, S: s, Set: true}, nil
}

// fpArgs are what a script takes to find hash h's shard whatever S it
// finds, as long as it finds L: both shards L allows, and h mod 2^L, which
// it compares with S.
func (p fpShape) args(sh Shard, h uint64) (keyA, keyB string, low uint64) {
	low = h & (1<<p.L - 1)
	return sh.fpIndex(low), sh.fpIndex(h & (1<<(p.L+1) - 1)), low
}

// fpPerShard is how many far messages the index holds per shard before a
// writer splits one: about 48 entries of 4-byte fields and 5-byte places,
// a listpack well within Redis's default hash-max-listpack-entries (128)
// for the shards that chance fills twice as much.
const fpPerShard = 48

// fpSplitsFor is how many shard splits a publish run that may store n far
// messages in format 3 is given the keys for: enough to keep up with what
// it stores, two more to catch up after a run that found the shape moved,
// at most 64.
func fpSplitsFor(n int) int {
	if n == 0 {
		return 0
	}
	return min(n/fpPerShard+2, 64)
}

// splits are the first k splits from shape p, in order: each the shard
// split and the one its moved fields go to.
func (p fpShape) splits(k int) [][2]uint64 {
	out := make([][2]uint64, k)
	l, s := p.L, p.S
	for i := range out {
		out[i] = [2]uint64{s, s + 1<<l}
		if s++; s == 1<<l {
			l, s = l+1, 0
		}
	}
	return out
}

// fpLoc is a message's place in the index: 5 bytes, its bucket modulo
// fpLocBucketMod and its position in the bucket (as format 2 counts it,
// from the bucket's first element ever), when the position is below 2^16
// and the entry is not collided nor a business key's; 6 bytes, 3 each,
// for a business key's not collided; else 7 bytes, a flag byte
// (fpLocCollided, fpLocKey) and 3 bytes each. (The length tells a key's
// entry at no cost: a filter rebuild skips those.)
func fpLoc(b, pos int64, collided, key bool) string {
	bm := uint32(b & (fpLocBucketMod - 1))
	if !collided && !key && pos < 1<<16 {
		return string([]byte{byte(bm >> 16), byte(bm >> 8), byte(bm), byte(pos >> 8), byte(pos)})
	}
	if !collided && key {
		return string([]byte{byte(bm >> 16), byte(bm >> 8), byte(bm), byte(pos >> 16), byte(pos >> 8), byte(pos)})
	}
	flag := byte(0)
	if collided {
		flag = fpLocCollided
	}
	if key {
		flag |= fpLocKey
	}
	return string([]byte{flag, byte(bm >> 16), byte(bm >> 8), byte(bm), byte(pos >> 16), byte(pos >> 8), byte(pos)})
}

// fpKeyLoc reports whether index value loc is a business key's entry, and
// its place less any flag byte (what FarArg.KeyElsewhere takes).
func fpKeyLoc(loc string) (place string, ok bool) {
	switch {
	case len(loc) == 6:
		return loc, true
	case len(loc) == 7 && loc[0]&fpLocKey != 0:
		return loc[1:], true
	}
	return "", false
}

// errFpTombstone is fpParse's for a tombstone: no message has the
// fingerprint in the shard, the side table may.
var errFpTombstone = errors.New("a far index tombstone")

// fpParse reads a place: the bucket, taken as the one of its residue
// nearest bucket now, and the position; collided when the side table may
// hold other messages of the fingerprint.
func fpParse(loc string, now int64) (b, pos int64, collided bool, err error) {
	var bm int64
	switch len(loc) {
	case 5:
		bm = int64(loc[0])<<16 | int64(loc[1])<<8 | int64(loc[2])
		pos = int64(loc[3])<<8 | int64(loc[4])
	case 6:
		bm = int64(loc[0])<<16 | int64(loc[1])<<8 | int64(loc[2])
		pos = int64(loc[3])<<16 | int64(loc[4])<<8 | int64(loc[5])
	case 7:
		collided = loc[0]&fpLocCollided != 0
		bm = int64(loc[1])<<16 | int64(loc[2])<<8 | int64(loc[3])
		pos = int64(loc[4])<<16 | int64(loc[5])<<8 | int64(loc[6])
	case 1:
		return 0, 0, loc[0]&fpLocCollided != 0, errFpTombstone
	default:
		return 0, 0, false, fmt.Errorf("far index value %q is not a place", loc)
	}
	return fpBucket(bm, now), pos, collided, nil
}

// fpBucket is the bucket of residue bm (modulo fpLocBucketMod) nearest now.
func fpBucket(bm, now int64) int64 {
	const half = fpLocBucketMod / 2
	lo := now - half
	return lo + ((bm-lo)%fpLocBucketMod+fpLocBucketMod)%fpLocBucketMod
}

// fpIndex is the format 3 index shard n of the partition, and fpSide its
// side table (see above).
func (s Shard) fpIndex(n uint64) string { return string(s) + ":fi:" + strconv.FormatUint(n, 10) }
func (s Shard) fpSide() string          { return string(s) + ":fic" }

// fpKeySide is the partition's format 3 side table of business keys.
func (s Shard) fpKeySide() string { return string(s) + ":fkc" }

// fpShapeFields are :fmeta's fields of the index's shape.
var fpShapeFields = []string{"iL", "iS"}

// FarShapes keeps, for a Publisher, the shape of each partition's format 3
// index, and the size of its far filter, as publish.lua last told them
// (see Publish). The zero value is ready;
// a nil *FarShapes keeps nothing.
type FarShapes struct{ m sync.Map }

func (f *FarShapes) load(sh Shard) fpShape {
	if f == nil {
		return fpShape{}
	}
	p, _ := f.m.Load(sh)
	s, _ := p.(fpShape)
	return s
}

func (f *FarShapes) store(sh Shard, p fpShape) {
	if f != nil {
		f.m.Store(sh, p)
	}
}
