package main

import (
	"context"
	"errors"
	"fmt"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// searchCalls bounds the Inspector calls of one search. Each reads at most
// 10,000 stored messages, so a search that finds few matches in a large
// topic hands back a cursor after 100,000, well within the default
// --timeout, rather than run into it. Tests lower it.
var searchCalls = 10

// searchCallReads is how many stored messages one Inspector search call
// reads at most.
const searchCallReads = 10000

// searchJSON is search's output.
type searchJSON[T any] struct {
	Topic   string `json:"topic"`
	Group   string `json:"group,omitempty"` // dead letters of this group; none: waiting messages
	Matches []T    `json:"matches"`
	// Cursor gives the next page (--cursor), "" once all was read.
	Cursor string `json:"cursor"`
}

// cmdSearch calls the Inspector until it has --limit matches, all was
// read, or searchCalls calls were made: each call reads at most 10,000
// stored messages and may return none with a cursor, and a user should
// not be handed a run of empty pages.
func cmdSearch(e *env, pos []string) error {
	topic, f := pos[0], e.flags
	if f.group != "" {
		if _, err := e.knownGroup(topic, f.group); err != nil {
			return err
		}
	} else if err := e.knownTopics(topic); err != nil {
		return err
	}
	filter := f.filter()
	var (
		waiting []redisdelay.WaitingMessage
		dead    []redisdelay.DeadLetter
		cursor  = f.cursor
		err     error
		calls   int
	)
	for calls < searchCalls {
		want := f.limit - len(waiting) - len(dead)
		var next string
		if f.group == "" {
			var page []redisdelay.WaitingMessage
			page, next, err = e.insp.SearchWaiting(e.ctx, topic, filter, cursor, want)
			waiting = append(waiting, page...)
		} else {
			var page []redisdelay.DeadLetter
			page, next, err = e.insp.SearchDeadLetters(e.ctx, topic, f.group, filter, cursor, want)
			dead = append(dead, page...)
		}
		if err != nil {
			break
		}
		calls++
		cursor = next
		if cursor == "" || len(waiting)+len(dead) == f.limit {
			break
		}
	}
	if err != nil && calls == 0 {
		return err
	}
	found := len(waiting) + len(dead)
	now := e.now()
	switch {
	case e.opts.json && f.group == "":
		out := searchJSON[waitingJSON]{Topic: topic, Matches: []waitingJSON{}, Cursor: cursor}
		for _, m := range waiting {
			out.Matches = append(out.Matches, e.waitingJSON(m, now))
		}
		if werr := writeJSON(e.stdout, out); werr != nil {
			return werr
		}
	case e.opts.json:
		out := searchJSON[deadJSON]{Topic: topic, Group: f.group, Matches: []deadJSON{}, Cursor: cursor}
		for _, d := range dead {
			out.Matches = append(out.Matches, e.deadJSON(d))
		}
		if werr := writeJSON(e.stdout, out); werr != nil {
			return werr
		}
	case found == 0:
		what := fmt.Sprintf("no waiting message of topic %q matches", topic)
		if f.group != "" {
			what = fmt.Sprintf("no dead letter of group %q in topic %q matches", f.group, topic)
		}
		switch {
		case cursor != "":
			what += " among those read so far"
		case f.cursor != "":
			what += " after the cursor"
		}
		fmt.Fprintln(e.stdout, what)
	case f.group == "" && f.payload:
		writeWaitingRecords(e.stdout, waiting, now, f.maxPayload)
	case f.group == "":
		writeWaitingTable(e.stdout, waiting, now)
	case f.payload:
		writeDeadRecords(e.stdout, f.group, dead, f.maxPayload)
	default:
		writeDeadTable(e.stdout, dead)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "redisdelay: search stopped (%s) after %d match(es); to search on: --cursor %s\n",
			e.stopReason(e.ctx, err), found, shellWord(cursor))
		return errReported
	}
	switch {
	case cursor == "" || e.opts.json:
	case found == f.limit:
		fmt.Fprintf(e.stderr, "(%d shown; next page: --cursor %s)\n", found, shellWord(cursor))
	default:
		fmt.Fprintf(e.stderr, "(%d shown; stopped after reading up to %d stored messages, the bound of one search: more may match; next page: --cursor %s)\n",
			found, searchCalls*searchCallReads, shellWord(cursor))
	}
	return nil
}

// stopReason says why a long command stopped: interrupted, out of time, or
// the error.
func (e *env) stopReason(ctx context.Context, err error) string {
	switch {
	case e.signals.Err() != nil:
		return "interrupted"
	case errors.Is(context.Cause(ctx), errStalled):
		return fmt.Sprintf("no batch of 1,000 messages done within --timeout %s", e.opts.timeout)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Sprintf("gave up after --timeout %s", e.opts.timeout)
	}
	return err.Error()
}
