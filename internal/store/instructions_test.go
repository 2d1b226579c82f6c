package store

import (
	"context"
	"fmt"
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
//	keyed      the same, each with a business key of its own (publish.lua)
//	tick       1,000 ticks of one consumer group's partition, each moving
//	           two messages published 1 ms ahead (and the two publishes)
//	tickidle   the same, each followed by two ticks that find nothing due
//	reclaim    1,000 sweeps of a consumer group holding 10 messages, none
//	           out of its visibility timeout (the common sweep)
//	far2       1,000 far messages of format 2 published into one bucket
//	far3       the same in format 3 (FarArg.Format3)
//	unpack2    far2, then the bucket unpacked (unpack.lua, 1,000 a call)
//	unpack3    far3, then the same
//	pull2      far2, then 100 of its messages pulled by UUID (FarPull)
//	pull3      far3, then the same
//	look2      far2, then 1,000 new messages due in 15 s published 100 a
//	           call, each looked up in the far tier
//	look3      far3, then the same
//	cold3      far3, then the filter past its size (as a fill by
//	           publishers alone leaves it, until a scheduler rebuilds it),
//	           then look's publishes: each looked up in the index
//	near       far3, then look3's publishes into another partition, one
//	           without a far tier (bench/callgrind.sh subtracts far3 from
//	           both: the scripts are loaded before either is counted)
//	fill2      1,000 far messages of format 2 published 500 a call over 30
//	           days of buckets, as a publisher fills a far tier (the first
//	           2,048 with a far filter, the rest without: past its size,
//	           until a scheduler rebuilds it, each is looked up)
//	fill3      the same in format 3
//
// With REDISDELAY_INSTRUCTIONS_KEYED=1 every message of the far workloads
// (far, unpack, pull, look, fill) has a business key of its own, and 600
// more keys are held in the waiting set.
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
	publish := func(delay int64, key string) {
		t.Helper()
		uuid := watermill.NewUUID()
		m := PubMessage{UUID: uuid, Delay: delay, Body: Encode(message.NewMessage(uuid, make([]byte, 16))), Key: key, Far: FarArg{Bucket: -1}}
		if _, err := Publish(ctx, c, sh, PublishOpts{}, []*fairCall{{PubArgs{Msgs: []PubMessage{m}}}}); err != nil {
			t.Fatal(err)
		}
	}
	const n = instructionsN
	if os.Getenv("REDISDELAY_INSTRUCTIONS_KEYED") == "1" {
		// Keys held in the waiting set beside the far tier's, past
		// hash-max-listpack-entries (512 here): :bkeys is a hashtable
		// whatever the format keeps in it, as in a keyed backlog of any
		// size, so its encoding does not weigh in the comparison.
		held := make([]any, 0, 2*600)
		for i := range 600 {
			held = append(held, fmt.Sprintf("held-%d", i), watermill.NewUUID())
		}
		if err := c.HSet(ctx, sh.Bkeys(), held...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	switch work {
	case "none":
	case "append", "delayed", "keyed":
		d := int64(0)
		if work != "append" {
			d = time.Hour.Milliseconds()
		}
		for i := range n {
			key := ""
			if work == "keyed" {
				key = fmt.Sprint("r", "order-", i) // policy r: reject a second message with the key
			}
			publish(d, key)
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
			publish(1, "")
			publish(1, "")
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
	case "reclaim":
		if _, err := InitGroup(ctx, c, sh, "g", GroupPolicy{Visibility: time.Hour}); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			publish(0, "")
		}
		if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{sh.Stream(), ">"}, Count: 10}).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // held a few ms: not awaited with commands, as above
		for range n {
			r, err := Reclaim(ctx, c, sh, "g", 100, false, ReclaimStart)
			if err != nil {
				t.Fatal(err)
			}
			if r.Requeued != 0 || r.Oldest == 0 {
				t.Fatalf("a sweep requeued %d and left pending entries idle %d ms at most, want 0 and more", r.Requeued, r.Oldest)
			}
		}
	case "near":
		// look's publishes into a partition without a far tier, after far3's
		// fill of another: what far3 leaves is subtracted from look3 and
		// near alike, the loading of the scripts with it
		_, _, shapes := fillFar(t, c, sh, "3")
		nearCalls(t, c, Keys{Prefix: "instructions"}.Shard("near", 0), true, shapes)
	case "fill2", "fill3":
		// 2,500 first (the filter's 2,048 and more), then the 1,000 counted
		// (bench/callgrind.sh subtracts a run of the first 2,500 alone)
		var shapes FarShapes
		total := 2500
		if os.Getenv("REDISDELAY_INSTRUCTIONS_FIRST") == "" {
			total += n
		}
		for sent := 0; sent < total; sent += 500 {
			msgs := make([]PubMessage, 500)
			for i := range msgs {
				id := watermill.NewUUID()
				in := 24*time.Hour + time.Duration(sent+i)*30*24*time.Hour/3500
				f := FarArgOf(id, in, true)
				f.Format3 = work == "fill3"
				f.Place(time.Now().UnixMilli())
				msgs[i] = keyedMsg(PubMessage{UUID: id, Delay: in.Milliseconds(), Far: f}, make([]byte, 100))
			}
			if _, err := Publish(ctx, c, sh, PublishOpts{Shapes: &shapes}, []*fairCall{{PubArgs{Msgs: msgs}}}); err != nil {
				t.Fatal(err)
			}
		}
	case "far2", "far3", "unpack2", "unpack3", "pull2", "pull3", "look2", "look3", "cold3":
		format := work[len(work)-1:]
		ids, b, shapes := fillFar(t, c, sh, format)
		switch work[:len(work)-1] {
		case "look":
			// each looked up in the far tier (its filter's bits, its
			// index on a 1)
			nearCalls(t, c, sh, format == "3", shapes)
		case "cold":
			if err := c.HSet(ctx, sh.FarMeta(), "fi", 1<<30).Err(); err != nil {
				t.Fatal(err)
			}
			nearCalls(t, c, sh, true, shapes)
		case "unpack":
			instructionsUnpack(t, c, sh, b)
		case "pull":
			for _, id := range ids[:100] {
				if _, _, found, err := FarPull(ctx, c, sh, id, false); err != nil || !found {
					t.Fatalf("pull %s: found %v, %v", id, found, err)
				}
			}
		}
	default:
		t.Fatalf("REDISDELAY_INSTRUCTIONS=%q: no such workload", work)
	}
}

// instructionsN is how many messages a workload counts:
// bench/callgrind.sh divides by it.
const instructionsN = 1000

// fillFar publishes instructionsN far messages of format ("2" or "3") to sh, one a
// call, all in one bucket, b. It returns their UUIDs and the index shapes
// the calls left, as a Publisher keeps them.
func fillFar(t *testing.T, c *redis.Client, sh Shard, format string) (ids []string, b int64, shapes *FarShapes) {
	due := time.Now().Add(10 * time.Minute) // one bucket
	b, _, _, _ = farPlace(time.Now().UnixMilli(), due.UnixMilli())
	shapes = &FarShapes{}
	for range instructionsN {
		id := watermill.NewUUID()
		ids = append(ids, id)
		in := time.Until(due)
		f := FarArgOf(id, in, true)
		f.Format3 = format == "3"
		f.Place(time.Now().UnixMilli())
		m := keyedMsg(PubMessage{UUID: id, Delay: in.Milliseconds(), Far: f}, make([]byte, 100))
		if _, err := Publish(context.Background(), c, sh, PublishOpts{Shapes: shapes}, []*fairCall{{PubArgs{Msgs: []PubMessage{m}}}}); err != nil {
			t.Fatal(err)
		}
	}
	return ids, b, shapes
}

// keyedMsg is m with its body, a message of payload, given a business key
// of its own (in its metadata and its key argument, replace policy) when
// REDISDELAY_INSTRUCTIONS_KEYED is 1.
// nearCalls publishes 1,000 new messages due in 15 s to sh, 100 a call,
// by a writer of format 3 (format3) or 2.
func nearCalls(t *testing.T, c *redis.Client, sh Shard, format3 bool, shapes *FarShapes) {
	for range 10 {
		msgs := make([]PubMessage, 100)
		for i := range msgs {
			id := watermill.NewUUID()
			f := FarArgOf(id, 15*time.Second, true)
			f.Format3 = format3
			msgs[i] = keyedMsg(PubMessage{UUID: id, Delay: 15_000, Far: f}, make([]byte, 100))
		}
		if _, err := Publish(context.Background(), c, sh, PublishOpts{Shapes: shapes}, []*fairCall{{PubArgs{Msgs: msgs}}}); err != nil {
			t.Fatal(err)
		}
	}
}

func keyedMsg(m PubMessage, payload []byte) PubMessage {
	msg := message.NewMessage(m.UUID, payload)
	if os.Getenv("REDISDELAY_INSTRUCTIONS_KEYED") == "1" {
		key := "order-" + m.UUID[:13]
		msg.Metadata.Set("_redisdelay_business_key", key)
		m.Key = "x" + key
	}
	m.Body = Encode(msg)
	return m
}

// instructionsUnpack unpacks far bucket b of sh at once, as its scheduler
// does once its time has come.
func instructionsUnpack(t *testing.T, c *redis.Client, sh Shard, b int64) {
	ctx := context.Background()
	if err := c.ZAddXX(ctx, sh.FarZ(), redis.Z{Score: 0, Member: b}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, sh.Lease(), "me", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	var moved int64
	for more := true; more; {
		head, err := FarHead(ctx, c, sh, 2, b, FarUnpackBatch)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Unpack(ctx, c, sh, "me", 2, b, head)
		if err != nil || r.Stale {
			t.Fatalf("unpack: %+v, %v", r, err)
		}
		moved, more = moved+r.Moved, r.More
	}
	if moved != 1000 {
		t.Fatalf("unpacked %d far messages, want 1000", moved)
	}
}
