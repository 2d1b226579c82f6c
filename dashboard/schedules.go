package dashboard

// Recurring schedules: listed, paused, resumed, triggered and removed.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// scheduleRow is a schedule as the page shows it: the time zone and
// catch-up window in effect, whatever the definition leaves unset.
type scheduleRow struct {
	ID, Spec, Timezone, Topic string
	Next, Paused              time.Time
	// NextLocal is Next on the schedule's own clock, for a cron spec
	// written in a zone other than UTC; "" otherwise.
	NextLocal      string
	Jitter         time.Duration
	CatchUp        time.Duration
	CatchUpDefault bool
	// Overlap is the policy in effect ("allow" or "skip"), Skipped and
	// LastSkipped the ticks it skipped.
	Overlap     string
	Skipped     int64
	LastSkipped time.Time
	// LastTick is the tick published last (zero: none recorded); Overdue
	// how long ago the next tick was due while it is not published, from
	// tickOverdue on (0 otherwise).
	LastTick time.Time
	Overdue  time.Duration
}

// tickOverdue is how late a schedule's next tick must be for the page to
// warn: a tick loop publishes a tick as it falls due, and one takes over
// from a stopped process within a minute (its read of the schedules).
const tickOverdue = time.Minute

func toScheduleRow(s redisdelay.Schedule, now time.Time) scheduleRow {
	row := scheduleRow{ID: s.ID, Spec: s.Spec, Timezone: s.Timezone, Topic: s.Topic, Next: s.Next, Paused: s.Paused,
		Jitter: s.Jitter, CatchUp: s.CatchUpWindow, Overlap: string(s.Overlap), Skipped: s.Skipped, LastSkipped: s.LastSkipped,
		LastTick: s.LastTick}
	if late := now.Sub(s.Next); s.Paused.IsZero() && !s.Next.IsZero() && late >= tickOverdue {
		row.Overdue = late
	}
	if row.Overlap == "" {
		row.Overlap = "allow"
	}
	if row.Timezone == "" {
		row.Timezone = "UTC"
	}
	if row.CatchUp == 0 {
		row.CatchUp, row.CatchUpDefault = redisdelay.DefaultCatchUpWindow, true
	}
	// "@every" ticks are multiples of the duration since the epoch: the
	// zone plays no part, so a local time would suggest it does.
	if !s.Next.IsZero() && row.Timezone != "UTC" && !strings.HasPrefix(s.Spec, "@every ") {
		if loc, err := time.LoadLocation(row.Timezone); err == nil {
			row.NextLocal = s.Next.In(loc).Format("2006-01-02 15:04:05 MST")
		}
	}
	return row
}

type schedulesData struct {
	Rows []scheduleRow
	// Overdue counts the schedules whose next tick is overdue: no
	// scheduler publishes ticks.
	Overdue int
}

func (h *handler) schedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	all, err := h.insp.Schedules(ctx)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	d := schedulesData{}
	now := time.Now()
	for _, s := range all {
		row := toScheduleRow(s, now)
		if row.Overdue > 0 {
			d.Overdue++
		}
		d.Rows = append(d.Rows, row)
	}
	h.render(w, r, http.StatusOK, "schedules", "Schedules", "", d)
}

// unknownSchedule is the answer to an action on an ID that is not
// registered: removed meanwhile (by another operator, or the CLI), or a
// form of an old page.
func unknownSchedule(id string) error {
	return fmt.Errorf("there is no schedule %q under this key prefix: it was removed (by the dashboard, the CLI or Inspector.RemoveSchedule), "+
		"or it was never registered; reload the schedules page", id)
}

func (h *handler) scheduleAction(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	id, action := r.PostFormValue("id"), r.PostFormValue("action")
	switch action {
	case "pause", "resume", "trigger", "remove":
	default:
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown action %q on a schedule: use pause, resume, trigger or remove", action))
		return
	}
	if id == "" {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("no schedule ID given to %s: pick one on the schedules page", action))
		return
	}
	// Read the definition first, for the prompt, and so that an unknown ID
	// is refused before a confirmation page that could not succeed.
	all, err := h.insp.Schedules(ctx)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	var s *redisdelay.Schedule
	for n := range all {
		if all[n].ID == id {
			s = &all[n]
		}
	}
	if s == nil {
		h.fail(w, r, http.StatusNotFound, unknownSchedule(id))
		return
	}
	back := h.link("/schedules")
	// Resume only undoes a pause: no confirmation. Trigger publishes a
	// message consumers act on, which nothing takes back.
	if action != "resume" && r.PostFormValue("confirm") != "yes" {
		var prompt string
		switch action {
		case "pause":
			prompt = fmt.Sprintf("Pause schedule %q (%s, to topic %q)? No tick is published until it is resumed, in any process; "+
				"the ticks it misses meanwhile are not published on resume.", id, s.Spec, s.Topic)
		case "trigger":
			prompt = fmt.Sprintf("Publish one tick of schedule %q to topic %q now? Its consumers receive it as they would a tick; its next tick does not change.", id, s.Topic)
		case "remove":
			prompt = fmt.Sprintf("Remove schedule %q (%s, to topic %q) for good? No tick is published after this. "+
				"A process that registers it at start (Publisher.Schedule) registers it again.", id, s.Spec, s.Topic)
		}
		h.confirm(w, r, "", confirmData{
			Action: h.link("/schedule"), Fields: [][2]string{{"id", id}, {"action", action}},
			Items: []string{id}, Back: back, Prompt: prompt, Danger: action == "remove",
		})
		return
	}
	var text string
	switch action {
	case "pause":
		var was bool
		if was, err = h.insp.PauseSchedule(ctx, id); err == nil {
			text = fmt.Sprintf("Paused schedule %q: no tick is published until it is resumed (registering it again keeps it paused).", id)
			if !was {
				text = fmt.Sprintf("Schedule %q was already paused: nothing changed.", id)
			}
		}
	case "resume":
		var was bool
		if was, err = h.insp.ResumeSchedule(ctx, id); err == nil {
			text = fmt.Sprintf("Schedule %q was not paused: nothing changed.", id)
			if was {
				text = fmt.Sprintf("Resumed schedule %q%s. The ticks it missed while paused are not published: trigger one if the latest matters.", id, h.nextTick(ctx, id))
			}
		}
	case "trigger":
		if err = h.insp.TriggerSchedule(ctx, id); err == nil {
			text = fmt.Sprintf("Published a tick of schedule %q to topic %q; its next tick is unchanged.", id, s.Topic)
		}
	case "remove":
		var existed bool
		if existed, err = h.insp.RemoveSchedule(ctx, id); err == nil {
			text = fmt.Sprintf("Removed schedule %q: no tick is published from now on, except one already being published.", id)
			if !existed {
				text = fmt.Sprintf("Schedule %q was gone already: nothing changed.", id)
			}
		}
	}
	switch {
	case errors.Is(err, redisdelay.ErrUnknownSchedule): // removed since it was read
		h.fail(w, r, http.StatusNotFound, unknownSchedule(id))
		return
	case err != nil:
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	h.render(w, r, http.StatusOK, "result", "Schedule", "", resultData{text, back})
}

// nextTick says when a resumed schedule ticks next, read back from Redis
// (the resume counted from Redis's clock), or "" when it cannot be read.
func (h *handler) nextTick(ctx context.Context, id string) string {
	all, err := h.insp.Schedules(ctx)
	if err != nil {
		return ""
	}
	for _, s := range all {
		if s.ID == id && !s.Next.IsZero() {
			return fmt.Sprintf(": its next tick is at %s (%s)", s.Next.UTC().Format("2006-01-02 15:04:05.000 UTC"), since(s.Next))
		}
	}
	return ""
}
