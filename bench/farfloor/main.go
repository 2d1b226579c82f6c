// Command farfloor measures the floor of the far tier's data model: the
// Redis memory per waiting message of an idealised far tier, written with
// plain commands (no scripts, no scheduler), whose layout is the library's
// (a list per bucket of due time, a far index of small hashes from a
// message's UUID to its place, a business key's mark) with each part's
// size a flag. It answers "how small could a far message get without
// changing the data model", which the memory targets of issue 37 are
// measured against (bench/README.md, "The floor of the far tier").
//
//	go run ./farfloor -addr 127.0.0.1:6379 -n 5000000                      # today's layout, plain
//	go run ./farfloor -addr 127.0.0.1:6379 -n 5000000 -meta 3 -field 8 -value 5 -bits 16
//
// Issue 50's study adds the v3 model (bench/README.md, "A far index of
// fingerprints"): -index fp keeps a short fingerprint of the UUID (the
// first -fp bytes of its SHA-1; the index shard is picked by other bits of
// the same hash) mapped to the bucket's minute (2 bytes, the minute modulo
// 2^16; with -pos also the position, 2 more); fingerprints colliding within
// a shard go to an exact side table (farfloor:fxc, the UUID's 16 bytes to
// the same value). -index packed appends the same records (fingerprint and
// minute) to 2^bits strings instead. -keyed fp marks a business key by a
// fingerprint of the key to its minute (and position, with -pos), -filter
// the far filter's bits per message, -lookup times an exact lookup by UUID
// (fingerprint, shard, the bucket's element by LINDEX at the position or a
// scan, whole-UUID compare) in a Lua script.
//
//	go run ./farfloor -addr 127.0.0.1:6379 -n 5000000 -head 5 -meta 0 -index fp -bits 16 -lookup 10000
//
// -index lh is the same index with a shard count that follows the tier's
// size by linear hashing (bench/README.md, "Format 3's index"): -load
// fields a shard on average, shards 2^L + S, the field 4 bytes of the
// UUID's hash from bit lhBase (so a shard's fields hold the address bits
// a split reads); it reports the shards' sizes.
//
//	go run ./farfloor -addr 127.0.0.1:6379 -n 5000000 -head 5 -meta 0 -index lh -load 48 -pos
//
// The parts are written one after another (elements, index, key marks,
// filter) from the same seeded sequence of UUIDs and buckets, and the
// memory of each is reported. It writes keys under "farfloor:" and deletes
// them when done (DEL, not UNLINK: memory freed in the background would be
// counted by the next run); used_memory is the whole server's, so run it
// against a Redis nothing else writes to.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	mrand "math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

type config struct {
	n, payload, head, meta, field, value, bits, buckets int
	keyed                                               string
	keyCopies                                           int
	index                                               string
	fp                                                  int
	pos                                                 bool
	keyBits                                             int
	filter                                              int
	lookup, chunk                                       int
	load                                                int
	seed                                                uint64
}

func main() {
	var cfg config
	addr := flag.String("addr", "", "a loopback Redis nothing else writes to (required)")
	flag.IntVar(&cfg.n, "n", 5_000_000, "far messages")
	flag.IntVar(&cfg.payload, "payload", 100, "payload bytes")
	flag.IntVar(&cfg.head, "head", 6, "element head bytes (format 2: format, flags, 4-byte due offset)")
	flag.IntVar(&cfg.meta, "meta", 15, "bytes of Watermill's delay metadata in the stored body (today: 15 for a delay.For of nanoseconds, 10 of whole seconds; 0: derived from the due time)")
	flag.IntVar(&cfg.field, "field", 16, "-index uuid: far index field bytes (today: the UUID's 16; 0: no index)")
	flag.IntVar(&cfg.value, "value", 0, "-index uuid: far index value: 0 an integer as today (bucket × 2^24 + position), else a string of this many bytes")
	flag.IntVar(&cfg.bits, "bits", 19, "far index shards: 2^bits (today 19)")
	flag.IntVar(&cfg.buckets, "buckets", 41760, "far buckets the messages spread over (41,760: a minute each over 29 days, as the bench's ladder)")
	flag.StringVar(&cfg.keyed, "keyed", "", `business keys "order-<n>": "" none, "hash" marked in one hash (today, a 18-byte mark), "shards" in 2^keybits small hashes (the UUID's 16 bytes), "fp" in 2^keybits small hashes from a 4-byte fingerprint of the key to the minute, and with -pos the position (collisions in farfloor:fkc)`)
	flag.IntVar(&cfg.keyCopies, "keycopies", 2, "copies of the key in the element (today 2: the element's and the body's metadata)")
	flag.StringVar(&cfg.index, "index", "uuid", `far index: "uuid" (today's: -field bytes of the UUID to its place), "fp" (v3: a -fp-byte fingerprint to the minute, in 2^bits hashes), "lh" (the same, 4 bytes, in shards as many as -load a shard asks: linear hashing), "packed" (fingerprint and minute appended to 2^bits strings)`)
	flag.IntVar(&cfg.load, "load", 48, "-index lh: fields a shard on average")
	flag.IntVar(&cfg.fp, "fp", 4, "-index fp, packed: fingerprint bytes (1 to 8)")
	flag.BoolVar(&cfg.pos, "pos", false, "-index fp, lh, packed: store the position in the bucket too (2 bytes), so a lookup reads one element instead of the bucket")
	flag.IntVar(&cfg.keyBits, "keybits", -1, "key mark shards for -keyed shards and fp: 2^keybits (default: -bits)")
	flag.IntVar(&cfg.filter, "filter", 0, "far filter bits per message (today 24: 16 bits each, sized for 1.5 times the messages; 0: none, as before)")
	flag.IntVar(&cfg.lookup, "lookup", 0, "-index fp: time this many lookups of present and as many of absent UUIDs")
	flag.IntVar(&cfg.chunk, "chunk", 0, "-lookup without -pos: read a bucket this many elements at a time, stopping at the message (0: the whole bucket in one LRANGE)")
	flag.Uint64Var(&cfg.seed, "seed", 0, "seed of the UUIDs and buckets (0: random)")
	flag.Parse()
	if cfg.keyBits < 0 {
		cfg.keyBits = cfg.bits
	}
	if cfg.seed == 0 {
		var s [8]byte
		_, _ = rand.Read(s[:])
		cfg.seed = binary.LittleEndian.Uint64(s[:])
	}
	if err := run(*addr, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "farfloor:", err)
		os.Exit(1)
	}
}

// msgs yields the messages of cfg: their number, UUID, bucket and position
// in it, the same on every call.
func msgs(cfg config, f func(j int, id [16]byte, b int, pos int64)) {
	r := mrand.New(mrand.NewChaCha8([32]byte(binary.LittleEndian.AppendUint64(make([]byte, 24), cfg.seed))))
	pos := make([]int64, cfg.buckets)
	for j := 0; j < cfg.n; j++ {
		var id [16]byte
		binary.LittleEndian.PutUint64(id[:8], r.Uint64())
		binary.LittleEndian.PutUint64(id[8:], r.Uint64())
		b := r.IntN(cfg.buckets)
		f(j, id, b, pos[b])
		pos[b]++
	}
}

// minute is bucket b's minute modulo 2^16 (the buckets of 29 days are
// 41,760 minutes, so it names one bucket of the partition's), as stored by
// the v3 index, with the position in it if pos.
func minute(b int, p int64, pos bool) string {
	v := binary.BigEndian.AppendUint16(nil, uint16(1_000_000+b))
	if pos {
		v = binary.BigEndian.AppendUint16(v, uint16(p))
	}
	return string(v)
}

// fingerprint is the first fpLen bytes of the SHA-1 of s, and the shard
// (of 2^bits) from its bytes 8 to 11.
func fingerprint(s []byte, fpLen, bits int) (string, int) {
	h := sha1.Sum(s)
	return string(h[:fpLen]), int(binary.BigEndian.Uint32(h[8:12]) & (1<<bits - 1))
}

func run(addr string, cfg config) error {
	host, _, err := net.SplitHostPort(addr)
	switch {
	case err != nil || host != "127.0.0.1" && host != "::1":
		return fmt.Errorf("-addr %q: give a loopback address and port, such as 127.0.0.1:6379", addr)
	case cfg.field < 0 || cfg.field > 16:
		return fmt.Errorf("-field %d: the index field is 0 to 16 bytes of the UUID", cfg.field)
	case cfg.value < 0 || cfg.value > 8:
		return fmt.Errorf("-value %d: 0 for an integer, or a string of 1 to 8 bytes", cfg.value)
	case cfg.bits < 1 || cfg.bits > 24 || cfg.keyBits < 1 || cfg.keyBits > 24:
		return fmt.Errorf("-bits, -keybits: 1 to 24")
	case cfg.buckets < 1 || cfg.n < 1:
		return fmt.Errorf("-buckets and -n must be at least 1")
	case cfg.buckets > 1<<16:
		return fmt.Errorf("-buckets %d: at most 2^16 (the v3 index stores the minute modulo 2^16)", cfg.buckets)
	case cfg.keyed != "" && cfg.keyed != "hash" && cfg.keyed != "shards" && cfg.keyed != "fp":
		return fmt.Errorf("-keyed %q: \"\" (none), \"hash\", \"shards\" or \"fp\"", cfg.keyed)
	case cfg.index != "uuid" && cfg.index != "fp" && cfg.index != "lh" && cfg.index != "packed":
		return fmt.Errorf("-index %q: \"uuid\", \"fp\", \"lh\" or \"packed\"", cfg.index)
	case cfg.index == "lh" && cfg.load < 1:
		return fmt.Errorf("-load %d: at least 1 field a shard", cfg.load)
	case cfg.fp < 1 || cfg.fp > 8:
		return fmt.Errorf("-fp %d: 1 to 8 bytes", cfg.fp)
	case cfg.lookup > 0 && cfg.index != "fp":
		return fmt.Errorf("-lookup: only with -index fp")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	defer deleteAll(ctx, c)
	start, err := usedMemory(ctx, c)
	if err != nil {
		return err
	}
	mark := start
	var parts []string
	part := func(name string) error {
		m, err := usedMemory(ctx, c)
		if err != nil {
			return err
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", name, float64(m-mark)/float64(cfg.n)))
		mark = m
		return nil
	}
	body := make([]byte, cfg.payload)
	_, _ = rand.Read(body)
	maxPos := int64(0)
	lookupEvery := max(1, cfg.n/max(1, cfg.lookup))
	var present [][16]byte
	var p redis.Pipeliner
	const batch = 1000
	flush := func(j int) error {
		if p == nil {
			p = c.Pipeline()
		}
		if (j+1)%batch != 0 && j != cfg.n-1 {
			return nil
		}
		_, err := p.Exec(ctx)
		p = nil
		return err
	}

	// The elements.
	t0 := time.Now()
	msgs(cfg, func(j int, id [16]byte, b int, pos int64) {
		if err != nil {
			return
		}
		if p == nil {
			p = c.Pipeline()
		}
		key := "order-" + strconv.Itoa(j+1) // as the ladder's -backlog-keyed
		e := make([]byte, cfg.head, cfg.head+1+16+1+cfg.meta+2*len(key)+2+cfg.payload)
		e = append(e, 3) // the codec's version, the UUID's bytes, the metadata count
		e = append(e, id[:]...)
		e = append(e, 2)
		e = append(e, make([]byte, cfg.meta)...)
		for i := 0; cfg.keyed != "" && i < cfg.keyCopies; i++ {
			e = append(e, byte(len(key)))
			e = append(e, key...)
		}
		e = append(e, body...)
		p.RPush(ctx, "farfloor:fc:"+strconv.Itoa(b), e)
		maxPos = max(maxPos, pos)
		if cfg.lookup > 0 && j%lookupEvery == 0 && len(present) < cfg.lookup {
			present = append(present, id)
		}
		err = flush(j)
	})
	if err != nil {
		return err
	}
	if err := part("elements"); err != nil {
		return err
	}
	if cfg.pos && maxPos >= 1<<16 {
		return fmt.Errorf("-pos: a bucket holds %d messages, more than 2^16", maxPos+1)
	}

	// The far index.
	collisions := 0
	lh := newLinearHash(cfg.n, cfg.load)
	seen := map[[2]uint64]struct{}{}
	if cfg.index != "uuid" || cfg.field > 0 {
		msgs(cfg, func(j int, id [16]byte, b int, pos int64) {
			if err != nil {
				return
			}
			if p == nil {
				p = c.Pipeline()
			}
			switch cfg.index {
			case "uuid":
				loc := int64(1_000_000+b)<<24 | pos
				var v any = -loc - 1
				if cfg.value > 0 {
					var x [8]byte
					binary.BigEndian.PutUint64(x[:], uint64(loc))
					v = string(x[8-cfg.value:])
				}
				p.HSet(ctx, "farfloor:fx:"+strconv.Itoa(shard(id[:], cfg.bits)), string(id[16-cfg.field:]), v)
			default:
				var fp string
				var s int
				if cfg.index == "lh" {
					fp, s = lh.place(id[:])
				} else {
					fp, s = fingerprint(id[:], cfg.fp, cfg.bits)
				}
				k := [2]uint64{uint64(s), binary.BigEndian.Uint64(append(make([]byte, 8-len(fp)), fp...))}
				v := minute(b, pos, cfg.pos)
				if _, ok := seen[k]; ok {
					collisions++
					p.HSet(ctx, "farfloor:fxc", string(id[:]), v)
				} else if seen[k] = struct{}{}; cfg.index != "packed" {
					lh.sizes[s]++
					p.HSet(ctx, "farfloor:fx:"+strconv.Itoa(s), fp, v)
				} else {
					p.Append(ctx, "farfloor:fp:"+strconv.Itoa(s), fp+v)
				}
			}
			err = flush(j)
		})
		if err != nil {
			return err
		}
	}
	seen = nil
	if err := part("index"); err != nil {
		return err
	}
	if cfg.index == "packed" {
		// APPEND leaves a string room to grow (up to its length again); a
		// script that rewrites a string (GET, SET) leaves it at its size.
		for s := 0; s < 1<<cfg.bits; s++ {
			k := "farfloor:fp:" + strconv.Itoa(s)
			v, err := c.Get(ctx, k).Result()
			if err == redis.Nil {
				continue
			} else if err != nil {
				return err
			}
			if err := c.Set(ctx, k, v, 0).Err(); err != nil {
				return err
			}
		}
		if err := part("index rewritten"); err != nil {
			return err
		}
	}

	// The business keys' marks.
	keyCollisions := 0
	if cfg.keyed != "" {
		msgs(cfg, func(j int, id [16]byte, b int, pos int64) {
			if err != nil {
				return
			}
			if p == nil {
				p = c.Pipeline()
			}
			key := "order-" + strconv.Itoa(j+1)
			switch cfg.keyed {
			case "hash":
				p.HSet(ctx, "farfloor:bkeys", key, "\x00\x01"+string(id[:]))
			case "shards":
				p.HSet(ctx, "farfloor:fk:"+strconv.Itoa(shard([]byte(key), cfg.keyBits)), key, string(id[:]))
			case "fp":
				fp, s := fingerprint([]byte(key), 4, cfg.keyBits)
				k := [2]uint64{uint64(s), uint64(binary.BigEndian.Uint32([]byte(fp)))}
				if _, ok := seen[k]; ok {
					keyCollisions++
					p.HSet(ctx, "farfloor:fkc", key, minute(b, pos, cfg.pos))
				} else {
					if seen == nil {
						seen = map[[2]uint64]struct{}{}
					}
					seen[k] = struct{}{}
					p.HSet(ctx, "farfloor:fk:"+strconv.Itoa(s), fp, minute(b, pos, cfg.pos))
				}
			}
			err = flush(j)
		})
		if err != nil {
			return err
		}
		seen = nil
		if err := part("keys"); err != nil {
			return err
		}
	}

	// The far filter: one string, allocated at its size (its bits do not
	// change its memory).
	if cfg.filter > 0 {
		size := (int64(cfg.n)*int64(cfg.filter) + 7) / 8
		if err := c.SetRange(ctx, "farfloor:ff", size-1, "\x00").Err(); err != nil {
			return err
		}
		if err := part("filter"); err != nil {
			return err
		}
	}
	fill := time.Since(t0)

	idx := cfg.index
	switch cfg.index {
	case "uuid":
		idx = fmt.Sprintf("uuid field %d value %d", cfg.field, cfg.value)
	case "fp", "packed":
		idx = fmt.Sprintf("%s %d-byte fp, pos %v", cfg.index, cfg.fp, cfg.pos)
	case "lh":
		idx = fmt.Sprintf("lh 4-byte fp, pos %v, %s", cfg.pos, lh)
	}
	fmt.Printf("%d far messages (payload %d, head %d, meta %d, index %s, 2^%d shards, %d buckets (%.0f a bucket), keyed %q × %d (2^%d shards), filter %d): %.1f B/msg [%s]; index collisions %d, key collisions %d; filled in %s\n",
		cfg.n, cfg.payload, cfg.head, cfg.meta, idx, cfg.bits, cfg.buckets, float64(cfg.n)/float64(cfg.buckets), cfg.keyed, cfg.keyCopies, cfg.keyBits, cfg.filter,
		float64(mark-start)/float64(cfg.n), strings.Join(parts, ", "), collisions, keyCollisions, fill.Round(time.Second))
	if cfg.lookup > 0 {
		return lookups(ctx, c, cfg, present)
	}
	return nil
}

// lookupScript finds a far message by its UUID (ARGV[1], 16 bytes) in the
// v3 layout: the fingerprint and shard from its SHA-1, the minute (and
// position) in the shard, then the bucket's element(s), whose UUID it
// compares; on a miss, the side table of colliding fingerprints. ARGV: the
// UUID, -fp, -bits, -head, -pos (1 or 0), the minute of bucket 0 modulo
// 2^16, -chunk (the elements a bucket is read by, 0: all at once). Returns found (1 or 0), the elements read, and the microseconds
// the script took by TIME.
const lookupScript = `
local t = redis.call('TIME')
local id, fpn, bits, head, pos, base, chunk = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] == '1', tonumber(ARGV[6]), tonumber(ARGV[7])
local h = redis.sha1hex(id)
local fp = string.gsub(string.sub(h, 1, 2 * fpn), '..', function(x) return string.char(tonumber(x, 16)) end)
local shard = tonumber(string.sub(h, 17, 24), 16) % (2 ^ bits)
local read = 0
local function look(v)
  if not v then
    return false
  end
  local m = struct.unpack('>I2', v)
  local key = 'farfloor:fc:' .. ((m - base) % 65536)
  if pos then
    local e = redis.call('LINDEX', key, (struct.unpack('>I2', string.sub(v, 3, 4))))
    read = read + 1
    return e and string.sub(e, head + 2, head + 17) == id
  end
  local from = 0
  while true do
    local es = redis.call('LRANGE', key, from, chunk > 0 and from + chunk - 1 or -1)
    for i = 1, #es do
      read = read + 1
      if string.sub(es[i], head + 2, head + 17) == id then
        return true
      end
    end
    if chunk == 0 or #es < chunk then
      return false
    end
    from = from + chunk
  end
end
local found = 0
local v = redis.call('HGET', 'farfloor:fx:' .. string.format('%d', shard), fp)
if v then
  if look(v) or look(redis.call('HGET', 'farfloor:fxc', id)) then
    found = 1
  end
end
local u = redis.call('TIME')
return {found, read, (u[1] - t[1]) * 1000000 + (u[2] - t[2])}
`

func lookups(ctx context.Context, c *redis.Client, cfg config, present [][16]byte) error {
	s := redis.NewScript(lookupScript)
	base := strconv.Itoa(1_000_000 % (1 << 16)) // the minute of bucket 0, as minute stores it
	// With -pos, the index's values begin with the minute, so a scan of
	// the bucket is timed too, on the same data.
	type mode struct {
		name       string
		pos, chunk int
	}
	modes := []mode{{"scan", 0, 0}}
	if cfg.chunk > 0 {
		modes = append(modes, mode{fmt.Sprintf("scan by %d", cfg.chunk), 0, cfg.chunk})
	}
	if cfg.pos {
		modes = append([]mode{{"LINDEX", 1, 0}}, modes...)
	}
	for _, m := range modes {
		for _, kind := range []string{"present", "absent"} {
			var server, client []time.Duration
			reads, found := 0, 0
			for i := 0; i < cfg.lookup; i++ {
				var id [16]byte
				if kind == "present" {
					id = present[i%len(present)]
				} else {
					_, _ = rand.Read(id[:])
				}
				t := time.Now()
				r, err := s.Run(ctx, c, nil, string(id[:]), cfg.fp, cfg.bits, cfg.head, m.pos, base, m.chunk).Int64Slice()
				if err != nil {
					return err
				}
				client = append(client, time.Since(t))
				found += int(r[0])
				reads += int(r[1])
				server = append(server, time.Duration(r[2])*time.Microsecond)
			}
			fmt.Printf("lookup (%s) of %d %s UUIDs: found %d, %.1f elements read each; in the script p50 %s p99 %s max %s; round trip p50 %s p99 %s max %s\n",
				m.name, cfg.lookup, kind, found, float64(reads)/float64(cfg.lookup),
				pct(server, 50), pct(server, 99), pct(server, 100), pct(client, 50), pct(client, 99), pct(client, 100))
		}
	}
	return nil
}

func pct(d []time.Duration, p int) time.Duration {
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*p/100)].Round(time.Microsecond)
}

func shard(b []byte, bits int) int { return int(crc32.ChecksumIEEE(b) & (1<<bits - 1)) }

func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO memory has no used_memory")
}

func deleteAll(ctx context.Context, c *redis.Client) {
	it := c.Scan(ctx, 0, "farfloor:*", 10000).Iterator()
	var keys []string
	for it.Next(ctx) {
		if keys = append(keys, it.Val()); len(keys) == 1000 {
			c.Del(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}

// lhBase is the first bit of a UUID's hash that the lh index stores as its
// field: a shard's address is the hash's low L bits (L >= lhBase), so the
// fields of one shard share their lowest L - lhBase bits, which are those
// a split of the shard reads.
const lhBase = 11

// linearHash is the lh index's shape for n messages at load fields a
// shard: 2^l + s shards (s the split pointer), and the fields each shard
// got.
type linearHash struct {
	l, s  int
	sizes map[int]int
}

func newLinearHash(n, load int) *linearHash {
	shards := max(1, n/load)
	l := lhBase
	for 1<<(l+1) <= shards {
		l++
	}
	return &linearHash{l: l, s: max(0, shards-1<<l), sizes: map[int]int{}}
}

// place is the field and shard of a UUID: h, the first 8 bytes of its
// SHA-1, names shard h mod 2^l, or h mod 2^(l+1) when that is below s
// (already split).
func (lh *linearHash) place(id []byte) (field string, shard int) {
	sum := sha1.Sum(id)
	h := binary.BigEndian.Uint64(sum[:8])
	a := h & (1<<lh.l - 1)
	if int(a) < lh.s {
		a = h & (1<<(lh.l+1) - 1)
	}
	return string(binary.BigEndian.AppendUint32(nil, uint32(h>>lhBase))), int(a)
}

// String tells the shape and the shards' sizes: the largest, and how many
// hold more than 128 fields (Redis's hash-max-listpack-entries: such a
// hash is a hash table for good, about three times the bytes).
func (lh *linearHash) String() string {
	largest, over := 0, 0
	for _, c := range lh.sizes {
		largest = max(largest, c)
		if c > 128 {
			over++
		}
	}
	return fmt.Sprintf("2^%d + %d shards (%d used), largest %d fields, %d over 128", lh.l, lh.s, len(lh.sizes), largest, over)
}
