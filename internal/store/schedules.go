package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScheduleState is what the schedules' keys hold of one schedule besides
// its definition.
type ScheduleState struct {
	Next        time.Time // next tick not yet published
	Paused      time.Time // when it was paused; zero: running
	Skipped     int64     // ticks skipped by its overlap policy
	LastSkipped time.Time // the last of them; zero: none
	LastTick    time.Time // the tick published last (TickDone); zero: none recorded
}

// ScheduleDefs reads every recurring schedule's JSON definition and state,
// by ID.
func ScheduleDefs(ctx context.Context, c Cmds, k Keys) (defs map[string]string, state map[string]ScheduleState, err error) {
	sk := k.Schedules()
	pipe := c.Pipeline()
	d := pipe.HGetAll(ctx, sk.Defs())
	n := pipe.ZRangeWithScores(ctx, sk.Next(), 0, -1)
	p := pipe.HGetAll(ctx, sk.Paused())
	sc := pipe.HGetAll(ctx, sk.Skips())
	last := pipe.HGetAll(ctx, sk.Last())
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, err
	}
	state = make(map[string]ScheduleState, len(d.Val()))
	for _, z := range n.Val() {
		id, _ := z.Member.(string)
		st := state[id]
		st.Next = time.UnixMilli(int64(z.Score))
		state[id] = st
	}
	for id, ms := range p.Val() {
		st := state[id]
		st.Paused = time.UnixMilli(parseCount(ms))
		state[id] = st
	}
	for field, v := range sc.Val() {
		id, last := strings.CutSuffix(field, "@last")
		st := state[id]
		if last {
			st.LastSkipped = time.UnixMilli(parseCount(v))
		} else {
			st.Skipped = parseCount(v)
		}
		state[id] = st
	}
	for id, ms := range last.Val() {
		st := state[id]
		st.LastTick = time.UnixMilli(parseCount(ms))
		state[id] = st
	}
	return d.Val(), state, nil
}

// RemoveSchedule deletes a schedule's definition and next tick; it
// reports whether the definition existed.
func RemoveSchedule(ctx context.Context, c redis.Cmdable, k Keys, id string) (bool, error) {
	sk := k.Schedules()
	pipe := c.TxPipeline()
	del := pipe.HDel(ctx, sk.Defs(), id)
	pipe.ZRem(ctx, sk.Next(), id)
	pipe.HDel(ctx, sk.Paused(), id)
	pipe.HDel(ctx, sk.Skips(), id, id+"@last")
	pipe.HDel(ctx, sk.Last(), id)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, err
	}
	return del.Val() == 1, nil
}

// Timed is a member of a schedules set and its time: a schedule's next
// tick, or a claim's expiry.
type Timed struct {
	Member string
	At     time.Time
}

// ScheduleHeads reads Redis's clock with the first n next ticks and the
// first n claims, earliest first.
func ScheduleHeads(ctx context.Context, c Cmds, k Keys, n int) (now time.Time, next, claims []Timed, err error) {
	sk := k.Schedules()
	pipe := c.Pipeline()
	clock := pipe.Time(ctx)
	nextCmd := pipe.ZRangeWithScores(ctx, sk.Next(), 0, int64(n)-1)
	claimCmd := pipe.ZRangeWithScores(ctx, sk.Claims(), 0, int64(n)-1)
	if _, err := pipe.Exec(ctx); err != nil {
		return time.Time{}, nil, nil, err
	}
	timed := func(zs []redis.Z) []Timed {
		out := make([]Timed, len(zs))
		for i, z := range zs {
			m, _ := z.Member.(string)
			out[i] = Timed{Member: m, At: time.UnixMilli(int64(z.Score))}
		}
		return out
	}
	return clock.Val(), timed(nextCmd.Val()), timed(claimCmd.Val()), nil
}

// ScheduleDefsOf reads the definitions of the schedules ids: "" for one
// removed.
func ScheduleDefsOf(ctx context.Context, c Cmds, k Keys, ids []string) ([]string, error) {
	vals, err := c.HMGet(ctx, k.Schedules().Defs(), ids...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i], _ = v.(string)
	}
	return out, nil
}

// ScheduleDef reads the definition of a schedule; ok is false when it was
// removed.
func ScheduleDef(ctx context.Context, c Cmds, k Keys, id string) (def string, ok bool, err error) {
	def, err = c.HGet(ctx, k.Schedules().Defs(), id).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	return def, err == nil, err
}

// NextTick reads a schedule's next tick not yet published; ok is false
// when it was removed.
func NextTick(ctx context.Context, c Cmds, k Keys, id string) (tick time.Time, ok bool, err error) {
	ms, err := c.ZScore(ctx, k.Schedules().Next(), id).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return time.UnixMilli(int64(ms)), true, nil
}

// ClaimMember is the claims member of a tick being published.
func ClaimMember(id string, tick time.Time) string {
	return id + "@" + strconv.FormatInt(tick.UnixMilli(), 10)
}

// ParseClaim splits a claims member into schedule ID and tick.
func ParseClaim(member string) (id string, tick time.Time, ok bool) {
	at := strings.LastIndexByte(member, '@')
	if at < 0 {
		return "", time.Time{}, false
	}
	ms, err := strconv.ParseInt(member[at+1:], 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	return member[:at], time.UnixMilli(ms), true
}

// DropClaim removes a tick's claim once it is published (or cannot be).
func DropClaim(ctx context.Context, c Cmds, k Keys, member string) error {
	return c.ZRem(ctx, k.Schedules().Claims(), member).Err()
}

// TickDone drops a tick's claim (DropClaim) and, when its message was
// published, records the tick as the schedule's last (read by
// ScheduleDefs), in one round trip.
func TickDone(ctx context.Context, c Cmds, k Keys, member, id string, tick time.Time, published bool) error {
	if !published {
		return DropClaim(ctx, c, k, member)
	}
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, k.Schedules().Claims(), member)
		p.HSet(ctx, k.Schedules().Last(), id, tick.UnixMilli())
		return nil
	})
	return err
}

// RecordTick records a tick published outside the tick loops (a trigger)
// as the schedule's last.
func RecordTick(ctx context.Context, c redis.Cmdable, k Keys, id string, tick time.Time) error {
	return c.HSet(ctx, k.Schedules().Last(), id, tick.UnixMilli()).Err()
}

// ClaimHeld reports whether a tick's claim (ClaimMember) is held: the
// tick is being published, or its publish is to be tried again.
func ClaimHeld(ctx context.Context, c Cmds, k Keys, member string) (bool, error) {
	err := c.ZScore(ctx, k.Schedules().Claims(), member).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}
