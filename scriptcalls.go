package redisdelay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// One function per Lua script (see scripts.go and the script headers): it
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

// publishReply is what publish.lua returns for a batch of calls.
type publishReply struct {
	statuses []any // one per call, in call order: see status
	lost     bool  // the partition's registration marker was gone
}

// status decodes the status of call i: dup is the UUID of a message already
// waiting with another body; refusal a business key or capacity refusal
// (see pubCall.refusal); pulls the UUIDs of messages of the call waiting in
// the far tier, to move to the waiting set before sending the call again;
// all empty: stored.
func (r publishReply) status(i int) (dup string, refusal []any, pulls []string) {
	dup, _ = r.statuses[i].(string)
	refusal, _ = r.statuses[i].([]any)
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

// pubArgs is what publish.lua takes of one Publish call to a partition.
type pubArgs struct {
	args []any // UUID, delay in ms, encoded body, business key argument, priority flag for each message
	far  []farArg
	n    int // messages
}

// callPublish runs publish.lua for the calls of batch, all to partition sh,
// whose capacity limits are maxWaiting and maxReady (0: none).
func callPublish(ctx context.Context, c redis.Scripter, sh shard, maxWaiting, maxReady int, batch []*pubArgs) (publishReply, error) {
	msgs := 0
	for _, call := range batch {
		msgs += call.n
	}
	keys := []string{sh.waiting(), sh.bodies(), sh.stream(), sh.seq(), sh.bkeys(), sh.bkeyOf(), sh.prio(), sh.reg(), sh.dormant(), sh.far(), sh.farMeta(), sh.bell()}
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
	args := make([]any, 0, 7+len(batch)+11*msgs)
	args = append(args, sh.wake(), maxWaiting, maxReady, len(batch),
		farMargin.Milliseconds(), farWidth.Milliseconds(), farSlack().Milliseconds())
	for _, call := range batch {
		args = append(args, call.n)
	}
	for _, call := range batch {
		for m := range call.n {
			f := call.far[m]
			args = append(args, call.args[5*m:5*m+5]...)
			shardIdx, bucketIdx := 0, 0
			if f.lookup {
				shardIdx = indexOf(sh.farIndex(f.index))
			}
			if f.bucket >= 0 {
				bucketIdx = indexOf(sh.farBucket(f.bucket))
			}
			args = append(args, shardIdx, f.field, bucketIdx, f.bucket, f.start, f.unpackAt)
		}
	}
	res, err := publishScript.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return publishReply{}, err
	}
	if len(res) != len(batch)+1 {
		return publishReply{}, fmt.Errorf("the publish script returned %d results for %d calls", len(res), len(batch))
	}
	lost, _ := res[len(batch)].(int64)
	return publishReply{statuses: res[:len(batch)], lost: lost == 1}, nil
}

// promoteReply is what promote.lua returns.
type promoteReply struct {
	moved   int64 // messages moved
	wait    int64 // µs: see promote.lua
	missing int64 // waiting members without a body, dropped
	groups  int   // consumer groups registered for the topic
	held    bool  // the caller holds the lease (and promoted)
	far     int64 // the far bucket due for unpacking; -1: none
}

// callPromote runs promote.lua on a partition for the consumer groups
// listed.
func callPromote(ctx context.Context, c redis.Scripter, sh shard, groups []string, batch int, owner string, lease time.Duration, mayTake bool) (promoteReply, error) {
	take := "1"
	if !mayTake {
		take = "0"
	}
	k := make([]string, 0, 11+3*len(groups))
	k = append(k, sh.lease(), sh.groups(), sh.waiting(), sh.bodies(), sh.stream(), sh.bkeys(), sh.bkeyOf(), sh.prio(), sh.fanout(), sh.bell())
	for _, g := range groups {
		k = append(k, sh.retry(g), sh.retryBodies(g), sh.redelivery(g))
	}
	k = append(k, sh.far())
	res, err := promoteScript.Run(ctx, c, k, batch, owner, lease.Milliseconds(), take).Int64Slice()
	if err == nil {
		err = replyShort("promote", len(res), 6)
	}
	if err != nil {
		return promoteReply{}, err
	}
	return promoteReply{moved: res[0], wait: res[1], missing: res[2], groups: int(res[3]), held: res[4] == 1, far: res[5]}, nil
}

// unpackReply is what unpack.lua returns.
type unpackReply struct {
	moved, corrupt int64
	more           bool // the bucket has more elements
	stale          bool // nothing done: see unpack.lua
}

// callUnpack runs unpack.lua for the head elements els of far bucket b,
// read with the bucket's popped count.
func callUnpack(ctx context.Context, c redis.Scripter, sh shard, owner string, b, popped int64, els []string) (unpackReply, error) {
	keys := []string{sh.lease(), sh.far(), sh.farMeta(), sh.farBucket(b), sh.waiting(), sh.bodies()}
	keyIndex := map[uint32]int{}
	args := make([]any, 0, 4+3*len(els))
	args = append(args, owner, b, popped, len(els))
	for _, e := range els {
		id, ok := "", false
		if len(e) > 8 {
			id, ok = storedUUID([]byte(e[8:]))
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
		return unpackReply{}, err
	}
	return unpackReply{moved: max(res[0], 0), corrupt: res[1], more: res[2] == 1, stale: res[0] < 0}, nil
}

// farPullReply is what farpull.lua returns.
type farPullReply struct {
	moved bool // the message was there (and moved, unless only read)
	body  string
	score float64 // due ms × 1024 + sequence
}

// callFarPull runs farpull.lua for the far message at loc in bucket b.
func callFarPull(ctx context.Context, c redis.Scripter, sh shard, b int64, index, field, loc, uuid string, peek bool) (farPullReply, error) {
	flag := "0"
	if peek {
		flag = "1"
	}
	res, err := farPullScript.Run(ctx, c,
		[]string{sh.far(), sh.farMeta(), sh.farBucket(b), index, sh.waiting(), sh.bodies()},
		field, loc, uuid, b, sh.wake(), flag).Slice()
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
	return farPullReply{moved: true, body: body, score: float64(score)}, nil
}

// callUnlease runs unlease.lua: releases the partition's scheduling lease
// if owner holds it, waking the standbys with payload. It reports whether
// it did.
func callUnlease(ctx context.Context, c redis.Scripter, sh shard, owner, payload string) (bool, error) {
	n, err := unleaseScript.Run(ctx, c, []string{sh.lease()}, owner, sh.wake(), payload).Int()
	return n == 1, err
}

// reclaimPos is where a reclaim sweep goes on: the stream (1 ready, 2
// redelivery; 0 when the sweep is done) and the last entry looked at.
type reclaimPos struct {
	stream int64
	last   string
}

// reclaimStart starts a sweep.
var reclaimStart = reclaimPos{stream: 1, last: "-"}

// reclaimReply is what one reclaim.lua call returns.
type reclaimReply struct {
	requeued, buried, evicted, missing, removed int64
	vis                                         time.Duration // the group's visibility timeout
	next                                        reclaimPos
}

// callReclaim runs reclaim.lua for a consumer group from pos, looking at
// batch pending entries at most.
func callReclaim(ctx context.Context, c redis.Scripter, sh shard, group string, batch int, cleanup bool, pos reclaimPos) (reclaimReply, error) {
	flag := "0"
	if cleanup {
		flag = "1"
	}
	res, err := reclaimScript.Run(ctx, c,
		[]string{sh.stream(), sh.redelivery(group), sh.retry(group), sh.retryBodies(group), sh.dead(group), sh.meta(group), sh.bell()},
		group, batch, sh.wake(), flag, pos.stream, pos.last).Slice()
	if err == nil {
		err = replyShort("reclaim", len(res), 8)
	}
	if err != nil {
		return reclaimReply{}, err
	}
	var n [6]int64
	for i := range n {
		n[i], _ = res[i].(int64)
	}
	r := reclaimReply{requeued: n[0], buried: n[1], evicted: n[2], missing: n[3], removed: n[4], vis: time.Duration(n[5]) * time.Millisecond}
	r.next.stream, _ = res[6].(int64)
	r.next.last, _ = res[7].(string)
	return r, nil
}

// trimReply is what trim.lua returns.
type trimReply struct {
	removed     int64 // entries removed
	byRetention bool  // removed by the retention: no group reads the stream
}

// callTrim runs trim.lua on a partition's ready stream.
func callTrim(ctx context.Context, c redis.Scripter, sh shard, retention time.Duration) (trimReply, error) {
	res, err := trimScript.Run(ctx, c, []string{sh.stream()}, retention.Milliseconds()).Int64Slice()
	if err == nil {
		err = replyShort("trim", len(res), 2)
	}
	if err != nil {
		return trimReply{}, err
	}
	return trimReply{removed: res[0], byRetention: res[1] == 1}, nil
}

// callIdle runs idle.lua: whether the partition holds nothing to schedule
// for the consumer groups listed, marking it dormant if so.
func callIdle(ctx context.Context, c redis.Scripter, sh shard, groups []string, retention time.Duration) (bool, error) {
	k := make([]string, 0, 5+2*len(groups))
	k = append(k, sh.waiting(), sh.stream(), sh.dormant(), sh.fanout(), sh.far())
	for _, g := range groups {
		k = append(k, sh.retry(g), sh.redelivery(g))
	}
	n, err := idleScript.Run(ctx, c, k, retention.Milliseconds()).Int()
	return n == 1, err
}

// callInit runs init.lua: creates the consumer group on a partition (both
// streams) and stores its policy (see groupPolicy). It reports whether the
// group is new.
func callInit(ctx context.Context, c redis.Scripter, sh shard, group string, policy []any) (bool, error) {
	args := make([]any, 0, 2+len(policy))
	args = append(args, group, sh.wake())
	args = append(args, policy...)
	n, err := initScript.Run(ctx, c, []string{sh.stream(), sh.redelivery(group), sh.groups(), sh.meta(group)}, args...).Int()
	return n == 1, err
}

// callDropGroup runs dropgroup.lua: deletes a consumer group and its keys
// from a partition. It reports whether the group existed.
func callDropGroup(ctx context.Context, c redis.Scripter, sh shard, group string) (bool, error) {
	n, err := dropGroupScript.Run(ctx, c, []string{
		sh.stream(), sh.groups(),
		sh.redelivery(group), sh.retry(group), sh.retryBodies(group), sh.dead(group), sh.meta(group),
		sh.owner(group), sh.members(group), sh.ownedCounts(group), sh.paused(group), sh.rate(group),
	}, group).Int()
	return n == 1, err
}

// callCancel runs cancel.lua: removes a waiting message found by its UUID
// (by "uuid") or business key (by "key"). It reports whether it was waiting.
func callCancel(ctx context.Context, c redis.Scripter, sh shard, by, value string) (bool, error) {
	n, err := cancelScript.Run(ctx, c, []string{sh.waiting(), sh.bodies(), sh.bkeys(), sh.bkeyOf(), sh.prio()}, by, value).Int()
	return n == 1, err
}

// callReschedule runs reschedule.lua on one partition: moves the waiting
// message found by its UUID or business key (by "uuid" or "key") to be due
// delayMs after Redis's now. It reports false when none waits there.
func callReschedule(ctx context.Context, c redis.Scripter, sh shard, by, value string, delayMs int64) (bool, error) {
	score, err := rescheduleScript.Run(ctx, c, []string{sh.waiting(), sh.bkeys(), sh.seq(), sh.dormant()},
		by, value, delayMs, sh.wake()).Int64()
	return score > 0, err
}

// callRequeue runs requeue.lua: moves the dead letters ids (none: the
// oldest, up to limit) of a group to its redelivery stream. It returns how
// many it moved.
func callRequeue(ctx context.Context, c redis.Scripter, sh shard, group string, limit int, ids []string) (int, error) {
	args := make([]any, 0, 1+len(ids))
	args = append(args, limit)
	for _, id := range ids {
		args = append(args, id)
	}
	return requeueScript.Run(ctx, c, []string{sh.dead(group), sh.redelivery(group), sh.bell()}, args...).Int()
}

// pipedScript is a script queued on a pipeline by its hash.
type pipedScript struct {
	script *redis.Script
	cmd    *redis.Cmd
	keys   []string
	args   []any
}

func pipeScript(ctx context.Context, pipe redis.Pipeliner, script *redis.Script, keys []string, args ...any) pipedScript {
	return pipedScript{script: script, cmd: script.EvalSha(ctx, pipe, keys, args...), keys: keys, args: args}
}

// result is the script's reply once the pipeline ran. When Redis did not
// have the script cached yet (first use, or Redis restarted) it runs it on
// c, loading it.
func (p pipedScript) result(ctx context.Context, c redis.Scripter) *redis.Cmd {
	if err := p.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return p.script.Run(ctx, c, p.keys, p.args...)
	}
	return p.cmd
}

// pipeAck queues ack.lua on pipe for the redelivery entries ids of group;
// its result is how many entries were pending and are now acknowledged.
func pipeAck(ctx context.Context, pipe redis.Pipeliner, sh shard, group string, ids []string) pipedScript {
	args := make([]any, 0, len(ids)+1)
	args = append(args, group)
	for _, id := range ids {
		args = append(args, id)
	}
	return pipeScript(ctx, pipe, ackScript, []string{sh.redelivery(group)}, args...)
}

// pipePeek queues peek.lua on pipe: its result is 1 when group has entries
// to read in the partition's ready stream or its redelivery stream.
func pipePeek(ctx context.Context, pipe redis.Pipeliner, sh shard, group string) pipedScript {
	return pipeScript(ctx, pipe, peekScript, []string{sh.stream(), sh.redelivery(group)}, group)
}

// extendReply is what extend.lua returns.
type extendReply struct {
	unheld int64         // > 0: entries pending for the consumer are not among those held
	vis    time.Duration // the group's stored visibility timeout (0: none stored)
}

// callExtend runs extend.lua: renews the lease of the entries a consumer
// holds in the ready stream (ready) and the redelivery stream (redo).
func callExtend(ctx context.Context, c redis.Scripter, sh shard, group, consumer string, ready, redo []any) (extendReply, error) {
	args := make([]any, 0, 3+len(ready)+len(redo))
	args = append(args, group, consumer, len(ready))
	args = append(args, ready...)
	args = append(args, redo...)
	res, err := extendScript.Run(ctx, c, []string{sh.stream(), sh.redelivery(group), sh.meta(group)}, args...).Int64Slice()
	if err == nil {
		err = replyShort("extend", len(res), 2)
	}
	if err != nil {
		return extendReply{}, err
	}
	return extendReply{unheld: res[0], vis: time.Duration(res[1]) * time.Millisecond}, nil
}

// nackArgs is what nack.lua needs about a nacked entry.
type nackArgs struct {
	group   string
	stream  string // key of the stream the entry was read from
	id      string // its entry id
	redo    bool   // that stream is the redelivery stream
	attempt int    // the attempt that failed
	delay   time.Duration
	body    []byte // the encoded message, with the metadata the handler left
	reason  string // "": requeue; else bury it in the dead letters with this reason
	maxDead int    // most dead letters kept (<= 0: no limit)

	keepAttempt bool // requeue as the same attempt (Snooze), not the next
}

// nackReply is what nack.lua returns.
type nackReply struct {
	status  int64 // 0 no longer pending, 1 requeued, 2 buried
	evicted int64 // dead letters evicted to make room
}

// callNack runs nack.lua on a partition.
func callNack(ctx context.Context, c redis.Scripter, sh shard, a nackArgs) (nackReply, error) {
	source := "m"
	if a.redo {
		source = "r"
	}
	g := a.group
	keep := "0"
	if a.keepAttempt {
		keep = "1"
	}
	res, err := nackScript.Run(ctx, c,
		[]string{a.stream, sh.retry(g), sh.retryBodies(g), sh.redelivery(g), sh.dead(g), sh.meta(g), sh.bell()},
		g, a.id, source, a.attempt, a.delay.Milliseconds(), a.body, sh.wake(), a.reason, max(a.maxDead, 0), keep).Int64Slice()
	if err == nil {
		err = replyShort("nack", len(res), 2)
	}
	if err != nil {
		return nackReply{}, err
	}
	return nackReply{status: res[0], evicted: res[1]}, nil
}

// releaseReply is what one release.lua call returns.
type releaseReply struct {
	released int64 // entries handed back
	missing  int64 // pending entries whose body was gone
	done     bool  // nothing left to hand back; else call again
}

// callRelease runs release.lua: hands back to the group up to batch
// entries per stream pending for consumer, but the one kept (keepStream
// "1" ready, "2" redelivery, "" none; keepID).
func callRelease(ctx context.Context, c redis.Scripter, sh shard, group, consumer string, batch int, keepStream, keepID string) (releaseReply, error) {
	res, err := releaseScript.Run(ctx, c, []string{sh.stream(), sh.redelivery(group), sh.bell()},
		group, consumer, batch, keepStream, keepID).Int64Slice()
	if err == nil {
		err = replyShort("release", len(res), 3)
	}
	if err != nil {
		return releaseReply{}, err
	}
	return releaseReply{released: res[0], missing: res[1], done: res[2] == 1}, nil
}

// ownPos is where an ordered takeover goes on claiming the previous
// owner's pending entries: the stream (2 ready, 3 redelivery, as own.lua
// numbers its KEYS; 0 when all are claimed) and the XAUTOCLAIM cursor.
type ownPos struct {
	stream int64
	cursor string
}

// ownReply is what own.lua returns.
type ownReply struct {
	status int64 // see own.lua: 0 not the owner, 1 the owner, 2 the owner and entries were claimed
	next   ownPos
}

// callOwn runs own.lua on a partition for an ordered subscription: op is
// "take", "renew", "drop" or "claim" (go on from pos).
func callOwn(ctx context.Context, c redis.Scripter, sh shard, group, consumer string, lease time.Duration, op string, pos ownPos, batch int) (ownReply, error) {
	res, err := ownScript.Run(ctx, c, []string{sh.owner(group), sh.stream(), sh.redelivery(group)},
		group, consumer, lease.Milliseconds(), op, pos.stream, pos.cursor, batch).Slice()
	if err == nil {
		err = replyShort("own", len(res), 3)
	}
	if err != nil {
		return ownReply{}, err
	}
	var r ownReply
	r.status, _ = res[0].(int64)
	r.next.stream, _ = res[1].(int64)
	r.next.cursor, _ = res[2].(string)
	return r, nil
}

// memberList is a list of members.lua: the ordered subscriptions of a
// consumer group, or the schedulers of a topic.
type memberList struct {
	members string // zset member -> expiry
	counts  string // hash member -> partitions it owns
}

func groupMembers(sh shard, group string) memberList {
	return memberList{members: sh.members(group), counts: sh.ownedCounts(group)}
}

func topicSchedulers(sh shard) memberList {
	return memberList{members: sh.schedulers(), counts: sh.leaseCounts()}
}

// membersReply is what members.lua returns.
type membersReply struct {
	live   int64 // live members
	fewest int64 // fewest partitions another live member owns; -1: no other
}

// callMembers runs members.lua: renews member's heartbeat for ttl (0
// removes it), recording the partitions it owns.
func callMembers(ctx context.Context, c redis.Scripter, l memberList, member string, ttl time.Duration, owned int32) (membersReply, error) {
	res, err := membersScript.Run(ctx, c, []string{l.members, l.counts}, member, ttl.Milliseconds(), owned).Int64Slice()
	if err == nil {
		err = replyShort("members", len(res), 2)
	}
	if err != nil {
		return membersReply{}, err
	}
	return membersReply{live: res[0], fewest: res[1]}, nil
}

// findReply is the waiting message find.lua found.
type findReply struct {
	uuid  string
	score float64 // the due score: ms × 1024
	body  []byte
}

// callFind runs find.lua on one partition: by is "uuid" or "key" (a
// business key); found is false when no waiting message matches there.
func callFind(ctx context.Context, c redis.Scripter, sh shard, by, value string) (r findReply, found bool, err error) {
	res, err := findScript.Run(ctx, c, []string{sh.waiting(), sh.bodies(), sh.bkeys()}, by, value).StringSlice()
	if err == redis.Nil {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	if err := replyShort("find", len(res), 3); err != nil {
		return r, false, err
	}
	if r.score, err = strconv.ParseFloat(res[1], 64); err != nil {
		return r, false, fmt.Errorf("find.lua: due score %q: %w", res[1], err)
	}
	r.uuid, r.body = res[0], []byte(res[2])
	return r, true, nil
}

// gateReply is what gate.lua allows a subscription to fetch.
type gateReply struct {
	paused bool
	count  int           // fetch at most this many
	wait   time.Duration // after this long
	end    int64         // the reservation (callGate's reserved, next time)
}

// callGate runs gate.lua on partition 0 (sh) of a topic: whether the group
// is paused, and under its rate limit (limitMessages per limitPer; 0: none) when a read of want
// messages may start. unused gives back what the caller's previous
// reservation (reserved: its end, 0 for none) did not fetch.
func callGate(ctx context.Context, c redis.Scripter, sh shard, group string, limitMessages int, limitPer time.Duration, want, unused int, reserved int64) (gateReply, error) {
	prev := ""
	if reserved > 0 {
		prev = strconv.FormatInt(reserved, 10)
	}
	res, err := gateScript.Run(ctx, c, []string{sh.paused(group), sh.rate(group)},
		limitMessages, limitPer.Milliseconds(), want, unused, prev).Int64Slice()
	if err != nil {
		return gateReply{}, err
	}
	if err := replyShort("gate", len(res), 3); err != nil {
		return gateReply{}, err
	}
	r := gateReply{paused: res[0] == 1, count: int(res[1]), wait: time.Duration(res[2]) * time.Microsecond}
	if len(res) > 3 {
		r.end = res[3]
	}
	return r, nil
}

// callSlot runs slot.lua on partition 0 (sh) of a topic for member, a
// subscription: op "take" (under limit), "renew" (lease) or "release".
// It reports whether member holds a slot.
func callSlot(ctx context.Context, c redis.Scripter, sh shard, group, op, member string, limit int, lease time.Duration) (bool, error) {
	n, err := slotScript.Run(ctx, c, []string{sh.running(group), sh.slotQueue(group), sh.slotSeen(group)},
		op, member, limit, lease.Milliseconds()).Int()
	return n == 1, err
}

// callSchedAdd runs schedadd.lua; it reports whether the next tick was set.
func callSchedAdd(ctx context.Context, c redis.Scripter, k keys, id string, def []byte, spec, timezone string, first time.Time) (bool, error) {
	sk := k.schedules()
	n, err := schedAddScript.Run(ctx, c, []string{sk.defs(), sk.next()},
		id, def, spec, timezone, first.UnixMilli(), sk.wake()).Int64()
	return n == 1, err
}

// callSchedClaim runs schedclaim.lua: status 1 claimed (exp is the claim's
// expiry; zero when ttl is 0, a skip), 0 lost, -1 not due by Redis's clock.
func callSchedClaim(ctx context.Context, c redis.Scripter, sk scheduleKeys, id string, tick, after time.Time, ttl time.Duration) (status int64, exp time.Time, err error) {
	res, err := schedClaimScript.Run(ctx, c, []string{sk.next(), sk.claims()},
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

// callSchedRetry runs schedretry.lua: held is the claim expiry the caller
// holds (zero: take the claim only if expired). It returns the new expiry
// when the caller now holds the claim, zero otherwise.
func callSchedRetry(ctx context.Context, c redis.Scripter, sk scheduleKeys, member string, held time.Time, ttl time.Duration) (time.Time, error) {
	heldArg := ""
	if !held.IsZero() {
		heldArg = strconv.FormatInt(held.UnixMilli(), 10)
	}
	n, err := schedRetryScript.Run(ctx, c, []string{sk.claims()}, member, heldArg, ttl.Milliseconds()).Int64()
	if err != nil || n == 0 {
		return time.Time{}, err
	}
	return time.UnixMilli(n), nil
}

// readStatus is what read.lua found.
type readStatus int64

const (
	readGot    readStatus = iota // entries read; more may be there
	readNone                     // nothing to read: the bell is armed
	readPaused                   // the group is paused
	readUnheld                   // the consumer has pending entries it does not hold
	readAll                      // entries read, all there were: the bell is armed
)

// readReply is what read.lua returns.
type readReply struct {
	status  readStatus
	vis     time.Duration // the group's stored visibility timeout (0: none stored)
	streams []redis.XStream
}

// callRead runs read.lua for a consumer: count entries at most per stream,
// the redelivery stream first; heldRedo and heldReady are the entries of
// each it holds (acked, not yet acknowledged in Redis). paused is the
// group's pause flag when it shares the partition's slot, else "".
func callRead(ctx context.Context, c redis.Scripter, sh shard, paused, group, consumer string, count, heldRedo, heldReady int) (readReply, error) {
	keys := []string{sh.redelivery(group), sh.stream(), sh.bell(), sh.meta(group)}
	if paused != "" {
		keys = append(keys, paused)
	}
	res, err := readArmScript.Run(ctx, c, keys, group, consumer, count, heldRedo, heldReady).Slice()
	if err == nil {
		err = replyShort("read", len(res), 2)
	}
	if err != nil {
		return readReply{}, err
	}
	status, _ := res[0].(int64)
	vis, _ := res[1].(int64)
	r := readReply{status: readStatus(status), vis: time.Duration(vis) * time.Millisecond}
	if r.status != readGot && r.status != readAll {
		return r, nil
	}
	if err := replyShort("read", len(res), 3); err != nil {
		return readReply{}, err
	}
	if r.streams, err = xStreams(res[2]); err != nil {
		return readReply{}, fmt.Errorf("read.lua: %w", err)
	}
	return r, nil
}

// xStreams decodes an XREADGROUP reply that came through a script: a list
// of {stream, {{id, {field, value, ...}}, ...}}.
func xStreams(v any) ([]redis.XStream, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("XREADGROUP reply is %T, not a list", v)
	}
	streams := make([]redis.XStream, 0, len(list))
	for _, s := range list {
		pair, ok := s.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("XREADGROUP stream is %v, not {name, entries}", s)
		}
		name, _ := pair[0].(string)
		entries, _ := pair[1].([]any)
		xs := redis.XStream{Stream: name, Messages: make([]redis.XMessage, 0, len(entries))}
		for _, e := range entries {
			ev, ok := e.([]any)
			if !ok || len(ev) != 2 {
				return nil, fmt.Errorf("XREADGROUP entry is %v, not {id, fields}", e)
			}
			id, _ := ev[0].(string)
			m := redis.XMessage{ID: id}
			if fv, ok := ev[1].([]any); ok {
				m.Values = make(map[string]any, len(fv)/2)
				for i := 0; i+1 < len(fv); i += 2 {
					k, _ := fv[i].(string)
					m.Values[k] = fv[i+1]
				}
			}
			xs.Messages = append(xs.Messages, m)
		}
		streams = append(streams, xs)
	}
	return streams, nil
}
