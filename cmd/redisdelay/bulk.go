package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// progressInterval spaces a bulk action's progress lines. Tests set it to
// 0 for a line per batch.
var progressInterval = time.Second

// errStalled cancels a bulk action whose batch took longer than --timeout.
var errStalled = errors.New("stalled")

// bulkAction is the bulk form of an action: what it runs, and the words
// of its reports.
type bulkAction struct {
	name         string // the command, in messages
	verb, did    string // "cancel", "cancelled"
	topic, group string
	due          *time.Time // reschedule's new due time
	// what names n of the messages it acts on, for the summary.
	what func(n int64) string
	// resumeNote is added to the hint on how to go on.
	resumeNote string
	run        func(ctx context.Context, o redisdelay.BulkOptions) (redisdelay.BulkProgress, error)
}

// bulkJSON is the output of a bulk action.
type bulkJSON struct {
	Topic   string     `json:"topic"`
	Group   string     `json:"group,omitempty"`
	Due     *time.Time `json:"due,omitempty"` // reschedule
	Scanned int64      `json:"scanned"`
	Matched int64      `json:"matched"`
	Done    int64      `json:"done"` // 0 in a dry run
	DryRun  bool       `json:"dry_run"`
	// Cursor is where a run that stopped (exit status 1) goes on from
	// (--resume); "" once the run is complete, or when one that stopped in
	// its first batch is to start over.
	Cursor string `json:"cursor"`
}

// runBulk runs a bulk action with its progress on stderr. The run is not
// bounded by --timeout as a whole, which over millions of messages would
// stop it every time: the context ends on SIGINT or SIGTERM, or when a
// batch takes longer than --timeout, which a Redis that stopped answering
// does.
func (e *env) runBulk(a bulkAction) error {
	f, timeout := e.flags, e.opts.timeout
	ctx, cancel := context.WithCancelCause(e.signals)
	defer cancel(nil)
	watchdog := time.AfterFunc(timeout, func() { cancel(errStalled) })
	defer watchdog.Stop()
	counts := func(p redisdelay.BulkProgress) string {
		s := fmt.Sprintf("read %d, matched %d", p.Scanned, p.Matched)
		if !f.dryRun {
			s += fmt.Sprintf(", %s %d", a.did, p.Done)
		}
		return s
	}
	label := a.name
	if f.dryRun {
		label += " --dry-run"
	}
	last := e.now()
	o := redisdelay.BulkOptions{All: f.all, DryRun: f.dryRun, Cursor: f.resume, Progress: func(p redisdelay.BulkProgress) {
		watchdog.Reset(timeout)
		if now := e.now(); p.Cursor != "" && now.Sub(last) >= progressInterval {
			last = now
			fmt.Fprintf(e.stderr, "redisdelay: %s: %s so far\n", label, counts(p))
		}
	}}
	p, err := a.run(ctx, o)
	out := bulkJSON{Topic: a.topic, Group: a.group, Due: a.due, Scanned: p.Scanned, Matched: p.Matched, Done: p.Done, DryRun: f.dryRun, Cursor: p.Cursor}
	if err != nil {
		if p.Scanned == 0 && ctx.Err() == nil {
			return err // refused before reading: nothing to go on from
		}
		if out.Cursor == "" {
			// The first batch failed: go on from where the run started.
			out.Cursor = f.resume
		}
		if e.opts.json {
			if werr := writeJSON(e.stdout, out); werr != nil {
				return werr
			}
		}
		next := "run the same command again"
		if out.Cursor != "" {
			next = "run the same command with --resume " + shellWord(out.Cursor) + a.resumeNote
		}
		fmt.Fprintf(e.stderr, "redisdelay: %s stopped (%s): %s; to go on, %s\n", label, e.stopReason(ctx, err), counts(p), next)
		return errReported
	}
	switch {
	case e.opts.json:
		return writeJSON(e.stdout, out)
	case f.dryRun:
		fmt.Fprintf(e.stdout, "would %s %s (read %d); nothing changed: --dry-run\n", a.verb, a.what(p.Matched), p.Scanned)
	default:
		fmt.Fprintf(e.stdout, "%s %s (read %d, matched %d)\n", a.did, a.what(p.Done), p.Scanned, p.Matched)
	}
	return nil
}

// waitingMessages counts waiting messages in words.
func waitingMessages(n int64) string {
	if n == 1 {
		return "1 waiting message"
	}
	return fmt.Sprintf("%d waiting messages", n)
}

// confirmAll refuses --all without --yes or --dry-run, as purge does
// without --yes: it says what it would do, and does nothing.
func (e *env) confirmAll(name, topic string) error {
	f := e.flags
	if !f.all || f.yes || f.dryRun {
		return nil
	}
	st, err := e.insp.Stats(e.ctx, topic)
	if err != nil {
		return err
	}
	verb := name
	if name == "run-now" {
		verb = "run now"
	}
	return usagef(lookup(name), "%s: --all would %s every waiting message of topic %q, %s now (see \"redisdelay waiting %s\"); nothing changed: add --yes to go ahead, or --dry-run to count them",
		name, verb, topic, waitingMessages(st.Waiting), topic)
}

func (e *env) cancelWhere(topic string) error {
	if err := e.confirmAll("cancel", topic); err != nil {
		return err
	}
	filter := e.flags.filter()
	return e.runBulk(bulkAction{
		name: "cancel", verb: "cancel", did: "cancelled", topic: topic,
		what: func(n int64) string { return fmt.Sprintf("%s of topic %q", waitingMessages(n), topic) },
		run: func(ctx context.Context, o redisdelay.BulkOptions) (redisdelay.BulkProgress, error) {
			return e.insp.CancelWhere(ctx, topic, filter, o)
		},
	})
}

func (e *env) rescheduleWhere(topic string, due time.Time) error {
	if err := e.confirmAll("reschedule", topic); err != nil {
		return err
	}
	f, filter := e.flags, e.flags.filter()
	// Redis keeps due times to the millisecond: report the one stored.
	at := due.UTC().Truncate(time.Millisecond)
	a := bulkAction{
		name: "reschedule", verb: "reschedule", did: "rescheduled", topic: topic, due: &at,
		what: func(n int64) string {
			return fmt.Sprintf("%s of topic %q to %s", waitingMessages(n), topic, at.Format(dueLayout))
		},
		run: func(ctx context.Context, o redisdelay.BulkOptions) (redisdelay.BulkProgress, error) {
			return e.insp.RescheduleWhere(ctx, topic, filter, at, o)
		},
	}
	if f.inSet {
		// Messages already at the new due time are left alone: going on
		// with the same instant, not another "--in" from a later now,
		// moves none of them twice.
		a.resumeNote = fmt.Sprintf(" and --at %s in place of --in %s", at.Format(time.RFC3339Nano), f.in)
	}
	return e.runBulk(a)
}

func (e *env) requeueWhere(topic, group string) error {
	filter := e.flags.filter()
	return e.runBulk(bulkAction{
		name: "requeue", verb: "requeue", did: "requeued", topic: topic, group: group,
		what: func(n int64) string { return fmt.Sprintf("%s to group %q of topic %q", deadLetters(n), group, topic) },
		run: func(ctx context.Context, o redisdelay.BulkOptions) (redisdelay.BulkProgress, error) {
			return e.insp.RequeueDeadLettersWhere(ctx, topic, group, filter, o)
		},
	})
}

func (e *env) deleteDeadWhere(topic, group string) error {
	filter := e.flags.filter()
	return e.runBulk(bulkAction{
		name: "delete-dead", verb: "delete", did: "deleted", topic: topic, group: group,
		what: func(n int64) string { return fmt.Sprintf("%s of group %q in topic %q", deadLetters(n), group, topic) },
		run: func(ctx context.Context, o redisdelay.BulkOptions) (redisdelay.BulkProgress, error) {
			return e.insp.DeleteDeadLettersWhere(ctx, topic, group, filter, o)
		},
	})
}
