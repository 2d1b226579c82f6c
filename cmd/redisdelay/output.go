package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/present"
)

// The JSON output, one document per command: an array for the listings,
// an object for the actions. Times are RFC 3339 in UTC.

type statsJSON struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	Waiting    int64  `json:"waiting"`
	// WaitingForGroup counts the grouped messages of Waiting that wait for
	// the topic's first consumer group (no scheduler needed until then).
	WaitingForGroup int64 `json:"waiting_for_group"`
	Stream          int64 `json:"stream"`
	// Leased counts the partitions whose scheduling lease a scheduler
	// holds; Scheduler says it in a word: "yes" (all), "partial", "no"
	// (none while messages wait: they are not delivered), "idle" (none,
	// nothing waiting: no fault).
	Leased    int    `json:"leased"`
	Scheduler string `json:"scheduler"`
	// OverdueMs is how long ago the earliest waiting message fell due (0:
	// none did): more than a second or so means no scheduler moves it.
	OverdueMs int64       `json:"overdue_ms"`
	Groups    []groupJSON `json:"groups"`
}

type groupJSON struct {
	Group string `json:"group"`
	// Ready is -1 when Redis cannot tell.
	Ready       int64 `json:"ready"`
	Pending     int64 `json:"pending"`
	Retry       int64 `json:"retry"`
	Dead        int64 `json:"dead"`
	DeadTotal   int64 `json:"dead_total"`
	DeadEvicted int64 `json:"dead_evicted"`
	Consumers   int64 `json:"consumers"`
	// Grouped counts grouped messages (redisdelay.GroupKey) queued in their
	// groups, not yet taken (not in Ready); ActiveGroups the groups holding
	// queued or unsettled messages.
	Grouped      int64 `json:"grouped"`
	ActiveGroups int64 `json:"active_groups"`
	Paused       bool  `json:"paused"`
}

type waitingJSON struct {
	UUID string    `json:"uuid"`
	Due  time.Time `json:"due"`
	// DueInMs is how long until it is due, negative when it is being moved
	// to the ready stream.
	DueInMs      int64             `json:"due_in_ms"`
	PayloadBytes int               `json:"payload_bytes"`
	Metadata     map[string]string `json:"metadata"`
	// Corrupt says why the stored message could not be decoded (empty when
	// it could); PayloadBytes and Metadata are empty then.
	Corrupt string `json:"corrupt,omitempty"`
	// With --payload; omitted otherwise.
	payloadJSON
}

type deadJSON struct {
	ID       string    `json:"id"`
	Time     time.Time `json:"time"`
	Attempts int       `json:"attempts"`
	Reason   string    `json:"reason"`
	// UUID, PayloadBytes and Metadata are empty for an entry that could not
	// be decoded; UndecodableBytes is its size then.
	UUID             string            `json:"uuid"`
	PayloadBytes     int               `json:"payload_bytes"`
	Metadata         map[string]string `json:"metadata"`
	UndecodableBytes int               `json:"undecodable_bytes,omitempty"`
	// With --payload; omitted otherwise.
	payloadJSON
}

type cancelJSON struct {
	Topic     string `json:"topic"`
	UUID      string `json:"uuid,omitempty"`
	Key       string `json:"key,omitempty"`
	Cancelled bool   `json:"cancelled"`
}

type rescheduleJSON struct {
	Topic       string    `json:"topic"`
	UUID        string    `json:"uuid,omitempty"`
	Key         string    `json:"key,omitempty"`
	Due         time.Time `json:"due"` // as asked; Redis keeps it rounded up to the ms
	Rescheduled bool      `json:"rescheduled"`
}

type requeueJSON struct {
	Topic    string   `json:"topic"`
	Group    string   `json:"group"`
	Requeued int      `json:"requeued"`
	Missing  []string `json:"missing"` // IDs given that were not found
}

type pauseJSON struct {
	Topic  string `json:"topic"`
	Group  string `json:"group"`
	Paused bool   `json:"paused"`
	// WasPaused is whether the group was paused before the command: set by
	// pause and resume.
	WasPaused bool `json:"was_paused"`
}

type purgeJSON struct {
	Topic  string `json:"topic"`
	Group  string `json:"group"`
	Purged int64  `json:"purged"`
}

type deleteJSON struct {
	Topic   string `json:"topic"`
	Group   string `json:"group"`
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

type scheduleJSON struct {
	ID       string `json:"id"`
	Spec     string `json:"spec"`
	Timezone string `json:"timezone"` // "UTC" when the schedule names none
	Topic    string `json:"topic"`
	// Next is the next tick not yet published.
	Next            time.Time  `json:"next"` // zero while paused
	Paused          *time.Time `json:"paused,omitempty"`
	CatchUpWindowMs int64      `json:"catch_up_window_ms"` // the window in effect (the default when none is set)
	JitterMs        int64      `json:"jitter_ms,omitempty"`
	// Overlap is the overlap policy in effect: "allow" (the default) or
	// "skip"; Skipped counts the ticks it skipped, the last at LastSkipped.
	Overlap     string     `json:"overlap"`
	Skipped     int64      `json:"skipped"`
	LastSkipped *time.Time `json:"last_skipped,omitempty"`
	// LastTick is the tick published last (by a scheduler, or a trigger).
	LastTick     *time.Time        `json:"last_tick,omitempty"`
	PayloadBytes int               `json:"payload_bytes"`
	Metadata     map[string]string `json:"metadata"`
}

type schedulePauseJSON struct {
	ID     string `json:"id"`
	Paused bool   `json:"paused"`
	// WasPaused is whether it was paused before the command.
	WasPaused bool `json:"was_paused"`
	// Next is the next tick, set by resume-schedule.
	Next *time.Time `json:"next,omitempty"`
}

type triggerJSON struct {
	ID        string `json:"id"`
	Triggered bool   `json:"triggered"`
}

type unscheduleJSON struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
}

func toScheduleJSON(s redisdelay.Schedule) scheduleJSON {
	md := s.Metadata
	if md == nil {
		md = map[string]string{}
	}
	tz, window := s.Timezone, s.CatchUpWindow
	if tz == "" {
		tz = "UTC"
	}
	if window == 0 {
		window = redisdelay.DefaultCatchUpWindow
	}
	out := scheduleJSON{ID: s.ID, Spec: s.Spec, Timezone: tz, Topic: s.Topic, Next: s.Next.UTC(),
		CatchUpWindowMs: window.Milliseconds(), JitterMs: s.Jitter.Milliseconds(), Overlap: overlapName(s.Overlap),
		Skipped: s.Skipped, PayloadBytes: len(s.Payload), Metadata: md}
	if !s.Paused.IsZero() {
		at := s.Paused.UTC()
		out.Paused = &at
	}
	if !s.LastSkipped.IsZero() {
		at := s.LastSkipped.UTC()
		out.LastSkipped = &at
	}
	if !s.LastTick.IsZero() {
		at := s.LastTick.UTC()
		out.LastTick = &at
	}
	return out
}

// overlapName names an overlap policy, the default included.
func overlapName(o redisdelay.Overlap) string {
	if o == redisdelay.OverlapAllow {
		return "allow"
	}
	return string(o)
}

// skippedCell is the SKIPPED cell of a schedule: the ticks its overlap
// policy skipped, and the last one.
func skippedCell(s redisdelay.Schedule) string {
	if s.Skipped == 0 || s.LastSkipped.IsZero() {
		return strconv.FormatInt(s.Skipped, 10)
	}
	return fmt.Sprintf("%d (last %s)", s.Skipped, s.LastSkipped.UTC().Format(time.RFC3339))
}

func writeSchedulesTable(w io.Writer, all []redisdelay.Schedule, now time.Time) {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tSPEC\tTIMEZONE\tTOPIC\tNEXT\tIN\tLAST TICK\tOVERLAP\tSKIPPED")
	for _, s := range all {
		tz := s.Timezone
		if tz == "" {
			tz = "UTC"
		}
		next, in := s.Next.UTC().Format(time.RFC3339), dueIn(s.Next, now)
		if !s.Paused.IsZero() {
			next, in = "paused", "since "+s.Paused.UTC().Format(time.RFC3339)
		}
		last := "-"
		if !s.LastTick.IsZero() {
			last = s.LastTick.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(s.ID), printable(s.Spec), printable(tz), printable(s.Topic), next, in,
			last, printable(overlapName(s.Overlap)), skippedCell(s))
	}
	_ = tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func nonNilMap(m message.Metadata) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func toStatsJSON(ts topicStatus) statsJSON {
	st := ts.TopicStats
	word := schedulerCell(st)
	if strings.Contains(word, "/") {
		word = "partial"
	}
	out := statsJSON{Topic: st.Topic, Partitions: st.Partitions, Waiting: st.Waiting, WaitingForGroup: st.WaitingForGroup, Stream: st.Stream, Groups: []groupJSON{},
		Leased: st.Leased, Scheduler: word, OverdueMs: ts.overdue.Milliseconds()}
	for _, g := range st.Groups {
		out.Groups = append(out.Groups, groupJSON{
			Group: g.Group, Ready: g.Ready, Pending: g.Pending, Retry: g.Retry, Dead: g.Dead,
			DeadTotal: g.DeadTotal, DeadEvicted: g.DeadEvicted, Consumers: g.Consumers, Paused: g.Paused,
			Grouped: g.Grouped, ActiveGroups: g.ActiveGroups,
		})
	}
	return out
}

func toWaitingJSON(m redisdelay.WaitingMessage, now time.Time) waitingJSON {
	return waitingJSON{
		UUID: m.Message.UUID, Due: m.Due.UTC(), DueInMs: m.Due.Sub(now).Milliseconds(),
		PayloadBytes: len(m.Message.Payload), Metadata: nonNilMap(m.Message.Metadata), Corrupt: m.Corrupt,
	}
}

func toDeadJSON(d redisdelay.DeadLetter) deadJSON {
	out := deadJSON{ID: d.ID, Time: d.Time.UTC(), Attempts: d.Attempts, Reason: d.Reason, Metadata: map[string]string{}}
	if d.Message != nil {
		out.UUID, out.PayloadBytes, out.Metadata = d.Message.UUID, len(d.Message.Payload), nonNilMap(d.Message.Metadata)
	} else {
		out.UndecodableBytes = len(d.Body)
	}
	return out
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func writeStatsTable(w io.Writer, all []topicStatus) {
	tw := newTable(w)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tWAITING\tSTREAM\tGROUPS\tSCHEDULER\tOVERDUE")
	for _, st := range all {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", printable(st.Topic), st.Partitions, st.Waiting, st.Stream, len(st.Groups),
			schedulerCell(st.TopicStats), overdueCell(st.overdue))
	}
	_ = tw.Flush()
	groups := 0
	for _, st := range all {
		groups += len(st.Groups)
	}
	if groups == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "TOPIC\tGROUP\tREADY\tPENDING\tRETRY\tDEAD\tDEAD TOTAL\tEVICTED\tCONSUMERS\tGROUPED\tACTIVE GROUPS\tPAUSED")
	for _, st := range all {
		for _, g := range st.Groups {
			ready := strconv.FormatInt(g.Ready, 10)
			if g.Ready < 0 {
				ready = "?"
			}
			paused := "no"
			if g.Paused {
				paused = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", printable(st.Topic), printable(g.Group), ready, g.Pending, g.Retry, g.Dead, g.DeadTotal, g.DeadEvicted, g.Consumers, g.Grouped, g.ActiveGroups, paused)
		}
	}
	_ = tw.Flush()
}

func writeWaitingTable(w io.Writer, msgs []redisdelay.WaitingMessage, now time.Time) {
	tw := newTable(w)
	fmt.Fprintln(tw, "UUID\tDUE\tIN\tKEY\tSIZE\tMETADATA")
	for _, m := range msgs {
		size, md := strconv.Itoa(len(m.Message.Payload)), metadataSummary(m.Message.Metadata)
		key := "-"
		if k := m.Message.Metadata.Get(redisdelay.BusinessKey); k != "" {
			key = truncate(printable(k), 32)
		}
		if m.Corrupt != "" {
			size, md = "-", "CORRUPT: "+printable(m.Corrupt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(m.Message.UUID), m.Due.UTC().Format(time.RFC3339), dueIn(m.Due, now), key, size, md)
	}
	_ = tw.Flush()
}

func writeDeadTable(w io.Writer, dead []redisdelay.DeadLetter) {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tTIME\tATTEMPTS\tUUID\tREASON\tMETADATA")
	for _, d := range dead {
		uuid, md := "-", "-"
		if d.Message != nil {
			uuid, md = printable(d.Message.UUID), metadataSummary(withoutError(d.Message.Metadata))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", d.ID, d.Time.UTC().Format(time.RFC3339), d.Attempts, uuid, truncate(printable(oneLine(d.Reason)), 60), md)
	}
	_ = tw.Flush()
}

// dueIn says how long until due, rounded to the second: "in 5m3s"; once
// passed, "overdue by 4m33s": a scheduler moves a due message within
// milliseconds, so one still listed a second after is not being moved
// (see the SCHEDULER column of stats).
func dueIn(due, now time.Time) string {
	d := due.Sub(now)
	switch {
	case d <= -time.Second:
		return present.Overdue(-d)
	case d <= 0:
		return "due now"
	case d < time.Second:
		return "in <1s"
	}
	return "in " + present.Duration(d)
}

// withoutError leaves out RecordError's metadata, which the REASON column
// shows already.
func withoutError(md message.Metadata) message.Metadata {
	if _, ok := md[redisdelay.ErrorKey]; !ok {
		return md
	}
	out := make(message.Metadata, len(md))
	for k, v := range md {
		if k != redisdelay.ErrorKey {
			out[k] = v
		}
	}
	return out
}

// hiddenMetadata are keys the table leaves out: the due time is shown on
// its own, the attempt is an internal counter.
func hiddenMetadata(k string) bool {
	return strings.HasPrefix(k, "_watermill_delayed") || k == redisdelay.AttemptKey || k == redisdelay.BusinessKey
}

// metadataSummary shows the metadata as sorted k=v pairs, shortened;
// --json has all of it.
func metadataSummary(md message.Metadata) string {
	keys := make([]string, 0, len(md))
	for k := range md {
		if !hiddenMetadata(k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "-"
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = printable(k) + "=" + truncate(printable(oneLine(md[k])), 24)
	}
	return truncate(strings.Join(parts, " "), 60)
}

// printable escapes what a terminal would act on (control characters,
// escape sequences, bidirectional overrides, invalid UTF-8) as in Go
// literals (\x1b, \a, \u202e): texts from Redis come from whoever
// published or registered them. The dashboard shows them the same way.
func printable(s string) string { return present.Visible(s) }

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
