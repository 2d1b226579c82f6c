package store

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// TestInstructions_Workload is not a check: it runs one fixed workload of
// script calls against the redis-server at REDISDELAY_INSTRUCTIONS_ADDR,
// for bench/callgrind.sh, which runs that server under callgrind and
// counts its instructions per call. Instruction counts are the same on a
// busy machine as on a quiet one, where Redis's CPU time moves by more
// than a script change saves. REDISDELAY_INSTRUCTIONS names the workload:
//
//	none       nothing (the server's own start and stop)
//	append     1,000 messages published one at a time, due now
//	delayed    1,000 messages published one at a time, due in an hour
//	tick       1,000 ticks of one consumer group's partition, each moving
//	           two messages published 1 ms ahead (and the two publishes)
//	tickidle   the same, each followed by two ticks that find nothing due
func TestInstructions_Workload(t *testing.T) {
	addr, work := os.Getenv("REDISDELAY_INSTRUCTIONS_ADDR"), os.Getenv("REDISDELAY_INSTRUCTIONS")
	if addr == "" || work == "" {
		t.Skip("run by bench/callgrind.sh")
	}
	// callgrind slows the server fifty-fold: a generous read timeout
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Minute})
	defer c.Close()
	ctx := context.Background()
	sh := Keys{Prefix: "instructions"}.Shard("t", 0)
	publish := func(delay int64) {
		t.Helper()
		uuid := watermill.NewUUID()
		m := PubMessage{UUID: uuid, Delay: delay, Body: Encode(message.NewMessage(uuid, make([]byte, 16))), Far: FarArg{Bucket: -1}}
		if _, err := Publish(ctx, c, sh, PublishOpts{}, []*fairCall{{PubArgs{Msgs: []PubMessage{m}}}}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 1000 // bench/callgrind.sh divides by it
	switch work {
	case "none":
	case "append", "delayed":
		d := int64(0)
		if work == "delayed" {
			d = time.Hour.Milliseconds()
		}
		for range n {
			publish(d)
		}
	case "tick", "tickidle":
		if err := c.XGroupCreateMkStream(ctx, sh.Stream(), "g", "0").Err(); err != nil {
			t.Fatal(err)
		}
		idle := 0
		if work == "tickidle" {
			idle = 2
		}
		args := PromoteArgs{Groups: []string{"g"}, Batch: 256, Owner: "me", Lease: 30 * time.Second, MayTake: true}
		for range n {
			publish(1)
			publish(1)
			// Both are due: Redis's clock is this machine's, and a message
			// 1 ms ahead is due by 2 ms after its publish returned. Not
			// awaited with commands, which the count would include.
			time.Sleep(3 * time.Millisecond)
			r, err := Promote(ctx, c, sh, args)
			if err != nil {
				t.Fatal(err)
			}
			if r.Moved != 2 {
				t.Fatalf("a tick moved %d messages, want 2", r.Moved)
			}
			for range idle {
				if _, err := Promote(ctx, c, sh, args); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.XTrimMaxLen(ctx, sh.Stream(), 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	default:
		t.Fatalf("REDISDELAY_INSTRUCTIONS=%q: no such workload", work)
	}
}
