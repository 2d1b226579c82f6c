package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The calls a subscription makes: its consumer group created, reads of its
// streams (new entries, with the acknowledgements queued meanwhile, and
// its pending ones), acks, nacks, lease renewals, hand-backs, ordered
// ownership, the rate-limit gate and concurrency slots; and what the sweep
// peeks at. Scripts run as calls.go says.

// GroupPolicy is a consumer group's retry policy and limits, as init.lua
// stores them for the schedulers, which reclaim the group's messages on
// their own (they may run in a Manager that never saw the subscriber's
// config).
type GroupPolicy struct {
	MaxAttempts int // <= 0: no limit
	// Visibility is the visibility timeout: a pending message whose lease
	// was not renewed for this long is reclaimed by a scheduler.
	Visibility  time.Duration
	MaxDead     int           // most dead letters kept (<= 0: no limit)
	IdleTimeout time.Duration // consumers idle longer are removed
	// RetryDelays are the delays before attempts 2, 3, ... (the last
	// repeats); empty: the scripts' default.
	RetryDelays []time.Duration
	Concurrency int // messages of one group handled at once (0: no limit)
	// RateMessages per RatePer is the group rate limit (0: none).
	RateMessages int
	RatePer      time.Duration
}

// args is the policy as init.lua's ARGV[3..9].
func (p GroupPolicy) args() []any {
	delays := make([]string, len(p.RetryDelays))
	for i, d := range p.RetryDelays {
		delays[i] = strconv.FormatInt(d.Milliseconds(), 10)
	}
	rate := ""
	if p.RateMessages > 0 {
		rate = strconv.Itoa(p.RateMessages) + "/" + strconv.FormatInt(p.RatePer.Milliseconds(), 10)
	}
	return []any{max(p.MaxAttempts, 0), p.Visibility.Milliseconds(), max(p.MaxDead, 0), p.IdleTimeout.Milliseconds(),
		strings.Join(delays, ","), p.Concurrency, rate}
}

// InitGroup runs init.lua: creates the consumer group on a partition (both
// streams) and stores its policy. It reports whether the group is new.
func InitGroup(ctx context.Context, c redis.Scripter, sh Shard, group string, policy GroupPolicy) (bool, error) {
	args := append([]any{group, sh.Wake()}, policy.args()...)
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
	if isNoScript(p.Cmd.Err()) {
		return p.Script.Run(ctx, c, p.Keys, p.Args...)
	}
	return p.Cmd
}

// isNoScript reports whether err is Redis's "NOSCRIPT": EVALSHA of a
// script it has not cached.
func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

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

// Handed is the entry a consumer's handler has (see Extend); the zero
// Handed: none.
type Handed struct {
	Redo bool   // in the redelivery stream, else the ready stream
	ID   string // its entry id
	At   time.Time
}

func (h Handed) report() string {
	if h.ID == "" {
		return "-"
	}
	which := "m"
	if h.Redo {
		which = "r"
	}
	return which + " " + h.ID + " " + strconv.FormatInt(h.At.UnixMilli(), 10)
}

// Extend runs extend.lua: renews the lease of the entries a consumer
// holds in the ready stream (ready) and the redelivery stream (redo), and
// reports which of them its handler has (handed), for lease long.
func Extend(ctx context.Context, c redis.Scripter, sh Shard, group, consumer string, handed Handed, lease time.Duration, ready, redo []any) (ExtendReply, error) {
	args := make([]any, 0, 5+len(ready)+len(redo))
	args = append(args, group, consumer, len(ready), handed.report(), max(lease.Milliseconds(), 1))
	args = append(args, ready...)
	args = append(args, redo...)
	res, err := extendScript.Run(ctx, c, []string{sh.Stream(), sh.Redelivery(group), sh.Meta(group), sh.handling(group, consumer)}, args...).Int64Slice()
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

// NackStatus is what nack.lua did with an entry.
type NackStatus int64

const (
	NackNotPending NackStatus = 0 // no longer pending for the group (settled elsewhere, or reclaimed)
	NackRequeued   NackStatus = 1 // in the retry set, for its next attempt
	NackBuried     NackStatus = 2 // in the dead letters
)

// NackReply is what nack.lua returns.
type NackReply struct {
	Status  NackStatus
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
	return NackReply{Status: NackStatus(res[0]), Evicted: res[1]}, nil
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

// OwnOp is what own.lua is asked to do with a partition's ownership.
type OwnOp string

const (
	OwnTake  OwnOp = "take"  // take it if free or expired, then claim the previous owner's entries
	OwnRenew OwnOp = "renew" // extend it if still held
	OwnDrop  OwnOp = "drop"  // give it up
	OwnClaim OwnOp = "claim" // go on claiming from an OwnPos
)

// OwnStatus is what own.lua reports of the ownership.
type OwnStatus int64

const (
	NotOwner     OwnStatus = 0 // another consumer owns the partition (or it was dropped)
	Owner        OwnStatus = 1 // the consumer owns it
	OwnerClaimed OwnStatus = 2 // the consumer owns it and took the previous owner's pending entries over
)

// OwnReply is what own.lua returns.
type OwnReply struct {
	Status OwnStatus
	Next   OwnPos
}

// OwnArgs is an ordered subscription's call of own.lua.
type OwnArgs struct {
	Group, Consumer string
	Lease           time.Duration // the ownership's time
	Op              OwnOp
	Pos             OwnPos // where an OwnClaim goes on
	Batch           int    // most entries claimed per call
}

// Own runs own.lua on a partition for an ordered subscription (pos: where
// an OwnClaim goes on).
func Own(ctx context.Context, c redis.Scripter, sh Shard, a OwnArgs) (OwnReply, error) {
	res, err := ownScript.Run(ctx, c, []string{sh.Owner(a.Group), sh.Stream(), sh.Redelivery(a.Group)},
		a.Group, a.Consumer, a.Lease.Milliseconds(), string(a.Op), a.Pos.Stream, a.Pos.Cursor, a.Batch).Slice()
	if err == nil {
		err = replyShort("own", len(res), 3)
	}
	if err != nil {
		return OwnReply{}, err
	}
	var r OwnReply
	st, _ := res[0].(int64)
	r.Status = OwnStatus(st)
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

// GateReply is what gate.lua allows a subscription to fetch.
type GateReply struct {
	Paused bool
	Count  int           // fetch at most this many
	Wait   time.Duration // after this long
	End    int64         // the reservation (GateArgs.Reserved, next time)
}

// GateArgs is a subscription's question to gate.lua before a read.
type GateArgs struct {
	Group string
	// LimitMessages per LimitPer is the group's rate limit (0: none).
	LimitMessages int
	LimitPer      time.Duration
	Want          int   // messages the read would fetch
	Unused        int   // what the caller's previous reservation did not fetch, given back
	Reserved      int64 // that reservation's end (GateReply.End); 0: none
}

// Gate runs gate.lua on partition 0 (sh) of a topic: whether the group
// is paused, and under its rate limit when a read may start.
func Gate(ctx context.Context, c redis.Scripter, sh Shard, a GateArgs) (GateReply, error) {
	prev := ""
	if a.Reserved > 0 {
		prev = strconv.FormatInt(a.Reserved, 10)
	}
	res, err := gateScript.Run(ctx, c, []string{sh.Paused(a.Group), sh.rate(a.Group)},
		a.LimitMessages, a.LimitPer.Milliseconds(), a.Want, a.Unused, prev).Int64Slice()
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

// Entry is a stream entry as a consumer reads it: its ID and fields (see
// EntryBody and EntryAttempt).
type Entry struct {
	ID     string
	Values map[string]any
}

// Grouped reports whether the entry is a grouped message's (field k, see
// lib.lua's entry_of): its ack gives its group's slot back (ack.lua),
// which the group's next message may be waiting for.
func (e Entry) Grouped() bool {
	_, ok := e.Values["k"]
	return ok
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
	// Promote, when set, runs a scheduler's tick of the partition
	// (promote.lua, as Promote does) before the read, which so finds what
	// it moved: one round trip for both, and no ring and read of their own
	// (ReadReply.Promote).
	Promote *PromoteArgs
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
	// With ReadArgs.Promote: its reply or error. PromoteLate: Redis did
	// not have the script cached, so it ran after the read, which did not
	// see what it moved (read again).
	Promote     PromoteReply
	PromoteErr  error
	PromoteLate bool
}

// ReadNew reads new entries as a ReadArgs says, in one round trip; nothing
// to read is no error. The read is a plain XREADGROUP: what only matters
// now and then (whether the group is paused, or the consumer has entries
// pending that a read whose reply was lost took) is checked elsewhere, not
// on every read.
func ReadNew(ctx context.Context, c Cmds, sh Shard, a ReadArgs) (ReadReply, error) {
	pipe := c.Pipeline()
	acked := queueAcks(ctx, pipe, sh, a.Group, a.AckReady, a.AckRedo)
	var promote pipedScript
	if a.Promote != nil {
		keys, args := a.Promote.script(sh)
		promote = pipeScript(ctx, pipe, promoteScript, keys, args...)
	}
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
	if a.Promote != nil {
		r.PromoteLate = isNoScript(promote.Cmd.Err())
		r.Promote, r.PromoteErr = promoteReply(promote.Result(ctx, c))
	}
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
