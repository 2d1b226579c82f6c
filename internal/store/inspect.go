package store

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The reads of the Inspector: counts, listings and lookups that never
// change a message (those that do are scripts).

// GroupCount is what PartitionStats counts of one consumer group.
type GroupCount struct {
	Group string
	// Ready is what the group has not fetched yet (-1: Redis cannot tell);
	// Pending what it fetched and has not acknowledged, in both streams.
	Ready, Pending, Consumers int64
	Retry, Dead               int64
	DeadTotal, DeadEvicted    int64
	// Grouped counts grouped messages due and queued in their groups (not
	// yet picked); Active the groups holding queued or in-flight messages
	// (or whose rate limiter has not caught up). See fair.lua.
	Grouped, Active int64
}

// PartitionCount is what PartitionStats counts of one partition.
type PartitionCount struct {
	Waiting, Stream int64 // waiting counts the far tier too
	// Orphans counts the grouped messages that fell due while the topic
	// had no consumer group (gorphan), counted in Waiting too.
	Orphans int64
	// Leased is whether a scheduler holds the partition's lease (the key
	// <shard>:lease, which expires when its holder stops ticking).
	Leased bool
	Groups []GroupCount
}

// PartitionStats counts the messages of one partition in two round trips.
func PartitionStats(ctx context.Context, c Cmds, sh Shard) (PartitionCount, error) {
	var st PartitionCount
	groups, err := Groups(ctx, c, sh)
	if err != nil {
		return st, err
	}
	pipe := c.Pipeline()
	waiting := pipe.ZCard(ctx, sh.Waiting())
	orphans := pipe.ZCard(ctx, sh.orphans())
	far := pipe.HMGet(ctx, sh.FarMeta(), "n")
	length := pipe.XLen(ctx, sh.Stream())
	infos := pipe.XInfoGroups(ctx, sh.Stream())
	lease := pipe.Exists(ctx, sh.Lease())
	type groupCmds struct {
		redo  *redis.XInfoGroupsCmd
		redoN *redis.IntCmd
		retry *redis.IntCmd
		dead  *redis.IntCmd
		meta  *redis.SliceCmd
		fq    *redis.IntCmd
		fqN   *redis.StringCmd
	}
	cmds := make([]groupCmds, len(groups))
	for n, g := range groups {
		cmds[n] = groupCmds{
			redo:  pipe.XInfoGroups(ctx, sh.Redelivery(g)),
			redoN: pipe.XLen(ctx, sh.Redelivery(g)),
			retry: pipe.ZCard(ctx, sh.Retry(g)),
			dead:  pipe.XLen(ctx, sh.Dead(g)),
			meta:  pipe.HMGet(ctx, sh.Meta(g), "dead_total", "dead_evicted"),
			fq:    pipe.HLen(ctx, sh.Fair(g)),
			fqN:   pipe.HGet(ctx, sh.Fair(g), fairQueued),
		}
	}
	// A stream not created yet answers XINFO with an error: counted as
	// empty; so is a missing field (HGET: redis.Nil).
	if _, err := pipe.Exec(ctx); err != nil && !isNoSuchKey(err) && !errors.Is(err, redis.Nil) {
		return st, err
	}
	st.Waiting, st.Stream, st.Leased = waiting.Val()+orphans.Val()+farCount(far), length.Val(), lease.Val() == 1
	st.Orphans = orphans.Val()
	for n, g := range groups {
		c := cmds[n]
		gs := GroupCount{Group: g, Retry: c.retry.Val(), Dead: c.dead.Val()}
		gs.Ready, gs.Pending, gs.Consumers = groupBacklog(infos.Val(), g, length.Val(), c.redo.Val(), c.redoN.Val())
		m := c.meta.Val()
		gs.DeadTotal, gs.DeadEvicted = parseCount(m[0]), parseCount(m[1])
		// fq holds a field per group and per queued message, and the count
		if n, err := c.fqN.Int64(); err == nil {
			gs.Grouped, gs.Active = n, c.fq.Val()-n-1
		} else {
			gs.Active = c.fq.Val()
		}
		st.Groups = append(st.Groups, gs)
	}
	return st, nil
}

// groupBacklog is what group has not fetched yet (ready; -1 when Redis
// cannot tell) and has fetched but not acknowledged (pending), from the
// XINFO GROUPS of the ready stream (infos, length entries) and of the
// group's redelivery stream (redo, redoLen entries), with the consumers
// of the ready stream.
func groupBacklog(infos []redis.XInfoGroup, group string, length int64, redo []redis.XInfoGroup, redoLen int64) (ready, pending, consumers int64) {
	created := false
	for _, in := range infos {
		if in.Name == group {
			ready, pending, consumers, created = in.Lag, in.Pending, in.Consumers, true
		}
	}
	if !created {
		ready = length // the group is registered but not created on the stream yet
	}
	for _, r := range redo {
		if r.Name != group {
			continue
		}
		pending += r.Pending
		if ready >= 0 {
			// Handled redelivery entries are deleted, so what is left is
			// either pending or not fetched yet.
			ready += redoLen - r.Pending
		}
	}
	return ready, pending, consumers
}

// farCount reads the far tier's message count from HMGET fmeta n.
func farCount(cmd *redis.SliceCmd) int64 {
	if v := cmd.Val(); len(v) == 1 {
		return parseCount(v[0])
	}
	return 0
}

// WaitingMember is a waiting message of a partition as WaitingHead reads
// it: Body is set for a message of the far tier, read with it.
type WaitingMember struct {
	ID    string
	Score float64 // see DueOf
	Shard Shard
	Body  *string
}

// WaitingHead returns the messages from from to end (exclusive) of a
// partition in due order, merging the waiting set with the far tier. Far
// buckets are read whole, in order, until they hold end messages, and one
// more: a message of a later bucket is due after all of those (publish.lua
// puts a message in the bucket of its due time, give or take FarSlack, a
// quarter of a bucket at most), so it cannot be among the first end.
func WaitingHead(ctx context.Context, c redis.Cmdable, sh Shard, from, end int) ([]WaitingMember, error) {
	zs, err := c.ZRangeWithScores(ctx, sh.Waiting(), 0, int64(end-1)).Result()
	if err != nil {
		return nil, err
	}
	out := make([]WaitingMember, 0, len(zs))
	for _, z := range zs {
		id, _ := z.Member.(string)
		out = append(out, WaitingMember{ID: id, Score: z.Score, Shard: sh})
	}
	// Once the buckets read hold end messages, one more is read: a message
	// may be due up to FarSlack outside its bucket (see publish.lua).
	far, extra, done := 0, 1, false
	for from := int64(0); !done; {
		refs, err := FarBuckets(ctx, c, sh, from, 100)
		if err != nil {
			return nil, err
		}
		for _, ref := range refs {
			v, n := farUnref(ref)
			els, err := c.LRange(ctx, sh.farBucketKey(v, n), 0, -1).Result()
			if err != nil {
				return nil, err
			}
			start := farBucketStart(n).UnixMilli()
			for _, e := range els {
				if m, ok := farMember(sh, v, start, e); ok {
					out = append(out, m)
					far++
				}
			}
			if far >= end {
				if extra == 0 {
					done = true
					break
				}
				extra--
			}
		}
		if len(refs) < 100 {
			break
		}
		from = refs[len(refs)-1] + 1
	}
	if far > 0 {
		slices.SortStableFunc(out, func(a, b WaitingMember) int { return cmp.Compare(a.Score, b.Score) })
	}
	return out[min(from, len(out)):min(end, len(out))], nil
}

// Bodies reads the encoded bodies of waiting messages: nil for one no
// longer waiting.
func Bodies(ctx context.Context, c Cmds, sh Shard, ids []string) ([]any, error) {
	return c.HMGet(ctx, sh.Bodies(), ids...).Result()
}

// DeadEntry is a dead letter as stored.
type DeadEntry struct {
	ID       string // the entry ID in the group's dead-letter stream
	Time     time.Time
	Attempts int
	Reason   string
	Body     []byte // the encoded message
}

// DeadLetters reads up to limit dead letters of a group from the entry
// ID start ("-" for the first; "(" + ID for the first after ID).
func DeadLetters(ctx context.Context, c redis.Cmdable, sh Shard, group, start string, limit int) ([]DeadEntry, error) {
	return DeadRange(ctx, c, sh, group, start, "+", limit)
}

// DeadRange reads up to limit dead letters of a group with entry IDs from
// start to end (XRANGE's bounds: a time in ms stands for every ID of it).
func DeadRange(ctx context.Context, c redis.Cmdable, sh Shard, group, start, end string, limit int) ([]DeadEntry, error) {
	entries, err := c.XRangeN(ctx, sh.Dead(group), start, end, int64(limit)).Result()
	if err != nil {
		return nil, err
	}
	out := make([]DeadEntry, len(entries))
	for n, e := range entries {
		out[n] = DeadEntryOf(e)
	}
	return out, nil
}

// DeleteDead deletes dead letters; it returns how many existed.
func DeleteDead(ctx context.Context, c redis.Cmdable, sh Shard, group string, ids ...string) (int64, error) {
	return c.XDel(ctx, sh.Dead(group), ids...).Result()
}

// PurgeDead deletes all dead letters of a group on a partition and
// returns how many there were.
func PurgeDead(ctx context.Context, c redis.Cmdable, sh Shard, group string) (int64, error) {
	key := sh.Dead(group)
	pipe := c.TxPipeline()
	n := pipe.XLen(ctx, key)
	pipe.Unlink(ctx, key) // frees a long stream off Redis's main thread
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	return n.Val(), nil
}

// Overdue is how long ago the partition's earliest waiting message fell
// due, by Redis's clock (the far tier's too): 0 when none is due.
func Overdue(ctx context.Context, c Cmds, sh Shard) (time.Duration, error) {
	pipe := c.Pipeline()
	head := pipe.ZRangeWithScores(ctx, sh.Waiting(), 0, 0)
	farHead := pipe.ZRangeWithScores(ctx, sh.Far(), 0, 0)
	farHead2 := pipe.ZRangeWithScores(ctx, sh.FarZ(), 0, 0)
	now := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	return overdue(head, now.Val(), farHead, farHead2), nil
}

// overdue is how long ago the first waiting message (head: ZRANGE waiting
// 0 0) or far bucket (farHeads, of each format) fell due at now, 0 when
// none did.
func overdue(head *redis.ZSliceCmd, now time.Time, farHeads ...*redis.ZSliceCmd) time.Duration {
	var d time.Duration
	if zs := head.Val(); len(zs) > 0 {
		d = now.Sub(DueOf(zs[0].Score))
	}
	for _, f := range farHeads {
		d = max(d, farOverdue(f, now))
	}
	return max(d, 0)
}

// DueCounts adds to out the waiting messages of the partitions by due
// time: with edges e0 < ... < en, out[0] counts those due before e0,
// out[k] those in [ek-1, ek), out[n] those at en or later. The waiting
// set is counted on the server (ZCOUNT); the far tier by its buckets, each
// in the bin of its first due time (within FarWidth of their own).
func DueCounts(ctx context.Context, c redis.Cmdable, shards []Shard, edges []time.Time, out []int64) error {
	pipe := c.Pipeline()
	var cmds []*redis.IntCmd
	for _, sh := range shards {
		lo := "-inf"
		for _, e := range edges {
			b := scoreBound(e)
			cmds = append(cmds, pipe.ZCount(ctx, sh.Waiting(), lo, "("+b))
			lo = b
		}
		cmds = append(cmds, pipe.ZCount(ctx, sh.Waiting(), lo, "+inf"))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for n, c := range cmds {
		out[n%len(out)] += c.Val()
	}
	for _, sh := range shards {
		if err := farHistogram(ctx, c, sh, edges, out); err != nil {
			return err
		}
	}
	return nil
}

// farHistogram adds the far tier's messages of a partition to DueCounts's
// bins, each bucket's in the bin of the bucket's first due time.
func farHistogram(ctx context.Context, c redis.Cmdable, sh Shard, edges []time.Time, out []int64) error {
	for v := 1; v <= 2; v++ {
		if err := farHistogramOf(ctx, c, sh, v, edges, out); err != nil {
			return err
		}
	}
	return nil
}

// farHistogramOf is farHistogram for the buckets of format v.
func farHistogramOf(ctx context.Context, c redis.Cmdable, sh Shard, v int, edges []time.Time, out []int64) error {
	buckets, err := c.ZRange(ctx, sh.farZset(v), 0, -1).Result()
	if err != nil || len(buckets) == 0 {
		return err
	}
	live := "l:"
	if v == 2 {
		live = "L:"
	}
	for k := 0; k < len(buckets); k += 1000 {
		part := buckets[k:min(k+1000, len(buckets))]
		fields := make([]string, len(part))
		for n, b := range part {
			fields[n] = live + b
		}
		live, err := c.HMGet(ctx, sh.FarMeta(), fields...).Result()
		if err != nil {
			return err
		}
		for n, b := range part {
			count := parseCount(live[n])
			num, _ := strconv.ParseInt(b, 10, 64)
			start := farBucketStart(num)
			bin, _ := slices.BinarySearchFunc(edges, start, func(e, t time.Time) int { return e.Compare(t) })
			if bin < len(edges) && edges[bin].Equal(start) {
				bin++
			}
			out[bin] += count
		}
	}
	return nil
}

// GroupCounter is a consumer group's growing counters on one partition.
type GroupCounter struct {
	Group string
	// Delivered is XINFO GROUPS' entries-read; -1 when Redis cannot tell.
	Delivered int64
	DeadTotal int64
}

// Counted is what Counters reads of a topic's partitions.
type Counted struct {
	Time   time.Time      // Redis's clock
	Ready  int64          // entries ever added to the ready streams
	Groups []GroupCounter // one per group and partition, by partition
}

// Counters reads the growing counters of partitions in two round trips.
func Counters(ctx context.Context, c Cmds, shards []Shard) (Counted, error) {
	var out Counted
	pipe := c.Pipeline()
	streams := make([]*redis.XInfoStreamCmd, len(shards))
	groups := make([]*redis.XInfoGroupsCmd, len(shards))
	for n, sh := range shards {
		streams[n] = pipe.XInfoStream(ctx, sh.Stream())
		groups[n] = pipe.XInfoGroups(ctx, sh.Stream())
	}
	now := pipe.Time(ctx)
	// A stream not created yet answers XINFO with an error: it counts 0.
	if _, err := pipe.Exec(ctx); err != nil && !isNoSuchKey(err) {
		return out, err
	}
	all := []redis.Cmder{now}
	for n := range streams {
		all = append(all, streams[n], groups[n])
	}
	for _, c := range all {
		if err := c.Err(); err != nil && !isNoSuchKey(err) {
			return out, err
		}
	}
	out.Time = now.Val()
	var metas []*redis.StringCmd
	pipe = c.Pipeline()
	for n, sh := range shards {
		if info := streams[n].Val(); info != nil {
			out.Ready += info.EntriesAdded
		}
		for _, g := range groups[n].Val() {
			delivered := g.EntriesRead
			if g.Lag < 0 { // entries-read is only meaningful with a known lag
				delivered = -1
			}
			out.Groups = append(out.Groups, GroupCounter{Group: g.Name, Delivered: delivered})
			metas = append(metas, pipe.HGet(ctx, sh.Meta(g.Name), "dead_total"))
		}
	}
	if len(metas) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return out, err
		}
		for n, m := range metas {
			out.Groups[n].DeadTotal, _ = m.Int64()
		}
	}
	return out, nil
}
