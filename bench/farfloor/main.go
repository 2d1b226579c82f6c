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
// It writes keys under "farfloor:" and deletes them when done (DEL, not
// UNLINK: memory freed in the background would be counted by the next
// run); used_memory is the whole server's, so run it against a Redis
// nothing else writes to.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("addr", "", "a loopback Redis nothing else writes to (required)")
	n := flag.Int("n", 5_000_000, "far messages")
	payload := flag.Int("payload", 100, "payload bytes")
	head := flag.Int("head", 6, "element head bytes (format 2: format, flags, 4-byte due offset)")
	meta := flag.Int("meta", 15, "bytes of Watermill's delay metadata in the stored body (today: 15 for a delay.For of nanoseconds, 10 of whole seconds)")
	field := flag.Int("field", 16, "far index field bytes (today: the UUID's 16; 0: no index)")
	value := flag.Int("value", 0, "far index value: 0 an integer as today (bucket × 2^24 + position), else a string of this many bytes")
	bits := flag.Int("bits", 19, "far index shards: 2^bits (today 19)")
	buckets := flag.Int("buckets", 41760, "far buckets the messages spread over (41,760: a minute each over 29 days, as the bench's ladder)")
	keyed := flag.String("keyed", "", `business keys "order-<n>": "" none, "hash" marked in one hash (today, a 18-byte mark), "shards" in 2^bits small hashes (the UUID's 16 bytes)`)
	keyCopies := flag.Int("keycopies", 2, "copies of the key in the element (today 2: the element's and the body's metadata)")
	flag.Parse()
	if err := run(*addr, *n, *payload, *head, *meta, *field, *value, *bits, *buckets, *keyed, *keyCopies); err != nil {
		fmt.Fprintln(os.Stderr, "farfloor:", err)
		os.Exit(1)
	}
}

func run(addr string, n, payloadLen, head, meta, field, value, bits, buckets int, keyed string, keyCopies int) error {
	host, _, err := net.SplitHostPort(addr)
	switch {
	case err != nil || host != "127.0.0.1" && host != "::1":
		return fmt.Errorf("-addr %q: give a loopback address and port, such as 127.0.0.1:6379", addr)
	case field < 0 || field > 16:
		return fmt.Errorf("-field %d: the index field is 0 to 16 bytes of the UUID", field)
	case value < 0 || value > 8:
		return fmt.Errorf("-value %d: 0 for an integer, or a string of 1 to 8 bytes", value)
	case bits < 1 || bits > 24:
		return fmt.Errorf("-bits %d: 1 to 24", bits)
	case buckets < 1 || n < 1:
		return fmt.Errorf("-buckets and -n must be at least 1")
	case keyed != "" && keyed != "hash" && keyed != "shards":
		return fmt.Errorf("-keyed %q: \"\" (none), \"hash\" or \"shards\"", keyed)
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	defer deleteAll(ctx, c)
	before, err := usedMemory(ctx, c)
	if err != nil {
		return err
	}
	body := make([]byte, payloadLen)
	_, _ = rand.Read(body)
	pos := make([]int64, buckets)
	const batch = 1000
	for i := 0; i < n; i += batch {
		p := c.Pipeline()
		for j := i; j < min(i+batch, n); j++ {
			var id [16]byte
			_, _ = rand.Read(id[:])
			key := "order-" + strconv.Itoa(j+1) // as the ladder's -backlog-keyed
			b := mrand.IntN(buckets)
			e := make([]byte, head, head+1+16+1+meta+2*len(key)+2+payloadLen)
			e = append(e, 3) // the codec's version, the UUID's bytes, the metadata count
			e = append(e, id[:]...)
			e = append(e, 2)
			e = append(e, make([]byte, meta)...)
			for i := 0; keyed != "" && i < keyCopies; i++ {
				e = append(e, byte(len(key)))
				e = append(e, key...)
			}
			e = append(e, body...)
			p.RPush(ctx, "farfloor:fc:"+strconv.Itoa(b), e)
			loc := int64(1_000_000+b)<<24 | pos[b]
			pos[b]++
			if field > 0 {
				var v any = -loc - 1
				if value > 0 {
					var x [8]byte
					binary.BigEndian.PutUint64(x[:], uint64(loc))
					v = string(x[8-value:])
				}
				p.HSet(ctx, "farfloor:fx:"+strconv.Itoa(shard(id[:], bits)), string(id[16-field:]), v)
			}
			switch keyed {
			case "hash":
				p.HSet(ctx, "farfloor:bkeys", key, "\x00\x01"+string(id[:]))
			case "shards":
				p.HSet(ctx, "farfloor:fk:"+strconv.Itoa(shard([]byte(key), bits)), key, string(id[:]))
			}
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
	}
	after, err := usedMemory(ctx, c)
	if err != nil {
		return err
	}
	fmt.Printf("%d far messages (payload %d, head %d, meta %d, field %d, value %d, 2^%d shards, %d buckets, keyed %q × %d): %.1f B/msg\n",
		n, payloadLen, head, meta, field, value, bits, buckets, keyed, keyCopies, float64(after-before)/float64(n))
	return nil
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
