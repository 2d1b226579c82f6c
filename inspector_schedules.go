// The Inspector's methods for recurring schedules (recurring.go): list,
// remove, pause, resume and trigger them.

package redisdelay

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Schedules lists the recurring schedules, by ID, with their next tick,
// whether they are paused, and the ticks their overlap policy skipped.
func (i *Inspector) Schedules(ctx context.Context) ([]Schedule, error) {
	defs, state, err := store.ScheduleDefs(ctx, i.client, i.keys)
	if err != nil {
		return nil, fmt.Errorf("redisdelay: list schedules: %w", err)
	}
	out := make([]Schedule, 0, len(defs))
	for id, js := range defs {
		var s Schedule
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			return nil, fmt.Errorf("redisdelay: schedule %q does not decode: %v; remove it with Inspector.RemoveSchedule", id, err)
		}
		st := state[id]
		s.ID, s.Next, s.Paused, s.Skipped, s.LastSkipped, s.LastTick = id, st.Next, st.Paused, st.Skipped, st.LastSkipped, st.LastTick
		if !s.Paused.IsZero() {
			s.Next = time.Time{}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Schedule) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// RemoveSchedule removes a schedule: no tick is published after it
// returns, except one already being published. It reports whether the
// schedule existed.
func (i *Inspector) RemoveSchedule(ctx context.Context, id string) (bool, error) {
	existed, err := store.RemoveSchedule(ctx, i.client, i.keys, id)
	if err != nil {
		return false, fmt.Errorf("redisdelay: remove schedule %q: %w", id, err)
	}
	return existed, nil
}

// PauseSchedule pauses a schedule: no tick is published from then on,
// except one already being published, until ResumeSchedule. It reports
// whether it was running; ErrUnknownSchedule when there is no such
// schedule. Registering it again (Publisher.Schedule, as every process
// does at start) keeps it paused.
func (i *Inspector) PauseSchedule(ctx context.Context, id string) (bool, error) {
	return i.recurringPause(ctx, "pause", id, true, time.Time{})
}

// ResumeSchedule resumes a paused schedule at its first tick after now:
// the ticks it missed while paused are not published. It reports whether
// it was paused; ErrUnknownSchedule when there is no such schedule.
func (i *Inspector) ResumeSchedule(ctx context.Context, id string) (bool, error) {
	s, err := i.schedule(ctx, "resume", id)
	if err != nil {
		return false, err
	}
	t, err := s.validate()
	if err != nil {
		return false, fmt.Errorf("redisdelay: resume schedule %q: %w", id, err)
	}
	now, err := store.RedisTime(ctx, i.client)
	if err != nil {
		return false, fmt.Errorf("redisdelay: resume schedule %q: %w", id, err)
	}
	next := t.next(now)
	if next.IsZero() {
		next = time.UnixMilli(maxScheduleMs)
	}
	return i.recurringPause(ctx, "resume", id, false, next)
}

func (i *Inspector) recurringPause(ctx context.Context, what, id string, pause bool, at time.Time) (bool, error) {
	n, err := store.RecurringPause(ctx, i.client, i.keys, id, pause, at)
	switch {
	case err != nil:
		return false, fmt.Errorf("redisdelay: %s schedule %q: %w", what, id, err)
	case n < 0:
		return false, fmt.Errorf("%w: %s schedule %q: see Inspector.Schedules", ErrUnknownSchedule, what, id)
	}
	return n == 1, nil
}

// TriggerSchedule publishes one tick of a schedule now, paused or not, as
// its tick loop would (same topic, payload and metadata; ScheduleTickKey
// is now, by Redis's clock), without changing its next tick.
// ErrUnknownSchedule when there is no such schedule.
func (i *Inspector) TriggerSchedule(ctx context.Context, id string) error {
	s, err := i.schedule(ctx, "trigger", id)
	if err != nil {
		return err
	}
	now, err := store.RedisTime(ctx, i.client)
	if err != nil {
		return fmt.Errorf("redisdelay: trigger schedule %q: %w", id, err)
	}
	return i.publishTicks(ctx, "trigger", s, now.Truncate(time.Millisecond))
}

// publishTicks publishes ticks of a schedule outside its tick loops (a
// trigger, an advance of the clock in a test), with the topic's stored
// partition count, and records the last as the schedule's last tick.
func (i *Inspector) publishTicks(ctx context.Context, what string, s Schedule, ticks ...time.Time) error {
	fail := func(err error) error { return fmt.Errorf("redisdelay: %s schedule %q: %w", what, s.ID, err) }
	if len(ticks) == 0 {
		return nil
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, s.Topic)
	if err != nil {
		return fail(err)
	}
	pub, err := NewPublisher(PublisherConfig{Client: i.client, KeyPrefix: i.keys.Prefix,
		TopicPartitions: map[string]int{s.Topic: parts[0]}}, nil)
	if err != nil {
		return fail(err)
	}
	defer pub.Close()
	for _, tick := range ticks {
		msg := tickMessage(i.keys.Prefix, &s, tick)
		msg.SetContext(ctx)
		if err := pub.Publish(s.Topic, msg); err != nil {
			return fail(err)
		}
	}
	if err := store.RecordTick(ctx, i.client, i.keys, s.ID, ticks[len(ticks)-1]); err != nil {
		return fail(err)
	}
	return nil
}

// schedule reads a stored schedule's definition for an action (what).
func (i *Inspector) schedule(ctx context.Context, what, id string) (Schedule, error) {
	js, ok, err := store.ScheduleDef(ctx, i.client, i.keys, id)
	if err != nil {
		return Schedule{}, fmt.Errorf("redisdelay: %s schedule %q: %w", what, id, err)
	}
	if !ok {
		return Schedule{}, fmt.Errorf("%w: %s schedule %q: see Inspector.Schedules", ErrUnknownSchedule, what, id)
	}
	var s Schedule
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		return Schedule{}, fmt.Errorf("redisdelay: %s schedule %q: it does not decode: %v; remove it with Inspector.RemoveSchedule", what, id, err)
	}
	s.ID = id
	return s, nil
}
