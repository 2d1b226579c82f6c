package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The calls of the scripts that act on stored messages (see calls.go).

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
