package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Entry is a stream entry as a consumer reads it: its ID and fields (see
// EntryBody and EntryAttempt).
type Entry struct {
	ID     string
	Values map[string]any
}

// Batch is what one read took from one stream: Stream is the key.
type Batch struct {
	Stream  string
	Entries []Entry
}

// batches converts go-redis's reply of a read.
func batches(xs []redis.XStream) []Batch {
	if len(xs) == 0 {
		return nil
	}
	out := make([]Batch, len(xs))
	for i, x := range xs {
		es := make([]Entry, len(x.Messages))
		for j, m := range x.Messages {
			es[j] = Entry{ID: m.ID, Values: m.Values}
		}
		out[i] = Batch{Stream: x.Stream, Entries: es}
	}
	return out
}

// ReadGroup reads up to count entries of each of a consumer's two streams
// of a partition, the redelivery stream first, from the entry IDs redo
// and ready (">" for new entries, "0" for the consumer's pending ones).
// Nothing to read is no error.
func ReadGroup(ctx context.Context, c Cmds, sh Shard, group, consumer string, count int, redo, ready string) ([]Batch, error) {
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group:    group,
		Consumer: consumer,
		Count:    int64(count),
		Streams:  []string{sh.Redelivery(group), sh.Stream(), redo, ready},
		Block:    -1,
	}).Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return batches(res), err
}

// PickReply is what pick.lua did.
type PickReply struct {
	Moved int64     // grouped messages moved into the redelivery stream
	More  bool      // groups are left to serve: pick again before the next read
	Wake  time.Time // when a group asleep under its rate limit wakes (zero: none)
}

// ReadArgs is a subscription's read of new entries: up to Count of each of
// its two streams, the redelivery stream first, after what the flags ask
// for, all in one pipeline.
type ReadArgs struct {
	Group, Consumer string
	Count           int
	// Pick moves up to Count of the consumer group's grouped messages into
	// its redelivery stream first (pick.lua), where the read finds them.
	Pick bool
	// Arm arms the partition's bell before the read (SET NX), so that a
	// script adding entries from then on rings it (lib.lua's ring): the
	// read's caller, finding it took all there was, waits for the bell and
	// misses nothing added after the read. A read taking all it asked for
	// leaves it armed: the next entry added rings it, which costs a
	// needless read at most. Redis refuses the SET at maxmemory (see
	// ReadReply.Armed).
	Arm bool
	// Vis reads the group's stored visibility timeout too (see
	// ReadReply.Vis).
	Vis bool
	// AckReady and AckRedo are acknowledged first, as Ack does
	// (ReadReply.Acked): the acks a subscription queued since its last
	// write ride on its next read instead of a round trip of their own.
	AckReady, AckRedo []string
}

// ReadReply is what ReadNew read.
type ReadReply struct {
	Streams []Batch
	// Armed: with ReadArgs.Arm, the bell is armed. Not when Redis refused
	// the SET (at maxmemory with noeviction): the caller polls instead of
	// waiting for the bell.
	Armed bool
	Pick  PickReply     // with ReadArgs.Pick
	Vis   time.Duration // with ReadArgs.Vis: the group's stored visibility timeout (0: none stored)
	Acked AckReply      // with ReadArgs.AckReady or AckRedo
}

// ReadNew reads new entries as a ReadArgs says, in one round trip; nothing
// to read is no error. The read is a plain XREADGROUP: what only matters
// now and then (whether the group is paused, or the consumer has entries
// pending that a read whose reply was lost took) is checked elsewhere, not
// on every read.
func ReadNew(ctx context.Context, c Cmds, sh Shard, a ReadArgs) (ReadReply, error) {
	pipe := c.Pipeline()
	acked := queueAcks(ctx, pipe, sh, a.Group, a.AckReady, a.AckRedo)
	var pick pipedScript
	if a.Pick {
		keys := append([]string{sh.Redelivery(a.Group), sh.Meta(a.Group)}, sh.fairKeys(a.Group)...)
		pick = pipeScript(ctx, pipe, pickScript, append(keys, sh.Bell()), a.Count)
	}
	var arm *redis.BoolCmd
	if a.Arm {
		arm = pipe.SetNX(ctx, sh.Bell(), "1", 0)
	}
	var vis *redis.StringCmd
	if a.Vis {
		vis = pipe.HGet(ctx, sh.Meta(a.Group), "vis")
	}
	read := pipe.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group:    a.Group,
		Consumer: a.Consumer,
		Count:    int64(a.Count),
		Streams:  []string{sh.Redelivery(a.Group), sh.Stream(), ">", ">"},
		Block:    -1,
	})
	execPipe(ctx, pipe)
	var r ReadReply
	r.Acked = acked.reply(ctx, c)
	r.Armed = arm != nil && arm.Err() == nil
	if a.Pick {
		res, err := pick.Result(ctx, c).Int64Slice()
		if err == nil {
			err = replyShort("pick", len(res), 3)
		}
		if err != nil {
			return r, err
		}
		r.Pick = PickReply{Moved: res[0], More: res[1] == 1, Wake: wakeTime(res[2])}
		if pick.Cmd.Err() != nil {
			// pick.lua was not cached: it ran after the read, so what it
			// moved is read next time.
			r.Pick.More = true
		}
	}
	if vis != nil {
		ms, err := vis.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return r, err
		}
		r.Vis = time.Duration(ms) * time.Millisecond
	}
	streams, err := read.Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	r.Streams = batches(streams)
	return r, err
}

// wakeTime is the time of a script's ms reply, the zero time for -1.
func wakeTime(ms int64) time.Time {
	if ms < 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// maxAckPerCall bounds the redelivery entries of one ack.lua call.
const maxAckPerCall = 256

// AckReply is what Ack did, per stream: how many entries were pending and
// are now acknowledged, or the error.
type AckReply struct {
	Ready, Redo       int64
	ReadyErr, RedoErr error
}

// Ack acknowledges a consumer group's entries of the ready stream (XACK)
// and of the redelivery stream (ack.lua, which deletes them) in one round
// trip. Each stream's write counts on its own.
func Ack(ctx context.Context, c Cmds, sh Shard, group string, ready, redo []string) AckReply {
	pipe := c.Pipeline()
	a := queueAcks(ctx, pipe, sh, group, ready, redo)
	execPipe(ctx, pipe)
	return a.reply(ctx, c)
}

// acks are the acknowledgements queued on a pipeline (see queueAcks).
type acks struct {
	ready *redis.IntCmd
	redo  []pipedScript
}

// queueAcks queues on pipe the acknowledgements Ack sends.
func queueAcks(ctx context.Context, pipe redis.Pipeliner, sh Shard, group string, ready, redo []string) acks {
	var a acks
	if len(ready) > 0 {
		a.ready = pipe.XAck(ctx, sh.Stream(), group, ready...)
	}
	// ack.lua reads each grouped entry and gives its slot back: a bounded
	// number per call keeps every call short, whatever the batch.
	for start := 0; start < len(redo); start += maxAckPerCall {
		a.redo = append(a.redo, pipeAck(ctx, pipe, sh, group, redo[start:min(start+maxAckPerCall, len(redo))]))
	}
	return a
}

// reply is what the pipeline's acknowledgements did, once it ran.
func (a acks) reply(ctx context.Context, c Cmds) AckReply {
	var r AckReply
	if a.ready != nil {
		r.Ready, r.ReadyErr = a.ready.Result()
	}
	for _, p := range a.redo {
		n, err := p.Result(ctx, c).Int64()
		r.Redo += n
		if err != nil && r.RedoErr == nil {
			r.RedoErr = err
		}
	}
	return r
}

// CountTimeout counts a handler timeout at ms time at in a group's meta
// hash, where the health check finds it.
func CountTimeout(ctx context.Context, c Cmds, sh Shard, group string, at int64) error {
	meta := sh.Meta(group)
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, meta, "timeouts", 1)
		p.HSet(ctx, meta, "timeout_at", at)
		return nil
	})
	return err
}

// FarHead reads the popped count of far bucket b of format v and its first
// n elements, as unpack.lua takes them.
func FarHead(ctx context.Context, c Cmds, sh Shard, v int, b int64, n int) (popped int64, els []string, err error) {
	var p *redis.StringCmd
	var e *redis.StringSliceCmd
	// A pipeline rather than MULTI, which Redis refuses at maxmemory; each
	// command's error is checked below (the pipeline's is the first one,
	// which for a bucket never unpacked is HGET's redis.Nil).
	_, _ = c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		p = pipe.HGet(ctx, sh.FarMeta(), farPopped(v, b))
		e = pipe.LRange(ctx, sh.farBucketKey(v, b), 0, int64(min(n, FarUnpackBatch))-1)
		return nil
	})
	if err := e.Err(); err != nil {
		return 0, nil, err
	}
	if err := p.Err(); err != nil && err != redis.Nil {
		return 0, nil, err
	}
	popped, _ = strconv.ParseInt(p.Val(), 10, 64)
	return popped, e.Val(), nil
}

// EntryBody is the encoded message of a stream entry (field m); ok is
// false when the entry has none (written by another tool).
func EntryBody(e Entry) (body string, ok bool) {
	v, ok := e.Values["m"]
	body, _ = v.(string)
	return body, ok
}

// EntryAttempt is the delivery attempt of a stream entry: field a on
// redeliveries, 1 otherwise.
func EntryAttempt(e Entry) int {
	if a, ok := e.Values["a"].(string); ok {
		if n, err := strconv.Atoi(a); err == nil && n > 0 {
			return n
		}
	}
	return 1
}

// PeekReply is what peek.lua found for an idle subscription.
type PeekReply struct {
	Read    bool // entries to read (or a stream or the group is gone: the read finds out)
	Groups  bool // a group of grouped messages may be served: pick
	Pending bool // entries are pending for the consumer: it holds none, so a read whose reply was lost took them
}

// Peek asks, in one round trip, what each consumer's idle subscription of
// a partition should do (peek.lua; consumers[i] reads shards[i]); an error
// counts as Read, so the caller's read finds out why.
func Peek(ctx context.Context, c Cmds, shards []Shard, group string, consumers []string) []PeekReply {
	run := func() []pipedScript {
		pipe := c.Pipeline()
		peeks := make([]pipedScript, len(shards))
		for i, sh := range shards {
			peeks[i] = pipePeek(ctx, pipe, sh, group, consumers[i])
		}
		execPipe(ctx, pipe)
		return peeks
	}
	// Where Redis did not have the script (its first use, or Redis
	// restarted), Result runs it on its own, loading it on that node.
	out := make([]PeekReply, len(shards))
	for i, p := range run() {
		n, err := p.Result(ctx, c).Int()
		out[i] = PeekReply{Read: err != nil || n&1 != 0, Groups: n&2 != 0, Pending: n&4 != 0}
	}
	return out
}
