// The commands on recurring schedules: schedules, pause-schedule,
// resume-schedule, trigger, unschedule.

package main

import (
	"errors"
	"fmt"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/present"
)

func cmdSchedules(e *env, _ []string) error {
	all, err := e.insp.Schedules(e.ctx)
	if err != nil {
		return err
	}
	now := e.now()
	defer e.warnLateTicks(all, now)
	if e.opts.json {
		out := make([]scheduleJSON, 0, len(all))
		for _, s := range all {
			out = append(out, toScheduleJSON(s))
		}
		return writeJSON(e.stdout, out)
	}
	if len(all) == 0 {
		fmt.Fprintf(e.stdout, "no schedules under prefix %q\n", e.opts.prefix)
		return nil
	}
	writeSchedulesTable(e.stdout, all, now)
	return nil
}

// warnLateTicks warns, on stderr, of schedules whose next tick is overdue:
// no scheduler runs under the prefix.
func (e *env) warnLateTicks(all []redisdelay.Schedule, now time.Time) {
	for _, s := range all {
		if late := now.Sub(s.Next); s.Paused.IsZero() && late >= tickOverdue {
			fmt.Fprintf(e.stderr, "redisdelay: warning: schedule %q's next tick is overdue by %s: no scheduler publishes ticks under prefix %q "+
				"(run a redisdelay Manager, or a Subscriber without DisableScheduler)\n", printable(s.ID), present.Duration(late), e.opts.prefix)
		}
	}
}

func cmdPauseSchedule(e *env, pos []string) error {
	was, err := e.insp.PauseSchedule(e.ctx, pos[0])
	switch {
	case err != nil:
		return e.scheduleErr(err, pos[0])
	case e.opts.json:
		return writeJSON(e.stdout, schedulePauseJSON{ID: pos[0], Paused: true, WasPaused: !was})
	case was:
		fmt.Fprintf(e.stdout, "paused schedule %q: no tick until \"redisdelay resume-schedule %s\"\n", pos[0], pos[0])
	default:
		fmt.Fprintf(e.stdout, "schedule %q was already paused\n", pos[0])
	}
	return nil
}

func cmdResumeSchedule(e *env, pos []string) error {
	was, err := e.insp.ResumeSchedule(e.ctx, pos[0])
	if err != nil {
		return e.scheduleErr(err, pos[0])
	}
	// The next tick as stored: counted from Redis's clock.
	out := schedulePauseJSON{ID: pos[0], Paused: false, WasPaused: was}
	all, err := e.insp.Schedules(e.ctx)
	if err != nil {
		return err
	}
	for _, s := range all {
		if s.ID == pos[0] && !s.Next.IsZero() {
			next := s.Next.UTC()
			out.Next = &next
		}
	}
	next := ""
	if out.Next != nil {
		next = fmt.Sprintf(": next tick at %s (%s)", out.Next.Format(time.RFC3339), dueIn(*out.Next, e.now()))
	}
	switch {
	case e.opts.json:
		return writeJSON(e.stdout, out)
	case was:
		fmt.Fprintf(e.stdout, "resumed schedule %q%s; the ticks it missed while paused are not published\n", pos[0], next)
	default:
		fmt.Fprintf(e.stdout, "schedule %q was not paused%s\n", pos[0], next)
	}
	return nil
}

func cmdTrigger(e *env, pos []string) error {
	if err := e.insp.TriggerSchedule(e.ctx, pos[0]); err != nil {
		return e.scheduleErr(err, pos[0])
	}
	if e.opts.json {
		if err := writeJSON(e.stdout, triggerJSON{ID: pos[0], Triggered: true}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "published a tick of schedule %q\n", pos[0])
	}
	if all, err := e.insp.Schedules(e.ctx); err == nil {
		for _, s := range all {
			if s.ID == pos[0] {
				e.warnUnscheduled(s.Topic)
				if st, err := e.insp.Stats(e.ctx, s.Topic); err == nil {
					if w := noGroupText(st); w != "" {
						fmt.Fprintf(e.stderr, "redisdelay: warning: %s\n", w)
					}
				}
			}
		}
	}
	return nil
}

// scheduleErr words an error of an action on a schedule for the CLI: an
// unknown ID points to the listing.
func (e *env) scheduleErr(err error, id string) error {
	if errors.Is(err, redisdelay.ErrUnknownSchedule) {
		return fmt.Errorf("redisdelay: no schedule %q under prefix %q: see \"redisdelay schedules\" for their IDs", id, e.opts.prefix)
	}
	return err
}

func cmdUnschedule(e *env, pos []string) error {
	removed, err := e.insp.RemoveSchedule(e.ctx, pos[0])
	switch {
	case err != nil:
		return err
	case e.opts.json:
		return writeJSON(e.stdout, unscheduleJSON{ID: pos[0], Removed: removed})
	case removed:
		fmt.Fprintf(e.stdout, "removed schedule %q\n", pos[0])
	default:
		fmt.Fprintf(e.stdout, "not removed: no schedule %q under prefix %q (see \"redisdelay schedules\")\n", pos[0], e.opts.prefix)
	}
	return nil
}
