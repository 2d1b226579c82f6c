package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// HealthPartition is what ReadHealth reads of one partition.
type HealthPartition struct {
	Topic, N int           // the topic's index in ReadHealth's topics, the partition
	Overdue  time.Duration // of the earliest waiting message, far tier included
	// Stream counts the ready stream's entries and Groups the partition's
	// consumer groups (both read anyway: no command more per partition).
	Stream int64
	Groups int
}

// HealthGroup is what ReadHealth reads of a consumer group on one
// partition.
type HealthGroup struct {
	Part                  int // index in HealthSnapshot.Partitions
	Name                  string
	Timeouts, TimeoutAt   int64 // handler timeouts counted, and when the last was (ms)
	Pending, Ready        int64 // see GroupCount
	StuckLimit, IdleLimit time.Duration
	// Stuck is the first entry pending past StuckLimit in the ready stream,
	// else in the redelivery stream; nil when none (or none pending).
	Stuck *StuckEntry
	// ConsumerIdle is how long each of the ready stream's consumers of the
	// group has not read, read when the group has messages ready; Ready !=
	// 0 tells whether they were.
	ConsumerIdle []time.Duration
	Paused       bool
}

// StuckEntry is an entry pending past its limit.
type StuckEntry struct {
	ID, Consumer string
	Idle         time.Duration // since its last delivery or lease renewal
}

// HealthSnapshot is what ReadHealth read.
type HealthSnapshot struct {
	Now        time.Time // Redis's clock
	Partitions []HealthPartition
	Groups     []HealthGroup // by partition
}

// ReadHealth reads what the health check needs of topics (with counts
// partitions each) in three pipelined round trips, whatever their number:
// every partition's head, groups and ready stream; each group's policy and
// redelivery stream; then, for the groups with messages pending or ready
// only, the oldest pending entry past its limit and the consumers. limits
// gives a group's stuck and idle limits from its visibility timeout
// (0: none stored).
func ReadHealth(ctx context.Context, c Cmds, k Keys, topics []string, counts []int, limits func(vis time.Duration) (stuck, idle time.Duration)) (HealthSnapshot, error) {
	var snap HealthSnapshot
	type partition struct {
		sh       Shard
		head     *redis.ZSliceCmd
		farHead  *redis.ZSliceCmd
		farHead2 *redis.ZSliceCmd
		groups   *redis.StringSliceCmd
		infos    *redis.XInfoGroupsCmd
		length   *redis.IntCmd
	}
	var parts []partition
	pipe := c.Pipeline()
	clock := pipe.Time(ctx)
	for t, topic := range topics {
		for n := range counts[t] {
			sh := k.Shard(topic, n)
			snap.Partitions = append(snap.Partitions, HealthPartition{Topic: t, N: n})
			parts = append(parts, partition{sh: sh,
				head:     pipe.ZRangeWithScores(ctx, sh.Waiting(), 0, 0),
				farHead:  pipe.ZRangeWithScores(ctx, sh.Far(), 0, 0),
				farHead2: pipe.ZRangeWithScores(ctx, sh.FarZ(), 0, 0),
				groups:   pipe.SMembers(ctx, sh.Groups()),
				infos:    pipe.XInfoGroups(ctx, sh.Stream()),
				length:   pipe.XLen(ctx, sh.Stream()),
			})
		}
	}
	if err := execRead(ctx, pipe); err != nil {
		return snap, err
	}
	snap.Now = clock.Val()
	for p, part := range parts {
		snap.Partitions[p].Overdue = overdue(part.head, snap.Now, part.farHead, part.farHead2)
		snap.Partitions[p].Stream = part.length.Val()
		snap.Partitions[p].Groups = len(part.groups.Val())
	}

	type groupCmds struct {
		meta             *redis.SliceCmd // vis, timeouts, timeout_at
		redo             *redis.XInfoGroupsCmd
		redoLen          *redis.IntCmd
		stuck, stuckRedo *redis.XPendingExtCmd
		consumers        *redis.XInfoConsumersCmd
		paused           *redis.IntCmd
	}
	var cmds []groupCmds
	pipe = c.Pipeline()
	for p, part := range parts {
		for _, g := range part.groups.Val() {
			snap.Groups = append(snap.Groups, HealthGroup{Part: p, Name: g})
			cmds = append(cmds, groupCmds{
				meta:    pipe.HMGet(ctx, part.sh.Meta(g), "vis", "timeouts", "timeout_at"),
				redo:    pipe.XInfoGroups(ctx, part.sh.Redelivery(g)),
				redoLen: pipe.XLen(ctx, part.sh.Redelivery(g)),
			})
		}
	}
	if err := execRead(ctx, pipe); err != nil {
		return snap, err
	}

	pipe = c.Pipeline()
	queued := false
	for n := range snap.Groups {
		g, gc := &snap.Groups[n], &cmds[n]
		part := parts[g.Part]
		g.Ready, g.Pending, _ = groupBacklog(part.infos.Val(), g.Name, part.length.Val(), gc.redo.Val(), gc.redoLen.Val())
		meta := gc.meta.Val()
		field := func(k int) int64 {
			if k < len(meta) {
				return parseCount(meta[k])
			}
			return 0
		}
		g.Timeouts, g.TimeoutAt = field(1), field(2)
		g.StuckLimit, g.IdleLimit = limits(time.Duration(field(0)) * time.Millisecond)
		if g.Pending > 0 {
			args := func(stream string) *redis.XPendingExtArgs {
				return &redis.XPendingExtArgs{Stream: stream, Group: g.Name, Idle: g.StuckLimit, Start: "-", End: "+", Count: 1}
			}
			gc.stuck = pipe.XPendingExt(ctx, args(part.sh.Stream()))
			gc.stuckRedo = pipe.XPendingExt(ctx, args(part.sh.Redelivery(g.Name)))
			queued = true
		}
		if g.Ready != 0 {
			// a paused group's consumers do not read (Inspector.Pause)
			gc.consumers = pipe.XInfoConsumers(ctx, part.sh.Stream(), g.Name)
			gc.paused = pipe.Exists(ctx, k.Shard(topics[snap.Partitions[g.Part].Topic], 0).Paused(g.Name))
			queued = true
		}
	}
	if !queued {
		return snap, nil
	}
	if err := execRead(ctx, pipe); err != nil {
		return snap, err
	}
	for n := range snap.Groups {
		g, gc := &snap.Groups[n], cmds[n]
		if gc.stuck != nil {
			for _, c := range []*redis.XPendingExtCmd{gc.stuck, gc.stuckRedo} {
				if res := c.Val(); len(res) > 0 && g.Stuck == nil {
					g.Stuck = &StuckEntry{ID: res[0].ID, Consumer: res[0].Consumer, Idle: res[0].Idle}
				}
			}
		}
		if gc.consumers != nil {
			for _, c := range gc.consumers.Val() {
				g.ConsumerIdle = append(g.ConsumerIdle, c.Idle)
			}
			g.Paused = gc.paused.Val() == 1
		}
	}
	return snap, nil
}

// execRead runs a pipeline of reads; a key or group that does not exist
// (a stream not created yet) reads as empty.
func execRead(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, _ := pipe.Exec(ctx)
	for _, c := range cmds {
		if err := c.Err(); err != nil && err != redis.Nil && !isNoSuchKey(err) && !IsNoGroup(err) {
			return err
		}
	}
	return nil
}

// WakeUpsDenied reads the note a scheduler keeps while its Redis user may
// not subscribe to the wake channels; "" when there is none.
func WakeUpsDenied(ctx context.Context, c redis.Cmdable, k Keys) (string, error) {
	detail, err := c.Get(ctx, k.WakeDenied()).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return detail, err
}

// DenyWakeUps stores that note for ttl.
func DenyWakeUps(ctx context.Context, c Cmds, k Keys, detail string, ttl time.Duration) error {
	return c.Set(ctx, k.WakeDenied(), detail, ttl).Err()
}

// Ping asks Redis for a PONG.
func Ping(ctx context.Context, c redis.Cmdable) error { return c.Ping(ctx).Err() }
