package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The calls of the scripts that consume messages (see calls.go).

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
