package redisdelay

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// TopicCounters are a topic's counters that only grow, summed over its
// partitions: read them twice and divide the difference by the time
// between the reads for a rate. They restart from 0 when a ready stream is
// deleted (by hand, or by Inspector.DeleteGroup of the last group): a
// counter smaller than its last read means a restart, not a negative rate.
type TopicCounters struct {
	Topic string
	// Time is Redis's clock when the counters were read.
	Time time.Time
	// Ready counts the entries ever added to the ready streams (Redis 7's
	// entries-added of XINFO STREAM): messages made ready, delayed ones
	// when they fall due and immediate ones when published. Redeliveries
	// and requeued dead letters are not counted.
	Ready int64
	// Groups are the consumer groups created on a ready stream, by name.
	Groups []GroupCounters
}

// GroupCounters are a consumer group's growing counters of one topic.
type GroupCounters struct {
	Group string
	// Delivered counts ready stream entries delivered to the group's
	// consumers for the first time (Redis 7's entries-read of XINFO
	// GROUPS). -1 when Redis cannot tell (entries were deleted from the
	// middle of a stream by hand).
	Delivered int64
	// DeadTotal counts messages ever moved to the group's dead letters,
	// as in GroupStats.
	DeadTotal int64
}

// Counters reads a topic's growing counters in two or three round trips
// of 2 + 2×partitions + partitions×groups commands, none of which reads a
// list of messages, so sampling it every few seconds costs Redis little
// whatever the depth of the topic.
func (i *Inspector) Counters(ctx context.Context, topic string) (TopicCounters, error) {
	out := TopicCounters{Topic: topic}
	if err := validateTopic(topic); err != nil {
		return out, err
	}
	fail := func(err error) (TopicCounters, error) {
		return out, wrap(err, "counters of topic %q", topic)
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return fail(err)
	}
	pipe := i.client.Pipeline()
	streams := make([]*redis.XInfoStreamCmd, len(shards))
	groups := make([]*redis.XInfoGroupsCmd, len(shards))
	for n, sh := range shards {
		streams[n] = pipe.XInfoStream(ctx, sh.stream())
		groups[n] = pipe.XInfoGroups(ctx, sh.stream())
	}
	now := pipe.Time(ctx)
	// A stream not created yet answers XINFO with an error: it counts 0.
	if _, err := pipe.Exec(ctx); err != nil && !isNoSuchKey(err) {
		return fail(err)
	}
	for _, c := range append(cmdsOf(streams, groups), now) {
		if err := c.Err(); err != nil && !isNoSuchKey(err) {
			return fail(err)
		}
	}
	out.Time = now.Val()
	index := map[string]int{}
	type metaCmd struct {
		group string
		cmd   *redis.StringCmd
	}
	var metas []metaCmd
	pipe = i.client.Pipeline()
	for n, sh := range shards {
		if info := streams[n].Val(); info != nil {
			out.Ready += info.EntriesAdded
		}
		for _, g := range groups[n].Val() {
			k, ok := index[g.Name]
			if !ok {
				k = len(out.Groups)
				index[g.Name] = k
				out.Groups = append(out.Groups, GroupCounters{Group: g.Name})
			}
			sum := &out.Groups[k]
			// entries-read is only meaningful with a known lag.
			if g.Lag < 0 || sum.Delivered < 0 {
				sum.Delivered = -1
			} else {
				sum.Delivered += g.EntriesRead
			}
			metas = append(metas, metaCmd{g.Name, pipe.HGet(ctx, sh.meta(g.Name), "dead_total")})
		}
	}
	if len(metas) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return fail(err)
		}
		for _, m := range metas {
			n, _ := m.cmd.Int64()
			out.Groups[index[m.group]].DeadTotal += n
		}
	}
	slices.SortFunc(out.Groups, func(a, b GroupCounters) int { return strings.Compare(a.Group, b.Group) })
	return out, nil
}

func cmdsOf(streams []*redis.XInfoStreamCmd, groups []*redis.XInfoGroupsCmd) []redis.Cmder {
	out := make([]redis.Cmder, 0, len(streams)+len(groups)+1)
	for n := range streams {
		out = append(out, streams[n], groups[n])
	}
	return out
}
