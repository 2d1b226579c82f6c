package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The far filter answers "is this UUID in the far tier?" for a publish of
// a message due within the near tier, without reading the far index: that
// read is a random access into millions of small hashes, about 1.6 µs more
// per message into a backlog of 5M than into an empty topic, which made
// publishing into a big backlog 0.7× as fast as into a fresh one. The
// filter is a bitmap in one string per partition (<shard>:ff), a Bloom
// filter of one bit per message: a far message sets the bit its UUID
// hashes to, and one BITFIELD reads the bits of a whole publish call (and
// sets those of its messages that may go to the far tier). A 0 is always
// right, so the lookup is skipped; a 1 (for about 6% of the messages that
// are not there, at the filter's capacity) reads the index as before. So a
// UUID reused across the tiers is refused exactly as without the filter. One bit rather than several in a word: setting
// several costs a read and a write of the word per message, and Redis
// charges more for a script's command arguments (about 0.15 µs each) than
// the fewer false 1s save.
//
// Bits are never cleared, so the filter only grows fuller: fmeta's fi
// counts the messages added since it was made, fb its size in blocks of
// 512 bits, and it is trusted only while
//   - fi is within its capacity (farFilterPerBlock a block: 16 bits a
//     message);
//   - fmeta's fm equals n: fm is n as this version's scripts count it, so a
//     far message added or removed by a process of an older version, which
//     knows nothing of the filter (whatever format it writes), makes them
//     differ. (A far tier written before the filter existed has no fm: the
//     first rebuild reads it from the index, both formats, and sets fm.)
//
// With no far message at all (n = 0) nothing is looked up. publish.lua
// makes a filter of farFilterMinBlocks when it adds to an empty far tier
// (nothing is there to miss), and the scripts that take the last far
// message out drop it. When one is not trusted, trim.lua tells the
// partition's scheduler, which rebuilds it from the far index
// (RebuildFarFilter), sized for 1.5 times the far messages; until then,
// publishes read the index as before. (Format 2's index only where one
// EXISTS finds a shard of it among a run's: a far tier of format 3 alone,
// as publishers fill it before any scheduler ran, costs one index read a
// message, format 3's.)
//
// A message's bit is its selector modulo the filter's bits, one bit
// whatever the format it is stored in, so a lookup reads one bit and, on a
// 1, the index of each format. The selectors have two modes, as fmeta's fs
// records for the filter (absent or 3) and fq for the one being rebuilt:
//   - farSel's (2): the far index field's 64-bit FNV-1a hash modulo 2^32,
//     as releases up to 0.2.0 set and read them, and so what a process
//     that may run beside one of them (writing level 2) uses;
//   - fpSel's (3): the 32 bits of the index hash that format 3's index
//     keeps as a message's fingerprint (far3.go), which a rebuild reads
//     back from that index (it cannot read a far field there) and
//     computes from format 2's fields; a process writing format 3 uses
//     them (WritesFar3).
//
// A filter is trusted only by a caller of its mode, and a caller adding
// far messages to a partition whose filter (or the one being rebuilt) is
// of the other mode moves n and not fm, as an older release does: the
// filter is not trusted until a rebuild of the scheduler's mode, which
// trim.lua also asks for when the filter's mode is not the scheduler's
// (the storage level moved on).
const (
	farFilterPerBlock  = 32      // messages a block of 512 bits takes (16 bits each: ~6% false 1s)
	farFilterMinBlocks = 64      // 4 KB: the filter of a small far tier
	farFilterMaxBlocks = 1 << 22 // 256 MB: 134M messages
	farFilterChunk     = 1 << 18 // bytes merged per call while rebuilding
	farFilterShardsPer = 2048    // index shards read per round trip while rebuilding
)

// FarFilterStale is when a rebuild that has not finished is taken for
// abandoned (its process died) and started again (a variable for the
// tests).
var FarFilterStale = 10 * time.Minute

// filterMode is publish.lua's and ffbegin.lua's name of the selectors'
// mode: fpSel's (fp) or farSel's.
func filterMode(fp bool) string {
	if fp {
		return "3"
	}
	return "2"
}

// farSel is where the message of a far index field is in the far filter
// at farSel's selectors: its bit is farSel mod the filter's bits.
func farSel(field string) uint32 {
	h := uint64(14695981039346656037) // FNV-1a, 64 bits (hash/fnv's, without its allocations)
	for i := 0; i < len(field); i++ {
		h = (h ^ uint64(field[i])) * 1099511628211
	}
	return uint32(h)
}

// FarFilterBuild is a rebuild of a partition's far filter in progress.
type FarFilterBuild struct {
	sh     Shard
	token  string
	fp     bool // at fpSel's selectors (see above)
	blocks int64
	bits   []byte
	added  int64
}

// BeginFarFilter starts a rebuild of the far filter of a partition
// (ffbegin.lua): from now on publish.lua also sets the bits of new far
// messages in <shard>:ffn, which the rebuild fills with the messages in
// the far index, at the selectors of a process writing storage level lvl
// (WritesFar3: fpSel's). It returns nil when the far tier is empty (the filter
// is then emptied instead: none is needed).
func BeginFarFilter(ctx context.Context, c redis.Scripter, sh Shard, token string, lvl int) (*FarFilterBuild, error) {
	fp := WritesFar3(lvl)
	res, err := ffBeginScript.Run(ctx, c, []string{sh.FarMeta(), sh.farFilterNext(), sh.farFilter()}, token,
		farFilterPerBlock, farFilterMinBlocks, farFilterMaxBlocks, filterMode(fp)).Int64()
	if err != nil || res == 0 {
		return nil, err
	}
	return &FarFilterBuild{sh: sh, token: token, fp: fp, blocks: res, bits: make([]byte, res*64)}, nil
}

// Scan reads the whole far index, both formats' (format 2's only at
// farSel's selectors: format 3's index keeps no far field to hash, so
// publish.lua reads it for every lookup then), and sets the bits of every
// message in it.
func (b *FarFilterBuild) Scan(ctx context.Context, c Cmds) error {
	sel := farSel
	if b.fp {
		sel = func(field string) uint32 { return fpSel(fpHash(field)) }
	}
	if err := b.scan(ctx, c, 0, farIndexShards, b.sh.farIndex, sel); err != nil || !b.fp {
		return err
	}
	// Format 3's shards, as many as its shape says: a split moves entries
	// from a shard to one 2^L above it, which is read later, so reading
	// in order misses none; shards made meanwhile are read after.
	fpKey := func(n uint32) string { return b.sh.fpIndex(uint64(n)) }
	fieldSel := func(f string) uint32 {
		if len(f) != 4 {
			return 0 // not a fingerprint (damaged): a false 1 at most
		}
		return binary.BigEndian.Uint32([]byte(f))
	}
	// (HGETALL, not HKEYS: a business key's entry, told by its value, has
	// no bit: key lookups do not read the filter, which stays sized for
	// the messages alone)
	read := uint64(0)
	for {
		vals, err := c.HMGet(ctx, b.sh.FarMeta(), fpShapeFields...).Result()
		if err != nil {
			return fmt.Errorf("read the far index's shape: %w", err)
		}
		shape, err := fpShapeOf(vals)
		if err != nil || !shape.Set {
			return err
		}
		shards := uint64(1)<<shape.L + shape.S
		if read >= shards {
			return nil
		}
		if err := b.scan3(ctx, c, uint32(read), uint32(shards), fpKey, fieldSel); err != nil {
			return err
		}
		read = shards
	}
}

// scan sets the bits of the fields of index shards from to to-1 (keys
// named by key), each at its selector sel.
func (b *FarFilterBuild) scan(ctx context.Context, c Cmds, from, to uint32, key func(uint32) string, sel func(string) uint32) error {
	for first := from; first < to; first += farFilterShardsPer {
		pipe := c.Pipeline()
		cmds := make([]*redis.StringSliceCmd, min(farFilterShardsPer, to-first))
		for i := range cmds {
			cmds[i] = pipe.HKeys(ctx, key(first+uint32(i)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("read the far index: %w", err)
		}
		for _, cmd := range cmds {
			for _, f := range cmd.Val() {
				b.add(sel(f))
			}
		}
	}
	return nil
}

// scan3 is scan for format 3's shards: the fields of UUIDs' entries (and
// tombstones': a false 1 at most), not of business keys'.
func (b *FarFilterBuild) scan3(ctx context.Context, c Cmds, from, to uint32, key func(uint32) string, sel func(string) uint32) error {
	for first := from; first < to; first += farFilterShardsPer {
		pipe := c.Pipeline()
		cmds := make([]*redis.MapStringStringCmd, min(farFilterShardsPer, to-first))
		for i := range cmds {
			cmds[i] = pipe.HGetAll(ctx, key(first+uint32(i)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("read the far index: %w", err)
		}
		for _, cmd := range cmds {
			for f, v := range cmd.Val() {
				if _, isKey := fpKeyLoc(v); !isKey {
					b.add(sel(f))
				}
			}
		}
	}
	return nil
}

func (b *FarFilterBuild) add(sel uint32) {
	bit := int64(sel) % (b.blocks * 512)
	b.bits[bit/8] |= 0x80 >> (bit % 8) // BITFIELD's order: the first bit is the byte's highest
	b.added++
}

// errFilterMoved is a merge that lost a race with a publish setting bits in
// the same chunk, more than a few times in a row.
var errFilterMoved = errors.New("the far filter kept changing while it was rebuilt")

// Finish merges the bits into <shard>:ffn, chunk by chunk (ffmerge.lua: the
// bits publishes set meanwhile are kept), then makes it the partition's
// filter (ffswap.lua). It reports false when another rebuild took over.
func (b *FarFilterBuild) Finish(ctx context.Context, c Cmds) (bool, error) {
	next := b.sh.farFilterNext()
	for off := 0; off < len(b.bits); off += farFilterChunk {
		mine := b.bits[off:min(off+farFilterChunk, len(b.bits))]
		if allZero(mine) {
			continue
		}
		merged := false
		for range 5 {
			pipe := c.Pipeline()
			get := pipe.GetRange(ctx, next, int64(off), int64(off+len(mine)-1))
			if _, err := pipe.Exec(ctx); err != nil {
				return false, err
			}
			cur := get.Val()
			or := make([]byte, len(mine))
			copy(or, cur)
			for i := range or {
				or[i] |= mine[i]
			}
			r, err := ffMergeScript.Run(ctx, c, []string{b.sh.FarMeta(), next}, b.token, off, cur, or).Int64()
			if err != nil {
				return false, err
			}
			if r == -1 {
				return false, nil // another rebuild took over
			}
			if merged = r == 1; merged {
				break
			}
		}
		if !merged {
			return false, errFilterMoved
		}
	}
	r, err := ffSwapScript.Run(ctx, c, []string{b.sh.FarMeta(), next, b.sh.farFilter()}, b.token, b.blocks, b.added).Int64()
	return r == 1, err
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// RebuildFarFilter rebuilds the far filter of a partition (see above): what
// a scheduler does when trim.lua says so (a filter full, missing, not
// trusted or far too big; or one left on an empty far tier, dropped). The
// caller holds the new filter in memory meanwhile: 2 to 3 bytes per far
// message of the partition.
func RebuildFarFilter(ctx context.Context, c Cmds, sh Shard, token string, lvl int) error {
	b, err := BeginFarFilter(ctx, c, sh, token, lvl)
	if err != nil || b == nil {
		return err
	}
	if err := b.Scan(ctx, c); err != nil {
		return err
	}
	_, err = b.Finish(ctx, c)
	return err
}
