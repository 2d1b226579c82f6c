package redisdelay

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// SetClock replaces a Publisher's host clock, so tests can run it on a host
// whose clock is off. (Managers and subscribers read no wall clock: due
// times are compared by Redis's clock only.)
func SetClock(p *Publisher, now func() time.Time) {
	p.now = now
}

// WriteLevelAtMost makes p write storage level lvl at most, as while a
// process that reads no newer level lives: for the tests of an older
// level's storage. Call it before the first Publish.
func WriteLevelAtMost(p *Publisher, lvl int) {
	p.maxLevel = lvl
}

// HoldAcks makes the acker goroutines of sub's subscriptions wait before
// each flush until the returned function is called, so acknowledgements
// stay queued (flushes before hand-backs, history reads and the final
// release still run). Call it before Subscribe.
func HoldAcks(sub *Subscriber) (release func()) {
	gate := make(chan struct{})
	sub.consume.AckGate = func(ctx context.Context) {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

// UnheldReports is how many lease renewals of sub's subscriptions found
// entries pending for the consumer that it did not hold.
func UnheldReports(sub *Subscriber) int64 {
	return sub.consume.Unheld.Load()
}

// Renewals is how many lease renewals sub's subscriptions ran (skipped
// ones excluded).
func Renewals(sub *Subscriber) int64 {
	return sub.consume.Renewals.Load()
}

// QueuedCalls is how many Publish calls to partition 0 of topic wait in p's
// queue for a script run in flight to end.
func QueuedCalls(p *Publisher, topic string) int {
	v, ok := p.batchers.Load(p.keys.Shard(topic, 0))
	if !ok {
		return 0
	}
	b := v.(*batcher)
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Closing reports whether Close has been called on p.
func Closing(p *Publisher) bool {
	return p.closed.Load()
}

// DecodeMessage decodes a stored message body.
var DecodeMessage = store.Decode

// PartitionOf is the partition a PartitionKey value hashes to.
var PartitionOf = meta.PartitionOf

// SchedulerLoops is how many partitions the scheduler embedded in sub
// schedules (their loops run or wait for a wake-up).
func SchedulerLoops(sub *Subscriber) int {
	sub.mu.Lock()
	sched := sub.sched
	sub.mu.Unlock()
	if sched == nil {
		return 0
	}
	return sched.Scheduled()
}

// SetFarTier sets the far tier's bucket width, lead and margin (see
// internal/store/far.go) for the whole test binary: TestMain makes them
// short, so messages due a few seconds ahead go through the far tier and
// its unpacking.
func SetFarTier(width, lead, margin time.Duration) {
	store.FarWidth, store.FarLead, store.FarMargin = width, lead, margin
}

// FarTier reads them back.
func FarTier() (width, lead, margin time.Duration) {
	return store.FarWidth, store.FarLead, store.FarMargin
}

// FarSlack is how far outside its bucket publish.lua lets a message be due.
var FarSlack = store.FarSlack

// UnpackFarOnce runs one unpack.lua call on the first far bucket of
// partition 0 of topic, for at most n elements, as a scheduler holding the
// partition's lease would: tests drive unpacking a batch at a time.
func UnpackFarOnce(ctx context.Context, client redis.UniversalClient, topic string, n int) (moved int64, err error) {
	sh := store.Keys{Prefix: DefaultKeyPrefix}.Shard(topic, 0)
	const owner = "test-unpacker"
	if err := client.Set(ctx, sh.Lease(), owner, time.Minute).Err(); err != nil {
		return 0, err
	}
	v, key := 1, sh.Far()
	buckets, err := client.ZRange(ctx, key, 0, 0).Result()
	if err == nil && len(buckets) == 0 {
		v, key = 2, sh.FarZ()
		buckets, err = client.ZRange(ctx, key, 0, 0).Result()
	}
	if err != nil || len(buckets) == 0 {
		return 0, err
	}
	b, err := strconv.ParseInt(buckets[0], 10, 64)
	if err != nil {
		return 0, err
	}
	head, err := store.FarHead(ctx, client, sh, v, b, n)
	if err != nil {
		return 0, err
	}
	r, err := store.Unpack(ctx, client, sh, owner, v, b, head)
	if err == nil && r.Stale {
		err = fmt.Errorf("unpack of bucket %d: stale", b)
	}
	return r.Moved, err
}

// UnpackFarNow unpacks every far bucket of partition part of topic into its
// waiting set at once, whatever their due times, as the scheduler holding
// the partition does a bucket at a time once its unpack time has come: tests
// force an unpack at the moment of their choosing (between two batches of a
// bulk action, between a cursor and its resume) instead of waiting for it.
// The messages keep their due times. It reports how many moved.
func UnpackFarNow(ctx context.Context, client redis.UniversalClient, topic string, part int) (moved int64, err error) {
	sh := store.Keys{Prefix: DefaultKeyPrefix}.Shard(topic, part)
	const owner = "test-unpacker"
	if ok, err := client.SetNX(ctx, sh.Lease(), owner, time.Minute).Result(); err != nil || !ok {
		return 0, fmt.Errorf("take the lease of partition %d: %v (held by a scheduler?)", part, err)
	}
	defer func() { _, _ = store.Unlease(context.WithoutCancel(ctx), client, sh, owner, "l") }()
	for v, key := range map[int]string{1: sh.Far(), 2: sh.FarZ()} {
		buckets, err := client.ZRange(ctx, key, 0, -1).Result()
		if err != nil {
			return 0, err
		}
		for _, m := range buckets {
			b, err := strconv.ParseInt(m, 10, 64)
			if err != nil {
				return moved, err
			}
			// Its time to unpack has come.
			if err := client.ZAddXX(ctx, key, redis.Z{Score: 0, Member: m}).Err(); err != nil {
				return moved, err
			}
			for more := true; more; {
				head, err := store.FarHead(ctx, client, sh, v, b, store.FarUnpackBatch)
				if err != nil {
					return moved, err
				}
				r, err := store.Unpack(ctx, client, sh, owner, v, b, head)
				if err == nil && r.Stale {
					err = fmt.Errorf("unpack of bucket %d: stale (the lease of partition %d is another's)", b, part)
				}
				if err == nil && r.Parked > 0 {
					err = fmt.Errorf("unpack of bucket %d: an element cannot be read", b)
				}
				if err != nil {
					return moved, err
				}
				moved, more = moved+r.Moved, r.More
			}
		}
	}
	return moved, nil
}

// PromoteNow runs one promote.lua call on partition part of topic, as the
// scheduler holding the partition would: the due messages of the waiting
// set move to the ready stream. It reports how many moved.
func PromoteNow(ctx context.Context, client redis.UniversalClient, topic string, part int) (moved int64, err error) {
	sh := store.Keys{Prefix: DefaultKeyPrefix}.Shard(topic, part)
	const owner = "test-promoter"
	r, err := store.Promote(ctx, client, sh, store.PromoteArgs{Batch: 1000, Owner: owner, Lease: time.Minute, MayTake: true, Extend: true})
	if err == nil && !r.Held {
		return 0, fmt.Errorf("promote: the lease of partition %d is another's (held by a scheduler?)", part)
	}
	_, _ = store.Unlease(context.WithoutCancel(ctx), client, sh, owner, "l")
	return r.Moved, err
}

// Lanes is how many commands the library's background work runs at once
// on a client (internal/store/hub.go).
const Lanes = store.Lanes

// HubShared reports whether the components of the process hold a hub of
// the client (internal/store/hub.go).
func HubShared(client redis.UniversalClient) bool { return store.HubShared(client) }

// EncodeForTest is a message as stored, for tests that write entries
// around Publish.
func EncodeForTest(msg *message.Message) []byte { return store.Encode(msg) }

// FarPeek reads the far message uuid of partition part of topic, if the far
// tier holds it: its due score.
func FarPeek(ctx context.Context, client redis.UniversalClient, topic string, part int, uuid string) (score float64, ok bool, err error) {
	sh := store.Keys{Prefix: DefaultKeyPrefix}.Shard(topic, part)
	_, score, ok, err = store.FarPull(ctx, client, sh, uuid, true)
	return score, ok, err
}

// FarKeyHolders reads the far messages of partition part of topic with a
// business key whose holder the format 3 index marks (no bkeys entry),
// each found again by its key (store.FarKeyLookup): key -> UUID. A holder
// its key does not find is an error.
func FarKeyHolders(ctx context.Context, client redis.UniversalClient, topic string, part int) (map[string]string, error) {
	sh := store.Keys{Prefix: DefaultKeyPrefix}.Shard(topic, part)
	out := map[string]string{}
	for from := int64(0); ; {
		refs, err := store.FarBuckets(ctx, client, sh, from, 64)
		if err != nil {
			return nil, err
		}
		for _, ref := range refs {
			for pos := int64(0); ; {
				ms, next, done, err := store.FarRange(ctx, client, sh, ref, pos, 512)
				if err != nil {
					return nil, err
				}
				for _, m := range ms {
					msg, err := store.Decode([]byte(*m.Body))
					if err != nil {
						return nil, err
					}
					key := msg.Metadata.Get(BusinessKey)
					if key == "" || client.HExists(ctx, sh.Bkeys(), key).Val() {
						continue
					}
					holder, _, err := store.FarKeyLookup(ctx, client, sh, key)
					if err != nil {
						return nil, err
					}
					if holder != m.ID {
						return nil, fmt.Errorf("the far holder %s of key %q is not found by its key (found %q)", m.ID, key, holder)
					}
					out[key] = m.ID
				}
				if done {
					break
				}
				pos = next
			}
		}
		if len(refs) < 64 {
			return out, nil
		}
		from = refs[len(refs)-1] + 1
	}
}

// PullFarAll moves every far message of partition part of topic into its
// waiting set (store.PullFarAll), keeping due times and order.
func PullFarAll(ctx context.Context, client redis.UniversalClient, topic string, part int) (int, error) {
	return store.PullFarAll(ctx, client, store.Keys{Prefix: DefaultKeyPrefix}.Shard(topic, part))
}

// SetLevelTiming sets the storage level's settle time and how often
// processes announce themselves (store.LevelSettle, AnnounceEvery).
func SetLevelTiming(settle, every time.Duration) {
	store.LevelSettle, store.AnnounceEvery = settle, every
}

// SetLocateBudget lowers Locate's scan budget (LocateScan) until the
// returned function is called. Not for parallel tests.
func SetLocateBudget(n int) (restore func()) {
	old := locateBudget
	locateBudget = n
	return func() { locateBudget = old }
}

// Handoffs is how many scheduler ticks sub's subscriptions ran in their
// reads (see internal/consumption/handoff.go).
func Handoffs(sub *Subscriber) int64 {
	return sub.consume.Handoffs.Load()
}
