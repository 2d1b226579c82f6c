package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Locating one message (Inspector.Locate) in the structures that hold no
// index by UUID or business key: the ready and redelivery streams (entry
// IDs are times), the retry sets (members are "<attempt>:<entry>", see
// lib.lua's requeue), the fair queues of grouped messages (fair.lua) and
// the dead-letter streams. Nothing here writes: each structure is read in
// pages of locateBatch up to a budget of entries, so a lookup costs a
// bounded amount of Redis work and transfer whatever the backlog, and the
// caller is told what the budget left unread. Waiting messages need no
// scan: find.lua and the far index find them by UUID or business key.

// Match reports whether an encoded message is the one looked for.
type Match func(body []byte) bool

// MatchUUID matches the message with this UUID, reading only the UUID of
// each body (storedUUID), not the rest: a scan decodes nothing.
func MatchUUID(uuid string) Match {
	return func(body []byte) bool {
		id, ok := storedUUID(body)
		return ok && id == uuid
	}
}

// locateBatch is how many entries one read of a locating scan returns:
// small enough that one reply stays a few hundred KB.
const locateBatch = 500

// Scanned is what a locating scan read of one structure.
type Scanned struct {
	// Read counts the entries read; Unread those the budget left unread
	// (0 when the structure was read whole).
	Read, Unread int64
}

func (s *Scanned) add(o Scanned) { s.Read += o.Read; s.Unread += o.Unread }

// ScanStream reads the stream key for entries whose field m matches: up
// to budget entries from its oldest and, when it holds more, up to budget
// from its newest, since a message that stalls is old (pending with a
// dead consumer, or at the head of a backlog) and one just queued is new.
// A stream longer than twice the budget has its middle unread.
func ScanStream(ctx context.Context, c redis.Cmdable, key string, match Match, budget int) ([]redis.XMessage, Scanned, error) {
	var (
		hits []redis.XMessage
		sc   Scanned
	)
	length, err := c.XLen(ctx, key).Result()
	if err != nil || length == 0 {
		return nil, sc, err
	}
	keep := func(ms []redis.XMessage) {
		for _, m := range ms {
			if b, ok := m.Values["m"].(string); ok && match([]byte(b)) {
				hits = append(hits, m)
			}
		}
		sc.Read += int64(len(ms))
	}
	first, oldest := "-", ""
	for sc.Read < int64(budget) {
		n := min(locateBatch, budget-int(sc.Read))
		ms, err := c.XRangeN(ctx, key, first, "+", int64(n)).Result()
		if err != nil {
			return nil, sc, err
		}
		keep(ms)
		if len(ms) < n {
			return hits, sc, nil // read whole
		}
		oldest = ms[len(ms)-1].ID
		first = "(" + oldest
	}
	// The newest entries, down to the last of the oldest read.
	last := "+"
	for read := 0; read < budget; {
		n := min(locateBatch, budget-read)
		ms, err := c.XRevRangeN(ctx, key, last, "("+oldest, int64(n)).Result()
		if err != nil {
			return nil, sc, err
		}
		keep(ms)
		if read += len(ms); len(ms) < n {
			return hits, sc, nil // met the oldest read
		}
		last = "(" + ms[len(ms)-1].ID
	}
	sc.Unread = max(length-sc.Read, 0)
	return hits, sc, nil
}

// EntryOf reads a ready or redelivery stream entry's fields.
func EntryOf(m redis.XMessage) StreamEntry { return entryOf(m) }

// DeadEntryOf reads a dead-letter stream entry's fields.
func DeadEntryOf(e redis.XMessage) DeadEntry {
	body, _ := e.Values["m"].(string)
	reason, _ := e.Values["r"].(string)
	d := DeadEntry{ID: e.ID, Attempts: int(parseCount(e.Values["a"])), Reason: reason, Body: []byte(body)}
	if ms, _, ok := strings.Cut(e.ID, "-"); ok {
		t, _ := strconv.ParseInt(ms, 10, 64)
		d.Time = time.UnixMilli(t)
	}
	return d
}

// LastDelivered reads, of each consumer group created on the stream key,
// the ID of the last entry it fetched: the entries after it are ready for
// the group, those up to it fetched (pending, or acknowledged).
func LastDelivered(ctx context.Context, c redis.Cmdable, key string) (map[string]string, error) {
	infos, err := c.XInfoGroups(ctx, key).Result()
	if err != nil && !isNoSuchKey(err) {
		return nil, err
	}
	out := make(map[string]string, len(infos))
	for _, in := range infos {
		out[in.Name] = in.LastDeliveredID
	}
	return out, nil
}

// After reports whether stream entry ID a comes after b.
func After(a, b string) bool { return compareIDs(a, b) > 0 }

// PendingOf reads the pending entry id of a group's stream (which, see
// StreamOf): who holds it, since when, how often Redis delivered it,
// whether a handler has it. ok is false when the entry is not pending
// (acknowledged, or never fetched).
func PendingOf(ctx context.Context, c redis.Cmdable, sh Shard, group, which, id string) (p PendingEntry, ok bool, err error) {
	ps, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: sh.StreamOf(group, which), Group: group, Start: id, End: id, Count: 1}).Result()
	if err != nil {
		if isNoSuchKey(err) || IsNoGroup(err) {
			return p, false, nil
		}
		return p, false, err
	}
	if len(ps) == 0 {
		return p, false, nil
	}
	p = PendingEntry{StreamEntry: StreamEntry{ID: id, Attempt: 1}, Consumer: ps[0].Consumer, Idle: ps[0].Idle, Deliveries: ps[0].RetryCount}
	report := c.Get(ctx, sh.handling(group, p.Consumer))
	if err := report.Err(); err != nil && err != redis.Nil {
		return p, false, err
	}
	p.handedOf(which, report)
	return p, true, nil
}

// ScanPending reads up to budget entries pending in a group's stream
// (which, see StreamOf), oldest first, for those whose body matches: the
// entries a consumer holds may sit anywhere in a long stream, so
// ScanStream's two ends may miss them, while a group's pending list is
// short (its consumers' batches).
func ScanPending(ctx context.Context, c redis.Cmdable, sh Shard, group, which string, match Match, budget int) ([]PendingEntry, Scanned, error) {
	var (
		hits  []PendingEntry
		sc    Scanned
		after string
	)
	for sc.Read < int64(budget) {
		n := min(locateBatch, budget-int(sc.Read))
		ps, err := PendingEntries(ctx, c, sh, group, which, after, n)
		if err != nil {
			return nil, sc, err
		}
		for _, p := range ps {
			if p.Body != nil && match(p.Body) {
				hits = append(hits, p)
			}
		}
		sc.Read += int64(len(ps))
		if len(ps) < n {
			return hits, sc, nil
		}
		after = ps[len(ps)-1].ID
	}
	// How many more are pending: XPENDING's summary form counts them.
	sum, err := c.XPending(ctx, sh.StreamOf(group, which), group).Result()
	if err == nil {
		sc.Unread = max(sum.Count-sc.Read, 0)
	}
	return hits, sc, nil
}

// ScanRetry reads up to budget messages of a group's retry set (its
// bodies hash, with HSCAN) for those whose body matches, with their due
// times. A member due meanwhile may be missed: it is then in the
// redelivery stream or the group's fair queue.
func ScanRetry(ctx context.Context, c redis.Cmdable, sh Shard, group string, match Match, budget int) ([]RetryEntry, Scanned, error) {
	var (
		members []string
		bodies  [][]byte
		sc      Scanned
	)
	cursor := uint64(0)
	for {
		kv, next, err := c.HScan(ctx, sh.retryBodies(group), cursor, "", locateBatch).Result()
		if err != nil {
			return nil, sc, err
		}
		for k := 0; k+1 < len(kv); k += 2 {
			if match([]byte(kv[k+1])) {
				members, bodies = append(members, kv[k]), append(bodies, []byte(kv[k+1]))
			}
		}
		sc.Read += int64(len(kv) / 2)
		if cursor = next; cursor == 0 {
			break
		}
		if sc.Read >= int64(budget) {
			n, err := c.HLen(ctx, sh.retryBodies(group)).Result()
			if err != nil {
				return nil, sc, err
			}
			sc.Unread = max(n-sc.Read, 0)
			break
		}
	}
	var out []RetryEntry
	for k, m := range members {
		score, err := c.ZScore(ctx, sh.Retry(group), m).Result()
		if err == redis.Nil {
			continue // fell due meanwhile
		}
		if err != nil {
			return nil, sc, err
		}
		r := RetryEntry{Member: m, Due: DueOf(score), Attempt: 1, Body: bodies[k], Cursor: RetryCursor{int64(score), m}}
		if a, _, ok := strings.Cut(m, ":"); ok {
			if n, err := strconv.Atoi(a); err == nil {
				r.Attempt = n
			}
		}
		out = append(out, r)
	}
	return out, sc, nil
}

// FairEntry is a grouped message queued in a consumer group's fair queue
// (fair.lua), not yet picked into its redelivery stream.
type FairEntry struct {
	// Group is the message's group (SetGroup); for the keep-last-if-active
	// business key policy, the business key.
	Group string
	// Attempt is the attempt it will be delivered as.
	Attempt int
	Body    []byte
	// High is true in the group's high-priority queue.
	High bool
}

// ScanFair reads up to budget fields of a consumer group's fair queue hash
// (with HSCAN) for queued messages whose body matches. Queued messages
// are the fields "<group>\0<i>" and "<group>\0p<i>", valued by the
// attempt (8 hex digits) and the encoded message; the others are the
// groups' states.
func ScanFair(ctx context.Context, c redis.Cmdable, sh Shard, group string, match Match, budget int) ([]FairEntry, Scanned, error) {
	var (
		out []FairEntry
		sc  Scanned
	)
	cursor := uint64(0)
	for {
		kv, next, err := c.HScan(ctx, sh.Fair(group), cursor, "", locateBatch).Result()
		if err != nil {
			return nil, sc, err
		}
		for k := 0; k+1 < len(kv); k += 2 {
			g, pos, queued := strings.Cut(kv[k], "\x00")
			v := kv[k+1]
			if !queued || g == "" || len(v) < 8 {
				continue // a group's state, or the count "\0n"
			}
			sc.Read++
			if !match([]byte(v[8:])) {
				continue
			}
			a, _ := strconv.ParseInt(v[:8], 16, 64)
			g = strings.TrimPrefix(g, "\x01") // keep-last-if-active: the business key
			out = append(out, FairEntry{Group: g, Attempt: int(max(a, 1)), Body: []byte(v[8:]), High: strings.HasPrefix(pos, "p")})
		}
		if cursor = next; cursor == 0 {
			return out, sc, nil
		}
		if sc.Read >= int64(budget) {
			n, err := c.HGet(ctx, sh.Fair(group), fairQueued).Int64()
			if err != nil && err != redis.Nil {
				return nil, sc, err
			}
			sc.Unread = max(n-sc.Read, 0)
			return out, sc, nil
		}
	}
}

// Orphan reads the grouped message uuid if it fell due while the topic had
// no consumer group (gorphan): its due score and body; found false if not.
func Orphan(ctx context.Context, c redis.Cmdable, sh Shard, uuid string) (score float64, body []byte, found bool, err error) {
	pipe := c.Pipeline()
	s := pipe.ZScore(ctx, sh.orphans(), uuid)
	b := pipe.HGet(ctx, sh.Bodies(), uuid)
	if err := execRead(ctx, pipe); err != nil {
		return 0, nil, false, err
	}
	if s.Err() != nil || b.Err() != nil {
		return 0, nil, false, nil
	}
	return s.Val(), []byte(b.Val()), true, nil
}
