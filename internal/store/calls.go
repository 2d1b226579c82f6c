package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// One function per Lua script (see the key table in keys.go and the script
// headers): it builds the script's KEYS in the order of its header, passes
// typed arguments as its ARGV and decodes the reply into a struct, so the
// key lists and reply positions live here only. This file: publishing and
// the scheduler's scripts; consume.go: the subscriptions' (groups, reads,
// acks, nacks, leases, ownership, flow control); calls_messages.go: the
// actions on stored messages (cancel, reschedule, requeue, find);
// schedules.go: the recurring schedules'.

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
	Statuses []any // one per call, in call order: see Status
	Lost     bool  // the partition's registration marker was gone
	// GroupsStale: the consumer groups given were not the topic's, so
	// immediate grouped messages waited for the scheduler: read them again
	// (Groups) for the next calls.
	GroupsStale bool
}

// Refusal is why publish.lua refused a whole call.
type Refusal struct {
	// Kind is RefusedKey, RefusedFull, or the script's unexpected reply as
	// text.
	Kind string
	// RefusedKey: the business key, and the UUID of the waiting message
	// holding it.
	Key, Holder string
	// RefusedFull: the bound reached ("waiting" or "ready"), the count
	// stored, and how many the call would have added.
	Which        string
	Count, Added int64
}

// The kinds of Refusal.
const (
	RefusedKey  = "key"
	RefusedFull = "full"
)

// Status decodes the status of call i: dup is the UUID of a message already
// waiting with another body; refusal a business key or capacity refusal;
// pulls the UUIDs of messages of the call waiting in the far tier, to move
// to the waiting set before sending the call again, and pullKeys the
// business keys whose holders may wait in the far tier's format 3, to find
// (FarKeyLookup) and move likewise; all empty: stored.
func (r PublishReply) Status(i int) (dup string, refusal *Refusal, pulls, pullKeys []string) {
	dup, _ = r.Statuses[i].(string)
	table, _ := r.Statuses[i].([]any)
	if len(table) == 0 {
		return dup, nil, nil, nil
	}
	str := func(i int) string {
		if i < len(table) {
			s, _ := table[i].(string)
			return s
		}
		return ""
	}
	num := func(i int) int64 {
		if i < len(table) {
			n, _ := table[i].(int64)
			return n
		}
		return 0
	}
	switch str(0) {
	case "pull":
		for i := 1; i < len(table); i++ {
			if id := str(i); id != "" {
				pulls = append(pulls, id)
			}
		}
		return "", nil, pulls, nil
	case "pullkey":
		for i := 1; i < len(table); i++ {
			pullKeys = append(pullKeys, str(i))
		}
		return "", nil, nil, pullKeys
	case RefusedKey:
		return "", &Refusal{Kind: RefusedKey, Key: str(1), Holder: str(2)}, nil, nil
	case RefusedFull:
		return "", &Refusal{Kind: RefusedFull, Which: str(1), Count: num(2), Added: num(3)}, nil, nil
	}
	return "", &Refusal{Kind: fmt.Sprint(table)}, nil, nil
}

// PubMessage is one message of a Publish call, as publish.lua takes it
// (its per-message ARGV: see the script's header).
type PubMessage struct {
	UUID  string
	Delay int64  // ms from now by Redis's clock; <= 0: due now
	Body  []byte // the encoded message (Encode)
	// Key is the business key argument: "" for none, else the policy's
	// letter and the key.
	Key   string
	Prio  bool   // high priority
	Group string // "" for none
	Far   FarArg // where it may wait in the far tier
}

// plain reports a message with no business key, priority or group.
func (m *PubMessage) plain() bool { return m.Key == "" && !m.Prio && m.Group == "" }

// PubArgs is what publish.lua takes of one Publish call to a partition.
type PubArgs struct {
	Msgs []PubMessage
}

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
	// Shapes keeps the shapes of the partitions' format 3 indexes as the
	// runs learn them (nil: none kept, each run learns it again).
	Shapes *FarShapes
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
		msgs += len(a.Msgs)
		for i := 0; (now || near) && i < len(a.Msgs); i++ {
			m := &a.Msgs[i]
			now = now && m.plain() && m.Delay <= 0
			near = near && m.plain() && m.Delay > 0 && !m.Far.Lookup && m.Far.Bucket < 0
		}
	}
	switch {
	case now:
		return appendNow(ctx, c, sh, msgs, batch)
	case near:
		return delayedNear(ctx, c, sh, msgs, batch)
	}
	// A run that finds the format 3 index's shape, or the far filter's
	// size, other than the caller knew it does nothing and says so: it
	// runs again with them, at most when the index is made, at each
	// doubling of its shards and after each rebuild of the filter.
	shape := o.Shapes.load(sh)
	for range 3 {
		res, err := publishGeneral(ctx, c, sh, o, batch, msgs, shape)
		if err != nil {
			return PublishReply{}, err
		}
		if len(res) != 4 || res[0] != any(int64(-1)) {
			after := shape
			if n := len(res); n == len(batch)+5 {
				// the index's shape after the run (the caller gave an L)
				if l, _ := res[n-2].(int64); l > 0 {
					sp, _ := res[n-1].(int64)
					after.L, after.S, after.Set = uint64(l), uint64(sp), true
				}
				res = res[:n-2]
			}
			if n := len(res); n == len(batch)+3 {
				bits, _ := res[n-1].(int64)
				after.FilterBits = uint64(bits)
				res = res[:n-1]
			}
			if after != shape {
				o.Shapes.store(sh, after)
			}
			return publishReply(res, len(batch))
		}
		l, _ := res[1].(int64)
		sp, _ := res[2].(int64)
		bits, _ := res[3].(int64)
		shape = fpShape{L: uint64(l), S: uint64(sp), Set: l > 0, FilterBits: uint64(bits)}
		o.Shapes.store(sh, shape)
	}
	return PublishReply{}, fmt.Errorf("the far index or filter of %s kept changing its shape while a publish ran", sh)
}

// publishGeneral runs publish.lua once, for the format 3 index of shape
// shape (none: not Set).
func publishGeneral[C PubCall](ctx context.Context, c redis.Scripter, sh Shard, o PublishOpts, batch []C, msgs int, shape fpShape) ([]any, error) {
	maxWaiting, maxReady, groups := o.MaxWaiting, o.MaxReady, o.Groups
	keys := make([]string, 0, 16+6*len(groups))
	keys = append(keys, sh.Waiting(), sh.Bodies(), sh.Stream(), sh.seq(), sh.Bkeys(), sh.BkeyOf(), sh.Prio(), sh.reg(), sh.dormant(), sh.FarZ(), sh.FarMeta(), sh.Bell(), sh.GroupOf(), sh.Groups(),
		sh.farFilter(), sh.farFilterNext())
	for _, g := range groups {
		keys = append(keys, sh.Meta(g))
		keys = append(keys, sh.fairKeys(g)...)
		keys = append(keys, sh.Redelivery(g))
	}
	indexOf := keyIndexer(&keys)
	// w3: messages that may go to the far tier in format 3, which the run
	// indexes (and so needs the shape for, a default one before any); fp:
	// the far filter's selectors are fpSel's, as a process writing format
	// 3 has them (farfilter.go)
	// (a message with a business key makes two index entries); keyed:
	// messages with a business key
	w3, fp, keyed := 0, false, 0
	for _, pc := range batch {
		for _, m := range pc.PublishArgs().Msgs {
			fp = fp || m.Far.Format3
			if m.Key != "" {
				keyed++
			}
			if m.Far.Format3 && m.Far.Bucket >= 0 {
				w3++
				if m.Key != "" {
					w3++
				}
			}
		}
	}
	if w3 > 0 && !shape.Set {
		shape.L, shape.S = fpMinLevel, 0
	}
	stride, fpL := 13, uint64(0)
	if shape.Set || w3 > 0 {
		stride, fpL = 15, shape.L
	}
	splits := fpSplitsFor(w3)
	args := make([]any, 0, 14+len(groups)+len(batch)+2*splits+stride*msgs+2*keyed)
	args = append(args, sh.Wake(), maxWaiting, maxReady, len(batch),
		FarMargin.Milliseconds(), FarWidth.Milliseconds(), FarSlack().Milliseconds(), len(groups))
	for _, g := range groups {
		args = append(args, g)
	}
	for _, pc := range batch {
		args = append(args, len(pc.PublishArgs().Msgs))
	}
	args = append(args, filterMode(fp), shape.FilterBits, fpL)
	if stride == 15 {
		side, keySide := 0, 0
		if w3 > 0 {
			side = indexOf(sh.fpSide())
		}
		if keyed > 0 {
			keySide = indexOf(sh.fpKeySide())
		}
		args = append(args, min(w3, 1), shape.S, splits, side, keySide)
		for _, pair := range shape.splits(splits) {
			args = append(args, indexOf(sh.fpIndex(pair[0])), indexOf(sh.fpIndex(pair[1])))
		}
	}
	for _, pc := range batch {
		call := pc.PublishArgs()
		for i := range call.Msgs {
			m := &call.Msgs[i]
			f := m.Far
			prio := "0"
			if m.Prio {
				prio = "1"
			}
			args = append(args, m.UUID, m.Delay, m.Body, m.Key, prio)
			shardIdx, bucketIdx, sel, h := 0, 0, f.Filter, uint64(0)
			if f.Lookup {
				shardIdx = indexOf(sh.farIndex(f.Index))
				if fp || stride == 15 {
					h = fpHash(f.Field)
				}
				if fp {
					sel = fpSel(h)
				}
			}
			if f.Bucket >= 0 {
				bucketIdx = indexOf(sh.FarList(f.Bucket))
			}
			if f.Lookup && f.Bucket < 0 && shape.FilterBits > 0 {
				// only looked up: its bit, which the run checks the
				// filter's size for
				sel = uint32(uint64(sel) % shape.FilterBits)
			}
			args = append(args, shardIdx, f.Field, bucketIdx, f.Bucket, f.Start, f.UnpackAt, m.Group, sel)
			if stride == 13 {
				continue
			}
			far3 := f.Format3 && f.Bucket >= 0
			if !f.Lookup || f.notFar && !far3 {
				args = append(args, "", "")
				continue
			}
			a, b, low := shape.args(sh, h)
			look := int64(low)
			if f.notFar {
				look = -look - 1 // indexed if it goes far, not looked up
			}
			ai, bi := indexOf(a), 0
			if !far3 {
				// only looked up: the shard the caller's S picks (a key
				// fewer; a run that finds S moved past it answers a pull)
				if low < shape.S {
					ai = indexOf(b)
				}
			} else {
				bi = indexOf(b)
			}
			loc := fpShardArg(look, ai, bi)
			if far3 {
				at, _, _ := farUntilAt(m.Body)
				loc = binary.BigEndian.AppendUint16(loc, uint16(int16(at)))
			}
			args = append(args, fpField(h), string(loc))
		}
	}
	if stride == 15 && keyed > 0 {
		// the business keys' fingerprints and shards, in message order
		for _, pc := range batch {
			for _, m := range pc.PublishArgs().Msgs {
				if m.Key == "" {
					continue
				}
				h := fpKeyHash(m.Key[1:])
				a, b, low := shape.args(sh, h)
				arg := append(fpShardArg(int64(low), indexOf(a), indexOf(b)), m.Far.keyOther...)
				args = append(args, fpField(h), string(arg))
			}
		}
	}
	return publishScript.Run(ctx, c, keys, args...).Slice()
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

// appendNow runs append.lua for the msgs messages of batch (see Publish).
func appendNow[C PubCall](ctx context.Context, c redis.Scripter, sh Shard, msgs int, batch []C) (PublishReply, error) {
	args := make([]any, 0, 1+msgs)
	args = append(args, sh.Wake())
	for _, call := range batch {
		for _, m := range call.PublishArgs().Msgs {
			args = append(args, m.Body)
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
		args = append(args, len(call.PublishArgs().Msgs))
	}
	for _, call := range batch {
		for _, m := range call.PublishArgs().Msgs {
			args = append(args, m.UUID, m.Delay, m.Body)
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

// PromoteArgs is one scheduler tick of a partition.
type PromoteArgs struct {
	Groups  []string      // the topic's consumer groups, as the scheduler lists them
	Batch   int           // most entries added per call (see promote.lua's ARGV[1])
	Owner   string        // the scheduler, as the lease's holder
	Lease   time.Duration // the lease's time
	MayTake bool          // take the lease if it is free
	Extend  bool          // renew the lease the caller holds
	// Note is what the bell is rung with when the call adds entries
	// (promote.lua's ARGV[6]; "" by default): the subscription whose read
	// runs the call (ReadArgs.Promote) is not woken by its own ring.
	Note string
	// Keys are promote.lua's keys for Groups (PromoteKeys), kept by a
	// caller that ticks often; nil: made at each call.
	Keys []string
}

// PromoteKeys returns promote.lua's keys for a partition with consumer
// groups groups. A scheduler's loop keeps them while its group list does
// not change: made at each tick they were, with the tick's arguments, an
// eighth of the bytes a process allocated per delayed message over 1,000
// topics (scenario 13), and the garbage collections they cause delay the
// ticks of a process with many topics.
func PromoteKeys(sh Shard, groups []string) []string {
	keys := make([]string, 0, 14+8*len(groups))
	keys = append(keys, sh.Lease(), sh.Groups(), sh.Waiting(), sh.Bodies(), sh.Stream(), sh.Bkeys(), sh.BkeyOf(), sh.Prio(), sh.Fanout(), sh.Bell(), sh.GroupOf(), sh.orphans())
	for _, g := range groups {
		keys = append(keys, sh.Retry(g), sh.retryBodies(g), sh.Redelivery(g), sh.Meta(g))
		keys = append(keys, sh.fairKeys(g)...)
	}
	return slices.Clip(append(keys, sh.Far(), sh.FarZ()))
}

// Promote runs promote.lua on a partition.
func Promote(ctx context.Context, c redis.Scripter, sh Shard, a PromoteArgs) (PromoteReply, error) {
	keys, args := a.script(sh)
	return promoteReply(promoteScript.Run(ctx, c, keys, args...))
}

// script is promote.lua's keys and arguments for a.
func (a PromoteArgs) script(sh Shard) (keys []string, args []any) {
	take, ext := "1", "0"
	if !a.MayTake {
		take = "0"
	}
	if a.Extend {
		ext = "1"
	}
	keys = a.Keys
	if keys == nil {
		keys = PromoteKeys(sh, a.Groups)
	}
	args = []any{a.Batch, a.Owner, a.Lease.Milliseconds(), take, ext}
	if a.Note != "" {
		args = append(args, a.Note)
	}
	return keys, args
}

// promoteReply parses promote.lua's reply.
func promoteReply(cmd *redis.Cmd) (PromoteReply, error) {
	res, err := cmd.Int64Slice()
	if err == nil {
		err = replyShort("promote", len(res), 7)
	}
	if err != nil {
		return PromoteReply{}, err
	}
	return PromoteReply{Moved: res[0], Wait: res[1], Missing: res[2], Groups: int(res[3]), Held: res[4] == 1, Far: res[5], FarFormat: int(res[6])}, nil
}

// keyIndexer gives the index in a script's KEYS (from 1, as Lua counts) of
// a key that per-item arguments name, appending it to keys the first time.
func keyIndexer(keys *[]string) func(key string) int {
	at := map[string]int{}
	return func(key string) int {
		i, ok := at[key]
		if !ok {
			*keys = append(*keys, key)
			i = len(*keys)
			at[key] = i
		}
		return i
	}
}

// UnpackReply is what unpack.lua returns.
type UnpackReply struct {
	Moved  int64
	Parked int64 // elements it could not read, moved to the park list (FarPark)
	More   bool  // the bucket has more elements
	Stale  bool  // nothing done: see unpack.lua
}

// Unpack runs unpack.lua for the head of far bucket b of format v, as
// FarHead read it.
func Unpack(ctx context.Context, c redis.Scripter, sh Shard, owner string, v int, b int64, head FarHeadRead) (UnpackReply, error) {
	keys := []string{sh.Lease(), sh.farZset(v), sh.FarMeta(), sh.farBucketKey(v, b), sh.Waiting(), sh.Bodies(), sh.Bkeys(), sh.BkeyOf(), sh.Prio(), sh.farFilter(), sh.FarPark(), sh.fpSide(), sh.fpKeySide()}
	key := keyIndexer(&keys)
	start := farBucketStart(b).UnixMilli()
	// Three arguments an element, seven when one is of format 3 (its index
	// shard is one of two: see far3.go; and its business key's entry).
	stride := 3
	for _, e := range head.Els {
		if v == farFormat2 && e != "" && e[0] == farFormat3 {
			stride = 7
			break
		}
	}
	args := make([]any, 0, 7+stride*len(head.Els))
	args = append(args, owner, b, head.Popped, len(head.Els), v, start, 0)
	if stride == 7 {
		args[6] = head.shape.L
	}
	for _, e := range head.Els {
		id, ok := "", false
		m, read, _ := decodeFar(v, start, e)
		if read {
			id, ok = storedUUID([]byte(m.Body))
		}
		field := farField(id)
		switch {
		case !ok:
			args = append(args, "", "", 0)
		case e[0] == farFormat3 && v == farFormat2:
			h := fpHash(field)
			a, bKey, low := head.shape.args(sh, h)
			args = append(args, fpField(h)+field, id, key(a), key(bKey), low)
			if m.Key == "" {
				args = append(args, "", "")
				continue
			}
			k := head.shape.keyAt(sh, m.Key)
			args = append(args, k.fp, string(fpShardArg(int64(k.low), key(k.a), key(k.b))))
			continue
		default:
			args = append(args, field, id, key(sh.farIndex(farShard(field))))
		}
		if stride == 7 {
			args = append(args, 0, 0, "", "")
		}
	}
	res, err := unpackScript.Run(ctx, c, keys, args...).Int64Slice()
	if err == nil {
		err = replyShort("unpack", len(res), 3)
	}
	if err != nil {
		return UnpackReply{}, err
	}
	return UnpackReply{Moved: max(res[0], 0), Parked: res[1], More: res[2] == 1, Stale: res[0] < 0}, nil
}

// UnparkBatch is the most parked elements one unpark.lua call reads.
const UnparkBatch = 128

// Unpark moves into the waiting set the far elements of format 3 that a
// process of release 0.2.0 parked in sh (unpark.lua), when owner holds the
// partition's scheduling lease; parked is the park list's length, as
// trim.lua told it. It returns how many it moved; stale when the lease or
// the index's shape changed meanwhile (nothing done). An entry no release
// here reads either stays parked: a list longer than a batch is read from
// a random place, so that such entries at its head hold up none behind
// them.
func Unpark(ctx context.Context, c Cmds, sh Shard, owner string, parked int64) (moved int64, stale bool, err error) {
	from := int64(0)
	if parked > UnparkBatch {
		from = rand.Int64N(parked - UnparkBatch + 1)
	}
	var m *redis.SliceCmd
	var e *redis.StringSliceCmd
	pipeFailed(c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		m = pipe.HMGet(ctx, sh.FarMeta(), fpShapeFields[0], fpShapeFields[1])
		e = pipe.LRange(ctx, sh.FarPark(), from, from+UnparkBatch-1)
		return nil
	}))
	if err := e.Err(); err != nil {
		return 0, false, err
	}
	vals, err := m.Result()
	if err != nil {
		return 0, false, err
	}
	shape, err := fpShapeOf(vals)
	if err != nil {
		return 0, false, err
	}
	keys := []string{sh.Lease(), sh.FarMeta(), sh.FarPark(), sh.Waiting(), sh.Bodies(), sh.Bkeys(), sh.BkeyOf(), sh.Prio(), sh.farFilter(), sh.fpSide(), sh.fpKeySide()}
	key := keyIndexer(&keys)
	args := make([]any, 0, 3+7*len(e.Val()))
	args = append(args, owner, shape.L, 0)
	n := 0
	for _, entry := range e.Val() {
		id, ok := "", false
		var el farElem
		if v, start, elem, parsed := parkedEntry(entry); parsed && v == farFormat2 && elem[0] == farFormat3 {
			if el, ok, _ = decodeFar(v, start, elem); ok {
				id, ok = storedUUID([]byte(el.Body))
			}
		}
		if !ok {
			continue // left parked: unpark.lua could not read it either
		}
		field := farField(id)
		h := fpHash(field)
		a, b, low := shape.args(sh, h)
		var keyArg string
		if el.Key != "" {
			k := shape.keyAt(sh, el.Key)
			keyArg = k.fp + string(fpShardArg(int64(k.low), key(k.a), key(k.b)))
		}
		args = append(args, entry, fpField(h)+field, id, key(a), key(b), low, keyArg)
		n++
	}
	if n == 0 {
		return 0, false, nil
	}
	args[2] = n
	res, err := unparkScript.Run(ctx, c, keys, args...).Int64Slice()
	if err == nil {
		err = replyShort("unpark", len(res), 1)
	}
	if err != nil {
		return 0, false, err
	}
	return max(res[0], 0), res[0] < 0, nil
}

// parkedEntry splits an entry of the park list (unpack.lua):
// "<format>:<bucket>:<first due ms>:<element>".
func parkedEntry(entry string) (v int, start int64, elem string, ok bool) {
	f := strings.SplitN(entry, ":", 4)
	if len(f) != 4 || f[3] == "" {
		return 0, 0, "", false
	}
	v, err1 := strconv.Atoi(f[0])
	_, err2 := strconv.ParseInt(f[1], 10, 64)
	start, err3 := strconv.ParseInt(f[2], 10, 64)
	return v, start, f[3], err1 == nil && err2 == nil && err3 == nil
}

// farPullReply is what farpull.lua returns.
type farPullReply struct {
	Moved bool // the message was there (and moved, unless only read)
	Body  string
	Score float64 // due ms × 1024 + sequence
}

// farPullArgs are the keys and arguments of farpull.lua for the far
// message at loc in bucket b of format v, found in index (a far index
// shard; a format 3 index shard or side table: at.mode) under field.
func farPullArgs(sh Shard, v int, b int64, at farAt, uuid string, peek bool) ([]string, []any) {
	flag := "0"
	if peek || at.byKey != "" {
		flag = "1"
	}
	keys := []string{sh.farZset(v), sh.FarMeta(), sh.farBucketKey(v, b), at.index, sh.Waiting(), sh.Bodies(), sh.Bkeys(), sh.BkeyOf(), sh.Prio(), sh.farFilter(), sh.fpKeySide()}
	args := []any{at.field, at.loc, uuid, b, sh.Wake(), flag, v, farBucketStart(b).UnixMilli(), at.mode, at.full}
	k := at.key
	if k.fp == "" {
		keys = append(keys, sh.fpKeySide(), sh.fpKeySide()) // unread: every key is declared
	} else {
		keys = append(keys, k.a, k.b)
	}
	return keys, append(args, k.fp, k.low, k.l, at.byKey, k.key)
}

// farAt is where an index says a far message is: the index key and field
// of the entry, its value (loc), which index it is (farpull.lua's ARGV[9])
// and the message's far field; with byKey, the business key whose holder
// it is to be (read only); key: where the format 3 index marks the
// message's business key, when it has one (farpull.lua asks).
type farAt struct {
	index, field, loc, mode, full string
	byKey                         string
	key                           fpKeyAt
}

// fpKeyAt is where the format 3 index of shape L marks a business key:
// its fingerprint fp in shard a (h mod 2^L) or b (h mod 2^(L+1)), which
// farpull.lua picks by low (h mod 2^L).
type fpKeyAt struct {
	key, fp, a, b string
	low, l        uint64
}

// keyAt is where the index of shape p marks business key key.
func (p fpShape) keyAt(sh Shard, key string) fpKeyAt {
	h := fpKeyHash(key)
	a, b, low := p.args(sh, h)
	return fpKeyAt{key: key, fp: fpField(h), a: a, b: b, low: low, l: p.L}
}

// callFarPull runs farpull.lua for the far message at in bucket b of
// format v. other reports a format 3 shard entry that is another
// message's of the same fingerprint.
//
// A message of format 3 with a business key makes the script ask where
// the index marks the key (it cannot know the index's shape before it
// reads the element): the call runs again with it.
func callFarPull(ctx context.Context, c Cmds, sh Shard, v int, b int64, at farAt, uuid string, peek bool) (r farPullReply, other bool, err error) {
	var res []any
	for range 3 {
		keys, args := farPullArgs(sh, v, b, at, uuid, peek)
		if res, err = farPullScript.Run(ctx, c, keys, args...).Slice(); err != nil {
			return farPullReply{}, false, err
		}
		if n, _ := res[0].(int64); n != 3 || len(res) < 2 {
			break
		}
		if err := replyShort("farpull", len(res), 4); err != nil {
			return farPullReply{}, false, err
		}
		key, _ := res[1].(string)
		shape, err := fpShapeOf(res[2:])
		if err != nil {
			return farPullReply{}, false, err
		}
		at.key = shape.keyAt(sh, key)
	}
	if n, _ := res[0].(int64); n != 1 {
		return farPullReply{}, n == 2, nil
	}
	if err := replyShort("farpull", len(res), 3); err != nil {
		return farPullReply{}, false, err
	}
	body, _ := res[1].(string)
	score, _ := res[2].(int64)
	return farPullReply{Moved: true, Body: body, Score: float64(score)}, false, nil
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
	// Oldest is the longest idle time of the entries the call looked at
	// and left pending (0: none): none of them runs out before Vis-Oldest.
	Oldest time.Duration
	Next   ReclaimPos
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
		err = replyShort("reclaim", len(res), 9)
	}
	if err != nil {
		return ReclaimReply{}, err
	}
	var n [6]int64
	for i := range n {
		n[i], _ = res[i].(int64)
	}
	oldest, _ := res[8].(int64)
	r := ReclaimReply{Requeued: n[0], Buried: n[1], Evicted: n[2], Missing: n[3], Removed: n[4],
		Vis: time.Duration(n[5]) * time.Millisecond, Oldest: time.Duration(oldest) * time.Millisecond}
	r.Next.Stream, _ = res[6].(int64)
	r.Next.Last, _ = res[7].(string)
	return r, nil
}

// TrimReply is what trim.lua returns.
type TrimReply struct {
	Removed     int64 // entries removed
	ByRetention bool  // removed by the retention: no group reads the stream
	// FarFilter: the partition's far filter needs a rebuild (RebuildFarFilter).
	FarFilter bool
	// Parked: far elements an older release parked (Unpark).
	Parked int64
}

// Trim runs trim.lua on a partition's ready stream, for a scheduler writing
// storage level lvl (the far filter's selectors it rebuilds at).
func Trim(ctx context.Context, c redis.Scripter, sh Shard, retention time.Duration, lvl int) (TrimReply, error) {
	res, err := trimScript.Run(ctx, c, []string{sh.Stream(), sh.FarMeta(), sh.FarPark()}, retention.Milliseconds(),
		farFilterPerBlock, farFilterMinBlocks, farFilterMaxBlocks, FarFilterStale.Milliseconds(), filterMode(WritesFar3(lvl))).Int64Slice()
	if err == nil {
		err = replyShort("trim", len(res), 4)
	}
	if err != nil {
		return TrimReply{}, err
	}
	return TrimReply{Removed: res[0], ByRetention: res[1] == 1, FarFilter: res[2] == 1, Parked: res[3]}, nil
}

// Idle runs idle.lua: whether the partition holds nothing to schedule
// for the consumer groups listed, marking it dormant if so.
func Idle(ctx context.Context, c redis.Scripter, sh Shard, groups []string, retention time.Duration) (bool, error) {
	k := make([]string, 0, 7+2*len(groups))
	k = append(k, sh.Waiting(), sh.Stream(), sh.dormant(), sh.Fanout(), sh.Far(), sh.FarZ(), sh.FarPark())
	for _, g := range groups {
		k = append(k, sh.Retry(g), sh.Redelivery(g))
	}
	n, err := idleScript.Run(ctx, c, k, retention.Milliseconds()).Int()
	return n == 1, err
}

// RequeueBatch is the most dead letters one requeue.lua call moves.
const RequeueBatch = 256

// ParkedTick is the next tick of a paused schedule: the end of year 9999,
// which no tick loop finds due.
const ParkedTick = 253402300799000

// OverlapScan bounds what one recurringoverlap.lua call reads: stream entries
// per stream (and retry bodies per group), and retry members named per
// group. Beyond them, a call skips the tick as undecided ("unknown") and the
// next tick's call reads on.
var OverlapScan = struct{ Entries, Members int }{256, 4096}
