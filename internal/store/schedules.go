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

// RecurringAdd runs recurringadd.lua; it reports whether the next tick was set.
func RecurringAdd(ctx context.Context, c redis.Scripter, k Keys, id string, def []byte, spec, timezone string, first time.Time) (bool, error) {
	sk := k.Schedules()
	n, err := recurringAddScript.Run(ctx, c, []string{sk.Defs(), sk.Next(), sk.Paused()},
		id, def, spec, timezone, first.UnixMilli(), sk.Wake()).Int64()
	return n == 1, err
}

// RecurringPause runs recurringpause.lua: pauses a schedule (pause true, at
// Redis's now) or resumes it with its next tick at. It returns -1 when no such schedule
// exists, 0 when it already was paused (or running), 1 when it changed.
func RecurringPause(ctx context.Context, c redis.Scripter, k Keys, id string, pause bool, at time.Time) (int64, error) {
	sk := k.Schedules()
	op := "resume"
	if pause {
		op = "pause"
	}
	return recurringPauseScript.Run(ctx, c, []string{sk.Defs(), sk.Next(), sk.Paused()},
		id, op, at.UnixMilli(), ParkedTick, sk.Wake()).Int64()
}

// RecurringClaim runs recurringclaim.lua: status 1 claimed (exp is the claim's
// expiry; zero when ttl is 0, a skip), 0 lost, -1 not due by Redis's clock.
func RecurringClaim(ctx context.Context, c redis.Scripter, k Keys, id string, tick, after time.Time, ttl time.Duration) (status int64, exp time.Time, err error) {
	sk := k.Schedules()
	res, err := recurringClaimScript.Run(ctx, c, []string{sk.Next(), sk.Claims()},
		id, tick.UnixMilli(), after.UnixMilli(), ttl.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, time.Time{}, err
	}
	if err := replyShort("recurringclaim", len(res), 2); err != nil {
		return 0, time.Time{}, err
	}
	if res[0] == 1 && res[1] > 0 {
		exp = time.UnixMilli(res[1])
	}
	return res[0], exp, nil
}

// RecurringRetry runs recurringretry.lua: held is the claim expiry the caller
// holds (zero: take the claim only if expired). It returns the new expiry
// when the caller now holds the claim, zero otherwise.
func RecurringRetry(ctx context.Context, c redis.Scripter, k Keys, member string, held time.Time, ttl time.Duration) (time.Time, error) {
	sk := k.Schedules()
	heldArg := ""
	if !held.IsZero() {
		heldArg = strconv.FormatInt(held.UnixMilli(), 10)
	}
	n, err := recurringRetryScript.Run(ctx, c, []string{sk.Claims()}, member, heldArg, ttl.Milliseconds()).Int64()
	if err != nil || n == 0 {
		return time.Time{}, err
	}
	return time.UnixMilli(n), nil
}

// OverlapRecord is the tick of a schedule with the overlap policy "skip"
// let through last (see recurringoverlap.lua): its message's UUID ("" when none
// is recorded) and the tick.
type OverlapRecord struct {
	UUID string
	Tick time.Time
}

// OverlapView is what the caller of RecurringOverlap believes of the
// partition a schedule's ticks go to: the tick let through last and the
// consumer groups. A wrong belief costs a call: the script corrects it.
type OverlapView struct {
	Prev   OverlapRecord
	Groups []string
}

// OverlapTick is a tick RecurringOverlap may let through: its message's UUID,
// the tick, the message's delay, and whether it is high-priority.
type OverlapTick struct {
	UUID  string
	Tick  time.Time
	Delay time.Duration
	High  bool
}

// RecurringOverlap runs recurringoverlap.lua on partition sh, where the ticks of
// schedule id go: whether tick may be published. It returns "go" (publish
// it: it is recorded as let through, and view says so), "skip" with the
// reason, or "again" when view was wrong (it is corrected: call again).
func RecurringOverlap(ctx context.Context, c Cmds, sh Shard, id string, view *OverlapView, tick OverlapTick) (status, reason string, err error) {
	// The previous tick's message in the far tier, looked up here: the
	// script reads format 2's index entry itself, but format 3's holds a
	// fingerprint, which only FarPull's read of the element confirms. (A
	// message found here that leaves meanwhile only skips one tick more.)
	far := "0"
	if p := view.Prev.UUID; p != "" && p != tick.UUID {
		_, _, found, err := FarPull(ctx, c, sh, p, true)
		if err != nil {
			return "", "", err
		}
		if found {
			far = "1"
		}
	}
	looked := view.Prev.UUID
	if looked == "" {
		looked = tick.UUID // no far index to look in: any of the partition's will do
	}
	field := farField(looked)
	flags := ""
	if tick.Delay >= FarMargin {
		flags += "f" // may wait in the far tier (see FarArgOf)
	}
	if tick.High {
		flags += "p"
	}
	if flags == "" {
		flags = "-"
	}
	keys := make([]string, 0, 6+3*len(view.Groups))
	keys = append(keys, sh.Overlap(), sh.Bodies(), sh.farIndex(farShard(field)), sh.Fanout(), sh.Stream(), sh.Groups())
	args := make([]any, 0, 11+len(view.Groups))
	args = append(args, id, view.Prev.UUID, idPrefix(view.Prev.UUID), field, tick.UUID, tick.Tick.UnixMilli(),
		max(tick.Delay, 0).Milliseconds(), flags, OverlapScan.Entries, OverlapScan.Members, far)
	for _, g := range view.Groups {
		keys = append(keys, sh.Retry(g), sh.retryBodies(g), sh.Redelivery(g))
		args = append(args, g)
	}
	res, err := recurringOverlapScript.Run(ctx, c, keys, args...).StringSlice()
	if err == nil {
		err = replyShort("recurringoverlap", len(res), 2)
	}
	if err != nil {
		return "", "", err
	}
	switch res[0] {
	case "go":
		view.Prev = OverlapRecord{UUID: tick.UUID, Tick: tick.Tick}
	case "again":
		view.Prev, view.Groups = parseOverlapRecord(res[1]), res[2:]
		return "again", "", nil
	}
	return res[0], res[1], nil
}

// parseOverlapRecord reads a schedule's field of the overlap hash.
func parseOverlapRecord(v string) OverlapRecord {
	var r OverlapRecord
	if f := strings.Fields(v); len(f) >= 2 {
		r.UUID = f[0]
		ms, _ := strconv.ParseInt(f[1], 10, 64)
		r.Tick = time.UnixMilli(ms)
	}
	return r
}

// RecurringSkip runs recurringskip.lua: drops the claim of a tick skipped by its
// schedule's overlap policy and counts the skip. It returns how many ticks
// of the schedule were skipped.
func RecurringSkip(ctx context.Context, c redis.Scripter, k Keys, id string, tick time.Time) (int64, error) {
	sk := k.Schedules()
	return recurringSkipScript.Run(ctx, c, []string{sk.Claims(), sk.Skips()}, ClaimMember(id, tick), id, tick.UnixMilli()).Int64()
}
