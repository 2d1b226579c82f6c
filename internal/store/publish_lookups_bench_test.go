package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// A Publish call of 500 keyed messages (100-byte payloads, due in an hour)
// into a partition holding 400 keyed messages: its :bkeys hash is a
// listpack (up to hash-max-listpack-entries, 512), or a hashtable (a long
// dummy value made it one). "new": 500 keys not held (reject policy);
// "replace": 400 of the held keys (replace policy) and 100 new ones.
// Reported: the server's CPU time of the publish.lua call per message
// (redistest.ScriptCPU), the partition built again for each call (not
// timed).
//
//	go test -run '^$' -bench BenchmarkPublish_KeyedBeside400Keys -benchtime 20x ./internal/store/
func BenchmarkPublish_KeyedBeside400Keys(b *testing.B) {
	srv := redistest.ForTest(b, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	rec := redistest.NewScriptCPU(c)
	b.Cleanup(func() { _ = rec.Close() })
	mk := func(key string) PubMessage {
		uuid := watermill.NewUUID()
		m := message.NewMessage(uuid, []byte(strings.Repeat("p", 100)))
		m.Metadata.Set(namedKeys[0], key[1:]) // the business key
		return PubMessage{UUID: uuid, Delay: time.Hour.Milliseconds(), Body: Encode(m), Key: key, Far: FarArg{Bucket: -1}}
	}
	for _, scenario := range []string{"new", "replace"} {
		for _, enc := range []string{"listpack", "hashtable"} {
			b.Run(scenario+"/"+enc, func(b *testing.B) {
				var cpu time.Duration
				for n := range b.N {
					b.StopTimer()
					rec.Record(false)
					sh := Keys{Prefix: "bench"}.Shard(fmt.Sprint("t", n), 0)
					held := &fairCall{}
					for i := range 400 {
						held.Msgs = append(held.Msgs, mk(fmt.Sprint("rk", i)))
					}
					if _, err := Publish(ctx, c, sh, PublishOpts{}, []*fairCall{held}); err != nil {
						b.Fatal(err)
					}
					if enc == "hashtable" {
						if err := c.HSet(ctx, sh.Bkeys(), "dummy", strings.Repeat("x", 100)).Err(); err != nil {
							b.Fatal(err)
						}
					}
					if got := c.ObjectEncoding(ctx, sh.Bkeys()).Val(); got != enc {
						b.Fatalf(":bkeys is a %s, want a %s", got, enc)
					}
					call := &fairCall{}
					for i := range 500 {
						key := fmt.Sprint("rn", i)
						if scenario == "replace" {
							key = fmt.Sprint("xn", i)
							if i < 400 {
								key = fmt.Sprint("xk", i)
							}
						}
						call.Msgs = append(call.Msgs, mk(key))
					}
					rec.Take()
					rec.Record(true)
					b.StartTimer()
					r, err := Publish(ctx, c, sh, PublishOpts{}, []*fairCall{call})
					b.StopTimer()
					rec.Record(false)
					if err != nil {
						b.Fatal(err)
					}
					if dup, refusal, _, _ := r.Status(0); dup != "" || refusal != nil {
						b.Fatalf("refused: %q %+v", dup, refusal)
					}
					calls := rec.Take()
					if len(calls) != 1 {
						b.Fatalf("%d script calls measured, want 1", len(calls))
					}
					cpu += calls[0].CPU
					if err := c.FlushAll(ctx).Err(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*500), "script-µs/msg")
			})
		}
	}
}
