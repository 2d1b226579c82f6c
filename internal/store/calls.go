package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// One function per Lua script (see the key table in scripts.go and the script headers): it
// builds the script's KEYS in the order of its header, passes typed
// arguments as its ARGV and decodes the reply into a struct, so the key
// lists and reply positions live here only.

// replyShort reports a reply with fewer values than the script's header
// promises (a script of another version loaded under the same hash cannot
// happen, but an index out of range must not panic a scheduler).
func replyShort(script string, got, want int) error {
	if got >= want {
		return nil
	}
	return fmt.Errorf("%s.lua returned %d values, want %d", script, got, want)
}

// PublishReply is what publish.lua returns for a batch of calls.
type PublishReply struct {
	Statuses []any // one per call, in call order: see status
	Lost     bool  // the partition's registration marker was gone
	// GroupsStale: the consumer groups given were not the topic's, so
	// immediate grouped messages waited for the scheduler: read them again
	// (Groups) for the next calls.
	GroupsStale bool
}

// Status decodes the status of call i: dup is the UUID of a message already
// waiting with another body; refusal a business key or capacity refusal
// (see pubCall.refusal); pulls the UUIDs of messages of the call waiting in
// the far tier, to move to the waiting set before sending the call again;
// all empty: stored.
func (r PublishReply) Status(i int) (dup string, refusal []any, pulls []string) {
	dup, _ = r.Statuses[i].(string)
	refusal, _ = r.Statuses[i].([]any)
	if len(refusal) >= 2 && refusal[0] == "pull" {
		for _, v := range refusal[1:] {
			if id, _ := v.(string); id != "" {
				pulls = append(pulls, id)
			}
		}
		return "", nil, pulls
	}
	return dup, refusal, nil
}

// PubArgs is what publish.lua takes of one Publish call to a partition.
type PubArgs struct {
	Args []any // UUID, delay in ms, encoded body, business key argument, priority flag, group for each message
	Far  []FarArg
	N    int // messages
}

// PubStride is the number of PubArgs.Args per message.
const PubStride = 6

// PubCall is a Publish call as the caller keeps it: its PubArgs, and what
// else the caller needs (generic, so a batch is passed without a copy).
type PubCall interface{ PublishArgs() *PubArgs }

// PublishOpts are the settings of a run of Publish.
type PublishOpts struct {
	// MaxWaiting and MaxReady are the partition's capacity limits (0: none).
	MaxWaiting, MaxReady int
	// Groups are the topic's consumer groups as the caller knows them:
	// immediate grouped messages go straight to their groups' queues when
	// they are right (nil when the batch has none).
	Groups []string
}

// Publish stores the calls of batch, all to partition sh: with append.lua
// when every message is plain and due now and the ready stream has no
// bound, with delayed.lua when every message is plain, delayed and due
// before the far tier and the waiting set has no bound, else with
// publish.lua. At a steady rate every message is a call of its own, and
// then the short scripts cost Redis a fraction of the general one.
func Publish[C PubCall](ctx context.Context, c redis.Scripter, sh Shard, o PublishOpts, batch []C) (PublishReply, error) {
	msgs := 0
	now, near := o.MaxReady == 0, o.MaxWaiting == 0
	for _, call := range batch {
		a := call.PublishArgs()
		msgs += a.N
		for m := 0; (now || near) && m < a.N; m++ {
			delay, plain := plainArgs(a.Args[PubStride*m : PubStride*(m+1)])
			now = now && plain && delay <= 0
			near = near && plain && delay > 0 && !a.Far[m].Lookup && a.Far[m].Bucket < 0
		}
	}
	switch {
	case now:
		return appendNow(ctx, c, sh, msgs, batch)
	case near:
		return delayedNear(ctx, c, sh, msgs, batch)
	}
	maxWaiting, maxReady, groups := o.MaxWaiting, o.MaxReady, o.Groups
	keys := make([]string, 0, 14+6*len(groups))
	keys = append(keys, sh.Waiting(), sh.Bodies(), sh.Stream(), sh.seq(), sh.Bkeys(), sh.BkeyOf(), sh.Prio(), sh.reg(), sh.dormant(), sh.FarZ(), sh.FarMeta(), sh.Bell(), sh.GroupOf(), sh.Groups())
	for _, g := range groups {
		keys = append(keys, sh.Meta(g))
		keys = append(keys, sh.fairKeys(g)...)
		keys = append(keys, sh.Redelivery(g))
	}
	keyIndex := map[string]int{}
	indexOf := func(key string) int {
		i, ok := keyIndex[key]
		if !ok {
			keys = append(keys, key)
			i = len(keys)
			keyIndex[key] = i
		}
		return i
	}
	args := make([]any, 0, 8+len(groups)+len(batch)+12*msgs)
	args = append(args, sh.Wake(), maxWaiting, maxReady, len(batch),
		FarMargin.Milliseconds(), FarWidth.Milliseconds(), FarSlack().Milliseconds(), len(groups))
	for _, g := range groups {
		args = append(args, g)
	}
	for _, call := range batch {
		args = append(args, call.PublishArgs().N)
	}
	for _, pc := range batch {
		call := pc.PublishArgs()
		for m := range call.N {
			f := call.Far[m]
			args = append(args, call.Args[PubStride*m:PubStride*m+5]...)
			shardIdx, bucketIdx := 0, 0
			if f.Lookup {
				shardIdx = indexOf(sh.farIndex(f.Index))
			}
			if f.Bucket >= 0 {
				bucketIdx = indexOf(sh.FarList(f.Bucket))
			}
			args = append(args, shardIdx, f.Field, bucketIdx, f.Bucket, f.Start, f.UnpackAt, call.Args[PubStride*m+5])
		}
	}
	res, err := publishScript.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return PublishReply{}, err
	}
	return publishReply(res, len(batch))
}

// publishReply decodes the reply of publish.lua (or delayed.lua) for a
// batch of calls.
func publishReply(res []any, calls int) (PublishReply, error) {
	if len(res) != calls+2 {
		return PublishReply{}, fmt.Errorf("the publish script returned %d results for %d calls", len(res), calls)
	}
	lost, _ := res[calls].(int64)
	stale, _ := res[calls+1].(int64)
	return PublishReply{Statuses: res[:calls], Lost: lost == 1, GroupsStale: stale == 1}, nil
}

// plainArgs reads a message's PubArgs.Args: its delay in ms, and whether
// it is plain (no business key, priority or group).
func plainArgs(a []any) (delay int64, plain bool) {
	delay, _ = a[1].(int64)
	key, _ := a[3].(string)
	prio, _ := a[4].(string)
	group, _ := a[5].(string)
	return delay, key == "" && prio != "1" && group == ""
}

// appendNow runs append.lua for the msgs messages of batch (see Publish).
func appendNow[C PubCall](ctx context.Context, c redis.Scripter, sh Shard, msgs int, batch []C) (PublishReply, error) {
	args := make([]any, 0, 1+msgs)
	args = append(args, sh.Wake())
	for _, call := range batch {
		a := call.PublishArgs()
		for m := range a.N {
			args = append(args, a.Args[PubStride*m+2])
		}
	}
	lost, err := appendScript.Run(ctx, c, []string{sh.Stream(), sh.Bell(), sh.dormant(), sh.reg()}, args...).Int64()
	if err != nil {
		return PublishReply{}, err
	}
	statuses := make([]any, len(batch))
	for i := range statuses {
		statuses[i] = int64(0) // stored, as publish.lua says it
	}
	return PublishReply{Statuses: statuses, Lost: lost == 1}, nil
}

// delayedNear runs delayed.lua for the msgs messages of batch (see
// Publish).
func delayedNear[C PubCall](ctx context.Context, c redis.Scripter, sh Shard, msgs int, batch []C) (PublishReply, error) {
	args := make([]any, 0, 2+len(batch)+3*msgs)
	args = append(args, sh.Wake(), len(batch))
	for _, call := range batch {
		args = append(args, call.PublishArgs().N)
	}
	for _, call := range batch {
		a := call.PublishArgs()
		for m := range a.N {
			args = append(args, a.Args[PubStride*m], a.Args[PubStride*m+1], a.Args[PubStride*m+2])
		}
	}
	res, err := delayedScript.Run(ctx, c, []string{sh.Waiting(), sh.Bodies(), sh.seq(), sh.dormant(), sh.reg()}, args...).Slice()
	if err != nil {
		return PublishReply{}, err
	}
	return publishReply(res, len(batch))
}

// PromoteReply is what promote.lua returns.
type PromoteReply struct {
	Moved   int64 // messages moved
	Wait    int64 // µs: see promote.lua
	Missing int64 // waiting members without a body, dropped
	Groups  int   // consumer groups registered for the topic
	Held    bool  // the caller holds the lease (and promoted)
	Far     int64 // the far bucket due for unpacking; -1: none
	// FarFormat is that bucket's format (1 or 2: see far.go).
	FarFormat int
}

// Promote runs promote.lua on a partition for the consumer groups
// listed; extend renews the lease the caller holds.
func Promote(ctx context.Context, c redis.Scripter, sh Shard, groups []string, batch int, owner string, lease time.Duration, mayTake, extend bool) (PromoteReply, error) {
	take, ext := "1", "0"
	if !mayTake {
		take = "0"
	}
	if extend {
		ext = "1"
	}
	k := make([]string, 0, 13+8*len(groups))
	k = append(k, sh.Lease(), sh.Groups(), sh.Waiting(), sh.Bodies(), sh.Stream(), sh.Bkeys(), sh.BkeyOf(), sh.Prio(), sh.Fanout(), sh.Bell(), sh.GroupOf(), sh.orphans())
	for _, g := range groups {
		k = append(k, sh.Retry(g), sh.retryBodies(g), sh.Redelivery(g), sh.Meta(g))
		k = append(k, sh.fairKeys(g)...)
	}
	k = append(k, sh.Far(), sh.FarZ())
	res, err := promoteScript.Run(ctx, c, k, batch, owner, lease.Milliseconds(), take, ext).Int64Slice()
	if err == nil {
		err = replyShort("promote", len(res), 7)
	}
	if err != nil {
		return PromoteReply{}, err
	}
	return PromoteReply{Moved: res[0], Wait: res[1], Missing: res[2], Groups: int(res[3]), Held: res[4] == 1, Far: res[5], FarFormat: int(res[6])}, nil
}

// UnpackReply is what unpack.lua returns.
type UnpackReply struct {
	Moved   int64
	Refused bool // stopped at an element it cannot read, left at the bucket's head
	More    bool // the bucket has more elements
	Stale   bool // nothing done: see unpack.lua
}

// Unpack runs unpack.lua for the head elements els of far bucket b of
// format v, read with the bucket's popped count.
func Unpack(ctx context.Context, c redis.Scripter, sh Shard, owner string, v int, b, popped int64, els []string) (UnpackReply, error) {
	keys := []string{sh.Lease(), sh.farZset(v), sh.FarMeta(), sh.farBucketKey(v, b), sh.Waiting(), sh.Bodies(), sh.Bkeys(), sh.BkeyOf(), sh.Prio()}
	keyIndex := map[uint32]int{}
	start := farBucketStart(b).UnixMilli()
	args := make([]any, 0, 6+3*len(els))
	args = append(args, owner, b, popped, len(els), v, start)
	for _, e := range els {
		id, ok := "", false
		if m, read, _ := decodeFar(v, start, e); read {
			id, ok = storedUUID([]byte(m.Body))
		}
		if !ok {
			args = append(args, "", "", 0)
			continue
		}
		field := farField(id)
		n := farShard(field)
		i, seen := keyIndex[n]
		if !seen {
			keys = append(keys, sh.farIndex(n))
			i = len(keys)
			keyIndex[n] = i
		}
		args = append(args, field, id, i)
	}
	res, err := unpackScript.Run(ctx, c, keys, args...).Int64Slice()
	if err == nil {
		err = replyShort("unpack", len(res), 3)
	}
	if err != nil {
		return UnpackReply{}, err
	}
	return UnpackReply{Moved: max(res[0], 0), Refused: res[1] == 1, More: res[2] == 1, Stale: res[0] < 0}, nil
}

// farPullReply is what farpull.lua returns.
type farPullReply struct {
	Moved bool // the message was there (and moved, unless only read)
	Body  string
	Score float64 // due ms × 1024 + sequence
}

// farPullArgs are the keys and arguments of farpull.lua for the far
// message at loc in bucket b of format v.
func farPullArgs(sh Shard, v int, b int64, index, field, loc, uuid string, peek bool) ([]string, []any) {
	flag := "0"
	if peek {
		flag = "1"
	}
	return []string{sh.farZset(v), sh.FarMeta(), sh.farBucketKey(v, b), index, sh.Waiting(), sh.Bodies(), sh.Bkeys(), sh.BkeyOf(), sh.Prio()},
		[]any{field, loc, uuid, b, sh.Wake(), flag, v, farBucketStart(b).UnixMilli()}
}

// callFarPull runs farpull.lua for the far message at loc in bucket b of
// format v.
func callFarPull(ctx context.Context, c redis.Scripter, sh Shard, v int, b int64, index, field, loc, uuid string, peek bool) (farPullReply, error) {
	keys, args := farPullArgs(sh, v, b, index, field, loc, uuid, peek)
	res, err := farPullScript.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return farPullReply{}, err
	}
	if n, _ := res[0].(int64); n != 1 {
		return farPullReply{}, nil
	}
	if err := replyShort("farpull", len(res), 3); err != nil {
		return farPullReply{}, err
	}
	body, _ := res[1].(string)
	score, _ := res[2].(int64)
	return farPullReply{Moved: true, Body: body, Score: float64(score)}, nil
}

// Unlease runs unlease.lua: releases the partition's scheduling lease
// if owner holds it, waking the standbys with payload. It reports whether
// it did.
func Unlease(ctx context.Context, c redis.Scripter, sh Shard, owner, payload string) (bool, error) {
	n, err := unleaseScript.Run(ctx, c, []string{sh.Lease()}, owner, sh.Wake(), payload).Int()
	return n == 1, err
}

// ReclaimPos is where a reclaim sweep goes on: the stream (1 ready, 2
// redelivery; 0 when the sweep is done) and the last entry looked at.
type ReclaimPos struct {
	Stream int64
	Last   string
}

// ReclaimStart starts a sweep.
var ReclaimStart = ReclaimPos{Stream: 1, Last: "-"}

// ReclaimReply is what one reclaim.lua call returns.
type ReclaimReply struct {
	Requeued, Buried, Evicted, Missing, Removed int64
	Vis                                         time.Duration // the group's visibility timeout
	Next                                        ReclaimPos
}

// Reclaim runs reclaim.lua for a consumer group from pos, looking at
// batch pending entries at most.
func Reclaim(ctx context.Context, c redis.Scripter, sh Shard, group string, batch int, cleanup bool, pos ReclaimPos) (ReclaimReply, error) {
	flag := "0"
	if cleanup {
		flag = "1"
	}
	res, err := reclaimScript.Run(ctx, c,
		append([]string{sh.Stream(), sh.Redelivery(group), sh.Retry(group), sh.retryBodies(group), sh.Dead(group), sh.Meta(group), sh.Bell()}, sh.fairKeys(group)...),
		group, batch, sh.Wake(), flag, pos.Stream, pos.Last).Slice()
	if err == nil {
		err = replyShort("reclaim", len(res), 8)
	}
	if err != nil {
		return ReclaimReply{}, err
	}
	var n [6]int64
	for i := range n {
		n[i], _ = res[i].(int64)
	}
	r := ReclaimReply{Requeued: n[0], Buried: n[1], Evicted: n[2], Missing: n[3], Removed: n[4], Vis: time.Duration(n[5]) * time.Millisecond}
	r.Next.Stream, _ = res[6].(int64)
	r.Next.Last, _ = res[7].(string)
	return r, nil
}

// TrimReply is what trim.lua returns.
type TrimReply struct {
	Removed     int64 // entries removed
	ByRetention bool  // removed by the retention: no group reads the stream
}

// Trim runs trim.lua on a partition's ready stream.
func Trim(ctx context.Context, c redis.Scripter, sh Shard, retention time.Duration) (TrimReply, error) {
	res, err := trimScript.Run(ctx, c, []string{sh.Stream()}, retention.Milliseconds()).Int64Slice()
	if err == nil {
		err = replyShort("trim", len(res), 2)
	}
	if err != nil {
		return TrimReply{}, err
	}
	return TrimReply{Removed: res[0], ByRetention: res[1] == 1}, nil
}

// Idle runs idle.lua: whether the partition holds nothing to schedule
// for the consumer groups listed, marking it dormant if so.
func Idle(ctx context.Context, c redis.Scripter, sh Shard, groups []string, retention time.Duration) (bool, error) {
	k := make([]string, 0, 6+2*len(groups))
	k = append(k, sh.Waiting(), sh.Stream(), sh.dormant(), sh.Fanout(), sh.Far(), sh.FarZ())
	for _, g := range groups {
		k = append(k, sh.Retry(g), sh.Redelivery(g))
	}
	n, err := idleScript.Run(ctx, c, k, retention.Milliseconds()).Int()
	return n == 1, err
}

// InitGroup runs init.lua: creates the consumer group on a partition (both
// streams) and stores its policy (see groupPolicy). It reports whether the
// group is new.
func InitGroup(ctx context.Context, c redis.Scripter, sh Shard, group string, policy []any) (bool, error) {
	args := make([]any, 0, 2+len(policy))
	args = append(args, group, sh.Wake())
	args = append(args, policy...)
	n, err := initScript.Run(ctx, c, []string{sh.Stream(), sh.Redelivery(group), sh.Groups(), sh.Meta(group)}, args...).Int()
	return n == 1, err
}

// DropGroup runs dropgroup.lua: deletes a consumer group and its keys
// from a partition. It reports whether the group existed.
func DropGroup(ctx context.Context, c redis.Scripter, sh Shard, group string) (bool, error) {
	n, err := dropGroupScript.Run(ctx, c, []string{
		sh.Stream(), sh.Groups(),
		sh.Redelivery(group), sh.Retry(group), sh.retryBodies(group), sh.Dead(group), sh.Meta(group),
		sh.Owner(group), sh.members(group), sh.ownedCounts(group), sh.Paused(group), sh.rate(group),
		sh.Fair(group), sh.fairRing(group), sh.fairPrio(group), sh.fairWait(group),
	}, group).Int()
	return n == 1, err
}

// Cancel runs cancel.lua: removes a waiting message found by its UUID
// (by "uuid") or business key (by "key"). It reports whether it was waiting.
func Cancel(ctx context.Context, c redis.Scripter, sh Shard, by, value string) (bool, error) {
	n, err := cancelScript.Run(ctx, c, []string{sh.Waiting(), sh.Bodies(), sh.Bkeys(), sh.BkeyOf(), sh.Prio(), sh.GroupOf()}, by, value).Int()
	return n == 1, err
}

// Reschedule runs reschedule.lua on one partition: moves the waiting
// message found by its UUID or business key (by "uuid" or "key") to be due
// delayMs after Redis's now. It reports false when none waits there.
func Reschedule(ctx context.Context, c redis.Scripter, sh Shard, by, value string, delayMs int64) (bool, error) {
	score, err := rescheduleScript.Run(ctx, c, []string{sh.Waiting(), sh.Bkeys(), sh.seq(), sh.dormant()},
		by, value, delayMs, sh.Wake()).Int64()
	return score > 0, err
}

// CancelMany runs cancel.lua for each of the UUIDs on one pipeline and
// returns how many were waiting.
func CancelMany(ctx context.Context, c redis.Cmdable, sh Shard, uuids []string) (int, error) {
	return pipeEach(ctx, c, cancelScript, []string{sh.Waiting(), sh.Bodies(), sh.Bkeys(), sh.BkeyOf(), sh.Prio(), sh.GroupOf()}, uuids,
		func(uuid string) []any { return []any{"uuid", uuid} })
}

// RescheduleMany runs reschedule.lua for each of the UUIDs on one
// pipeline, moving them to be due at atMs (ms since the epoch), and
// returns how many were waiting.
func RescheduleMany(ctx context.Context, c redis.Cmdable, sh Shard, uuids []string, atMs int64) (int, error) {
	return pipeEach(ctx, c, rescheduleScript, []string{sh.Waiting(), sh.Bkeys(), sh.seq(), sh.dormant()}, uuids,
		func(uuid string) []any { return []any{"uuid", uuid, 0, sh.Wake(), atMs} })
}

// pipeEach runs script once per value on one pipeline and counts the
// replies above 0.
func pipeEach(ctx context.Context, c redis.Cmdable, script *redis.Script, keys, values []string, args func(string) []any) (int, error) {
	pipe := c.Pipeline()
	ps := make([]pipedScript, len(values))
	for k, v := range values {
		ps[k] = pipeScript(ctx, pipe, script, keys, args(v)...)
	}
	execPipe(ctx, pipe)
	n := 0
	for _, p := range ps {
		v, err := p.Result(ctx, c).Int64()
		if err != nil {
			return n, err
		}
		if v > 0 {
			n++
		}
	}
	return n, nil
}

// Requeue runs requeue.lua: moves the dead letters ids (none: the
// oldest, up to limit) of a group to its redelivery stream. It returns how
// many it moved.
func Requeue(ctx context.Context, c redis.Scripter, sh Shard, group string, limit int, ids []string) (int, error) {
	keys := append([]string{sh.Dead(group), sh.Redelivery(group), sh.Bell(), sh.Meta(group)}, sh.fairKeys(group)...)
	if len(ids) == 0 {
		return requeueScript.Run(ctx, c, keys, limit).Int()
	}
	// a bounded number per call (a grouped message costs more, see fair.lua)
	moved := 0
	for start := 0; start < len(ids); start += RequeueBatch {
		args := []any{limit}
		for _, id := range ids[start:min(start+RequeueBatch, len(ids))] {
			args = append(args, id)
		}
		n, err := requeueScript.Run(ctx, c, keys, args...).Int()
		moved += n
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// RequeueBatch is the most dead letters one requeue.lua call moves.
const RequeueBatch = 256

// pipedScript is a script queued on a pipeline by its hash.
type pipedScript struct {
	Script *redis.Script
	Cmd    *redis.Cmd
	Keys   []string
	Args   []any
}

func pipeScript(ctx context.Context, pipe redis.Pipeliner, script *redis.Script, keys []string, args ...any) pipedScript {
	return pipedScript{Script: script, Cmd: script.EvalSha(ctx, pipe, keys, args...), Keys: keys, Args: args}
}

// Result is the script's reply once the pipeline ran. When Redis did not
// have the script cached yet (first use, or Redis restarted) it runs it on
// c, loading it.
func (p pipedScript) Result(ctx context.Context, c redis.Scripter) *redis.Cmd {
	if err := p.Cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return p.Script.Run(ctx, c, p.Keys, p.Args...)
	}
	return p.Cmd
}

// pipeAck queues ack.lua on pipe for the redelivery entries ids of group;
// its result is how many entries were pending and are now acknowledged.
func pipeAck(ctx context.Context, pipe redis.Pipeliner, sh Shard, group string, ids []string) pipedScript {
	args := make([]any, 0, len(ids)+1)
	args = append(args, group)
	for _, id := range ids {
		args = append(args, id)
	}
	keys := append([]string{sh.Redelivery(group)}, sh.fairKeys(group)...)
	return pipeScript(ctx, pipe, ackScript, append(keys, sh.Meta(group), sh.Bell()), args...)
}

// pipePeek queues peek.lua on pipe for a consumer of group (see Peek).
func pipePeek(ctx context.Context, pipe redis.Pipeliner, sh Shard, group, consumer string) pipedScript {
	return pipeScript(ctx, pipe, peekScript, []string{sh.Stream(), sh.Redelivery(group), sh.fairRing(group), sh.fairPrio(group), sh.fairWait(group)}, group, consumer)
}

// ExtendReply is what extend.lua returns.
type ExtendReply struct {
	Unheld int64         // > 0: entries pending for the consumer are not among those held
	Vis    time.Duration // the group's stored visibility timeout (0: none stored)
}

// Extend runs extend.lua: renews the lease of the entries a consumer
// holds in the ready stream (ready) and the redelivery stream (redo).
func Extend(ctx context.Context, c redis.Scripter, sh Shard, group, consumer string, ready, redo []any) (ExtendReply, error) {
	args := make([]any, 0, 3+len(ready)+len(redo))
	args = append(args, group, consumer, len(ready))
	args = append(args, ready...)
	args = append(args, redo...)
	res, err := extendScript.Run(ctx, c, []string{sh.Stream(), sh.Redelivery(group), sh.Meta(group)}, args...).Int64Slice()
	if err == nil {
		err = replyShort("extend", len(res), 2)
	}
	if err != nil {
		return ExtendReply{}, err
	}
	return ExtendReply{Unheld: res[0], Vis: time.Duration(res[1]) * time.Millisecond}, nil
}

// NackArgs is what nack.lua needs about a nacked entry.
type NackArgs struct {
	Group   string
	Stream  string // key of the stream the entry was read from
	Id      string // its entry id
	Redo    bool   // that stream is the redelivery stream
	Attempt int    // the attempt that failed
	Delay   time.Duration
	Body    []byte // the encoded message, with the metadata the handler left
	Reason  string // "": requeue; else bury it in the dead letters with this reason
	MaxDead int    // most dead letters kept (<= 0: no limit)

	KeepAttempt bool // requeue as the same attempt (Snooze), not the next
}

// NackReply is what nack.lua returns.
type NackReply struct {
	Status  int64 // 0 no longer pending, 1 requeued, 2 buried
	Evicted int64 // dead letters evicted to make room
}

// Nack runs nack.lua on a partition.
func Nack(ctx context.Context, c redis.Scripter, sh Shard, a NackArgs) (NackReply, error) {
	source := "m"
	if a.Redo {
		source = "r"
	}
	g := a.Group
	keep := "0"
	if a.KeepAttempt {
		keep = "1"
	}
	res, err := nackScript.Run(ctx, c,
		append([]string{a.Stream, sh.Retry(g), sh.retryBodies(g), sh.Redelivery(g), sh.Dead(g), sh.Meta(g), sh.Bell()}, sh.fairKeys(g)...),
		g, a.Id, source, a.Attempt, a.Delay.Milliseconds(), a.Body, sh.Wake(), a.Reason, max(a.MaxDead, 0), keep).Int64Slice()
	if err == nil {
		err = replyShort("nack", len(res), 2)
	}
	if err != nil {
		return NackReply{}, err
	}
	return NackReply{Status: res[0], Evicted: res[1]}, nil
}

// ReleaseReply is what one release.lua call returns.
type ReleaseReply struct {
	Released int64 // entries handed back
	Missing  int64 // pending entries whose body was gone
	Done     bool  // nothing left to hand back; else call again
}

// Release runs release.lua: hands back to the group up to batch
// entries per stream pending for consumer, but the one kept (keepStream
// "1" ready, "2" redelivery, "" none; keepID).
func Release(ctx context.Context, c redis.Scripter, sh Shard, group, consumer string, batch int, keepStream, keepID string) (ReleaseReply, error) {
	res, err := releaseScript.Run(ctx, c, append([]string{sh.Stream(), sh.Redelivery(group), sh.Bell(), sh.Meta(group)}, sh.fairKeys(group)...),
		group, consumer, batch, keepStream, keepID).Int64Slice()
	if err == nil {
		err = replyShort("release", len(res), 3)
	}
	if err != nil {
		return ReleaseReply{}, err
	}
	return ReleaseReply{Released: res[0], Missing: res[1], Done: res[2] == 1}, nil
}

// OwnPos is where an ordered takeover goes on claiming the previous
// owner's pending entries: the stream (2 ready, 3 redelivery, as own.lua
// numbers its KEYS; 0 when all are claimed) and the XAUTOCLAIM cursor.
type OwnPos struct {
	Stream int64
	Cursor string
}

// OwnReply is what own.lua returns.
type OwnReply struct {
	Status int64 // see own.lua: 0 not the owner, 1 the owner, 2 the owner and entries were claimed
	Next   OwnPos
}

// Own runs own.lua on a partition for an ordered subscription: op is
// "take", "renew", "drop" or "claim" (go on from pos).
func Own(ctx context.Context, c redis.Scripter, sh Shard, group, consumer string, lease time.Duration, op string, pos OwnPos, batch int) (OwnReply, error) {
	res, err := ownScript.Run(ctx, c, []string{sh.Owner(group), sh.Stream(), sh.Redelivery(group)},
		group, consumer, lease.Milliseconds(), op, pos.Stream, pos.Cursor, batch).Slice()
	if err == nil {
		err = replyShort("own", len(res), 3)
	}
	if err != nil {
		return OwnReply{}, err
	}
	var r OwnReply
	r.Status, _ = res[0].(int64)
	r.Next.Stream, _ = res[1].(int64)
	r.Next.Cursor, _ = res[2].(string)
	return r, nil
}

// MemberList is a list of members.lua: the ordered subscriptions of a
// consumer group, or the schedulers of a topic.
type MemberList struct {
	Members string // zset member -> expiry
	Counts  string // hash member -> partitions it owns
}

func GroupMembers(sh Shard, group string) MemberList {
	return MemberList{Members: sh.members(group), Counts: sh.ownedCounts(group)}
}

func TopicSchedulers(sh Shard) MemberList {
	return MemberList{Members: sh.schedulers(), Counts: sh.leaseCounts()}
}

// MembersReply is what members.lua returns.
type MembersReply struct {
	Live   int64 // live members
	Fewest int64 // fewest partitions another live member owns; -1: no other
}

// Members runs members.lua: renews member's heartbeat for ttl (0
// removes it), recording the partitions it owns.
func Members(ctx context.Context, c redis.Scripter, l MemberList, member string, ttl time.Duration, owned int32) (MembersReply, error) {
	res, err := membersScript.Run(ctx, c, []string{l.Members, l.Counts}, member, ttl.Milliseconds(), owned).Int64Slice()
	if err == nil {
		err = replyShort("members", len(res), 2)
	}
	if err != nil {
		return MembersReply{}, err
	}
	return MembersReply{Live: res[0], Fewest: res[1]}, nil
}

// FindReply is the waiting message find.lua found.
type FindReply struct {
	Uuid  string
	Score float64 // the due score: ms × 1024
	Body  []byte
}

// Find runs find.lua on one partition: by is "uuid" or "key" (a
// business key); found is false when no waiting message matches there.
func Find(ctx context.Context, c redis.Scripter, sh Shard, by, value string) (r FindReply, found bool, err error) {
	res, err := findScript.Run(ctx, c, []string{sh.Waiting(), sh.Bodies(), sh.Bkeys()}, by, value).StringSlice()
	if err == redis.Nil {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	if err := replyShort("find", len(res), 3); err != nil {
		return r, false, err
	}
	if r.Score, err = strconv.ParseFloat(res[1], 64); err != nil {
		return r, false, fmt.Errorf("find.lua: due score %q: %w", res[1], err)
	}
	r.Uuid, r.Body = res[0], []byte(res[2])
	return r, true, nil
}

// GateReply is what gate.lua allows a subscription to fetch.
type GateReply struct {
	Paused bool
	Count  int           // fetch at most this many
	Wait   time.Duration // after this long
	End    int64         // the reservation (callGate's reserved, next time)
}

// Gate runs gate.lua on partition 0 (sh) of a topic: whether the group
// is paused, and under its rate limit (limitMessages per limitPer; 0: none) when a read of want
// messages may start. unused gives back what the caller's previous
// reservation (reserved: its end, 0 for none) did not fetch.
func Gate(ctx context.Context, c redis.Scripter, sh Shard, group string, limitMessages int, limitPer time.Duration, want, unused int, reserved int64) (GateReply, error) {
	prev := ""
	if reserved > 0 {
		prev = strconv.FormatInt(reserved, 10)
	}
	res, err := gateScript.Run(ctx, c, []string{sh.Paused(group), sh.rate(group)},
		limitMessages, limitPer.Milliseconds(), want, unused, prev).Int64Slice()
	if err != nil {
		return GateReply{}, err
	}
	if err := replyShort("gate", len(res), 3); err != nil {
		return GateReply{}, err
	}
	r := GateReply{Paused: res[0] == 1, Count: int(res[1]), Wait: time.Duration(res[2]) * time.Microsecond}
	if len(res) > 3 {
		r.End = res[3]
	}
	return r, nil
}

// Slot runs slot.lua on partition 0 (sh) of a topic for member, a
// subscription: op "take" (under limit), "renew" (lease) or "release".
// It reports whether member holds a slot.
func Slot(ctx context.Context, c redis.Scripter, sh Shard, group, op, member string, limit int, lease time.Duration) (bool, error) {
	n, err := slotScript.Run(ctx, c, []string{sh.Running(group), sh.slotQueue(group), sh.slotSeen(group)},
		op, member, limit, lease.Milliseconds()).Int()
	return n == 1, err
}

// SchedAdd runs schedadd.lua; it reports whether the next tick was set.
func SchedAdd(ctx context.Context, c redis.Scripter, k Keys, id string, def []byte, spec, timezone string, first time.Time) (bool, error) {
	sk := k.Schedules()
	n, err := schedAddScript.Run(ctx, c, []string{sk.Defs(), sk.Next(), sk.Paused()},
		id, def, spec, timezone, first.UnixMilli(), sk.Wake()).Int64()
	return n == 1, err
}

// ParkedTick is the next tick of a paused schedule: the end of year 9999,
// which no tick loop finds due.
const ParkedTick = 253402300799000

// SchedPause runs schedpause.lua: pauses a schedule (pause true, at
// Redis's now) or resumes it with its next tick at. It returns -1 when no such schedule
// exists, 0 when it already was paused (or running), 1 when it changed.
func SchedPause(ctx context.Context, c redis.Scripter, k Keys, id string, pause bool, at time.Time) (int64, error) {
	sk := k.Schedules()
	op := "resume"
	if pause {
		op = "pause"
	}
	return schedPauseScript.Run(ctx, c, []string{sk.Defs(), sk.Next(), sk.Paused()},
		id, op, at.UnixMilli(), ParkedTick, sk.Wake()).Int64()
}

// SchedClaim runs schedclaim.lua: status 1 claimed (exp is the claim's
// expiry; zero when ttl is 0, a skip), 0 lost, -1 not due by Redis's clock.
func SchedClaim(ctx context.Context, c redis.Scripter, k Keys, id string, tick, after time.Time, ttl time.Duration) (status int64, exp time.Time, err error) {
	sk := k.Schedules()
	res, err := schedClaimScript.Run(ctx, c, []string{sk.Next(), sk.Claims()},
		id, tick.UnixMilli(), after.UnixMilli(), ttl.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, time.Time{}, err
	}
	if err := replyShort("schedclaim", len(res), 2); err != nil {
		return 0, time.Time{}, err
	}
	if res[0] == 1 && res[1] > 0 {
		exp = time.UnixMilli(res[1])
	}
	return res[0], exp, nil
}

// SchedRetry runs schedretry.lua: held is the claim expiry the caller
// holds (zero: take the claim only if expired). It returns the new expiry
// when the caller now holds the claim, zero otherwise.
func SchedRetry(ctx context.Context, c redis.Scripter, k Keys, member string, held time.Time, ttl time.Duration) (time.Time, error) {
	sk := k.Schedules()
	heldArg := ""
	if !held.IsZero() {
		heldArg = strconv.FormatInt(held.UnixMilli(), 10)
	}
	n, err := schedRetryScript.Run(ctx, c, []string{sk.Claims()}, member, heldArg, ttl.Milliseconds()).Int64()
	if err != nil || n == 0 {
		return time.Time{}, err
	}
	return time.UnixMilli(n), nil
}

// OverlapScan bounds what one schedoverlap.lua call reads: stream entries
// per stream (and retry bodies per group), and retry members named per
// group. Beyond them, a call skips the tick as undecided ("unknown") and the
// next tick's call reads on.
var OverlapScan = struct{ Entries, Members int }{256, 4096}

// OverlapRecord is the tick of a schedule with the overlap policy "skip"
// let through last (see schedoverlap.lua): its message's UUID ("" when none
// is recorded) and the tick.
type OverlapRecord struct {
	UUID string
	Tick time.Time
}

// OverlapView is what the caller of SchedOverlap believes of the
// partition a schedule's ticks go to: the tick let through last and the
// consumer groups. A wrong belief costs a call: the script corrects it.
type OverlapView struct {
	Prev   OverlapRecord
	Groups []string
}

// OverlapTick is a tick SchedOverlap may let through: its message's UUID,
// the tick, the message's delay, and whether it is high-priority.
type OverlapTick struct {
	UUID  string
	Tick  time.Time
	Delay time.Duration
	High  bool
}

// SchedOverlap runs schedoverlap.lua on partition sh, where the ticks of
// schedule id go: whether tick may be published. It returns "go" (publish
// it: it is recorded as let through, and view says so), "skip" with the
// reason, or "again" when view was wrong (it is corrected: call again).
func SchedOverlap(ctx context.Context, c redis.Scripter, sh Shard, id string, view *OverlapView, tick OverlapTick) (status, reason string, err error) {
	looked := view.Prev.UUID
	if looked == "" {
		looked = tick.UUID // no far index to look in: any of the partition's will do
	}
	field := farField(looked)
	flags := ""
	if tick.Delay >= FarMargin {
		flags += "f" // may wait in the far tier (see FarArgOf)
	}
	if tick.High {
		flags += "p"
	}
	if flags == "" {
		flags = "-"
	}
	keys := make([]string, 0, 6+3*len(view.Groups))
	keys = append(keys, sh.Overlap(), sh.Bodies(), sh.farIndex(farShard(field)), sh.Fanout(), sh.Stream(), sh.Groups())
	args := make([]any, 0, 10+len(view.Groups))
	args = append(args, id, view.Prev.UUID, idPrefix(view.Prev.UUID), field, tick.UUID, tick.Tick.UnixMilli(),
		max(tick.Delay, 0).Milliseconds(), flags, OverlapScan.Entries, OverlapScan.Members)
	for _, g := range view.Groups {
		keys = append(keys, sh.Retry(g), sh.retryBodies(g), sh.Redelivery(g))
		args = append(args, g)
	}
	res, err := schedOverlapScript.Run(ctx, c, keys, args...).StringSlice()
	if err == nil {
		err = replyShort("schedoverlap", len(res), 2)
	}
	if err != nil {
		return "", "", err
	}
	switch res[0] {
	case "go":
		view.Prev = OverlapRecord{UUID: tick.UUID, Tick: tick.Tick}
	case "again":
		view.Prev, view.Groups = parseOverlapRecord(res[1]), res[2:]
		return "again", "", nil
	}
	return res[0], res[1], nil
}

// parseOverlapRecord reads a schedule's field of the overlap hash.
func parseOverlapRecord(v string) OverlapRecord {
	var r OverlapRecord
	if f := strings.Fields(v); len(f) >= 2 {
		r.UUID = f[0]
		ms, _ := strconv.ParseInt(f[1], 10, 64)
		r.Tick = time.UnixMilli(ms)
	}
	return r
}

// SchedSkip runs schedskip.lua: drops the claim of a tick skipped by its
// schedule's overlap policy and counts the skip. It returns how many ticks
// of the schedule were skipped.
func SchedSkip(ctx context.Context, c redis.Scripter, k Keys, id string, tick time.Time) (int64, error) {
	sk := k.Schedules()
	return schedSkipScript.Run(ctx, c, []string{sk.Claims(), sk.Skips()}, ClaimMember(id, tick), id, tick.UnixMilli()).Int64()
}
