package main

// Groups (-groups, -group-concurrency): the consumer group's fair queues in
// Redis, checked at the end and shown when a run fails.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// shard is the key base of partition part of the topic.
func (d *driver) shard(part int) store.Shard {
	return store.Keys{Prefix: keyPrefix}.Shard(topic, part)
}

// fair is the consumer group's fair queue hash in partition part: the
// states of its active groups and their queued messages (see
// internal/store/scripts/include/fair.lua).
func (d *driver) fair(part int) string { return d.shard(part).Fair(group) }

// fairState describes what a consumer group's fair queue hash holds: the
// state of each group (fields without a "\x00": "f,r,h,t,ph,pt,d,P,tat",
// f the slots held), how many messages it queues, and the count field.
func fairState(h map[string]string) (states []string, queued map[string]int, count string) {
	queued = map[string]int{}
	for k, v := range h {
		switch g, _, isMsg := strings.Cut(k, "\x00"); {
		case k == "\x00n":
			count = v
		case isMsg:
			queued[g]++
		default:
			states = append(states, fmt.Sprintf("%q=%s", k, v))
		}
	}
	sort.Strings(states)
	return states, queued, count
}

// groupStateLeft checks the invariant that once every message is settled
// no consumer group holds group state in any partition: its fair queue
// hash is gone (fair.lua deletes a group's state once it holds nothing).
// A state left behind is a group whose slots were not all given back: at
// its cap, it would never be served again. It fails the run with the
// hash's content and returns how many partitions hold state.
func (d *driver) groupStateLeft(ctx context.Context) int {
	left := 0
	for part := range d.c.partitions {
		sh := d.shard(part)
		n, err := d.direct.Exists(ctx, sh.Fair(group)).Result()
		if err != nil {
			d.fail("group state of partition %d: %v", part, err)
			continue
		}
		if n == 0 {
			continue
		}
		left++
		h, err := d.direct.HGetAll(ctx, sh.Fair(group)).Result()
		if err != nil {
			d.fail("group state of partition %d: %v", part, err)
			continue
		}
		states, queued, count := fairState(h)
		shown := states[:min(len(states), 50)]
		more := ""
		if len(states) > len(shown) {
			more = fmt.Sprintf(" (and %d more)", len(states)-len(shown))
		}
		d.fail("partition %d: every message is settled, but consumer group %s still holds group state in %s (a slot never given back?): "+
			"%d group state(s), as f,r,h,t,ph,pt,d,P,tat with f the slots held: %s%s; queued messages per group %v; count field %q; %s",
			part, group, sh.Fair(group), len(states), strings.Join(shown, " "), more, queued, count, d.fairLists(ctx, part))
	}
	return left
}

// fairLists shows the ring, high-priority list and rate-sleep set of the
// consumer group's fair queues in partition part.
func (d *driver) fairLists(ctx context.Context, part int) string {
	pre := string(d.shard(part)) + ":g:" + group + ":"
	ring, err1 := d.direct.LRange(ctx, pre+"fring", 0, 50).Result()
	prio, err2 := d.direct.LRange(ctx, pre+"fprio", 0, 50).Result()
	wait, err3 := d.direct.ZRangeWithScores(ctx, pre+"fwait", 0, 50).Result()
	if err := firstErr(err1, err2, err3); err != nil {
		return "ring, fprio, fwait: " + err.Error()
	}
	return fmt.Sprintf("ring %q, fprio %q, fwait %v", ring, prio, wait)
}

// diagnoseGroups shows the consumer group's fair queues of every
// partition, and notes where each queued message is (see diagnose).
func (d *driver) diagnoseGroups(ctx context.Context, out func(string, ...any), note func(uuid, place string)) {
	for part := range d.c.partitions {
		h, err := d.direct.HGetAll(ctx, d.fair(part)).Result()
		if err != nil {
			out("group state of partition %d: %v", part, err)
			continue
		}
		states, queued, count := fairState(h)
		out("partition %d: %d group state(s) (f,r,h,t,ph,pt,d,P,tat): %s; queued per group %v; count field %q; %s",
			part, len(states), strings.Join(states[:min(len(states), 100)], " "), queued, count, d.fairLists(ctx, part))
		for k, v := range h {
			if g, _, ok := strings.Cut(k, "\x00"); ok && k != "\x00n" && len(v) > 8 {
				attempt, _ := strconv.ParseInt(v[:8], 16, 64)
				note(uuidOf(v[8:]), fmt.Sprintf("queued in group %s (attempt %d, partition %d)", g, attempt, part))
			}
		}
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
