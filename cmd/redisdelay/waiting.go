// The commands on waiting messages: waiting, show, cancel, reschedule
// (run-now is in states.go, with the other group states).

package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// checkWaitingForm checks which form of cancel or reschedule the command
// line asks for: one message (a UUID or --key), a filter, or --all.
func checkWaitingForm(name string, pos []string, f *cmdFlags) error {
	if err := f.checkFilter(time.Now()); err != nil {
		return err
	}
	uuid := len(pos) > 1
	does, verb := name+"s", name
	if name == "run-now" {
		does, verb = "makes due now", "run now"
	}
	switch {
	case f.key != "" && uuid:
		return errors.New("give a UUID or --key, not both")
	case f.all && (uuid || f.key != ""):
		return fmt.Errorf("--all %s every waiting message: give it without a UUID or --key", does)
	case f.all && f.hasFilter():
		return fmt.Errorf("give --all or a filter, not both: --all %s every waiting message, a filter those it selects", does)
	case f.hasFilter() && uuid:
		return errors.New("give a UUID or a filter, not both: a filter selects messages by what they carry")
	case f.hasFilter() && f.key != "":
		return errors.New("give --key or a filter, not both (--key-prefix selects messages by the start of their business key)")
	case !uuid && f.key == "" && !f.bulk():
		return fmt.Errorf("give the UUID of the message to %s, --key K, %s or --all", verb, filterHelp)
	}
	if err := checkBulkExtras(f, "a UUID or --key", filterHelp+" or --all"); err != nil {
		return err
	}
	if f.resume != "" {
		return checkBulkCursor("--resume", f.resume)
	}
	return nil
}

// checkPage checks --offset and --limit before Redis is asked.
func checkPage(offset, limit int) error {
	if offset < 0 {
		return fmt.Errorf("--offset is %d: use 0 or more", offset)
	}
	if limit < 1 || limit > 10000 {
		return fmt.Errorf("--limit is %d: use 1 to 10000", limit)
	}
	return nil
}

func cmdWaiting(e *env, pos []string) error {
	topic, f := pos[0], e.flags
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	msgs, err := e.insp.Waiting(e.ctx, topic, f.offset, f.limit)
	if err != nil {
		return err
	}
	now := e.now()
	if e.opts.json {
		out := make([]waitingJSON, 0, len(msgs))
		for _, m := range msgs {
			out = append(out, e.waitingJSON(m, now))
		}
		return writeJSON(e.stdout, out)
	}
	if len(msgs) == 0 {
		fmt.Fprintf(e.stdout, "no waiting messages in topic %q", topic)
		if f.offset > 0 {
			fmt.Fprintf(e.stdout, " after offset %d", f.offset)
		}
		fmt.Fprintln(e.stdout)
		return nil
	}
	if f.payload {
		writeWaitingRecords(e.stdout, msgs, now, f.maxPayload)
	} else {
		writeWaitingTable(e.stdout, msgs, now)
	}
	if len(msgs) == f.limit {
		fmt.Fprintf(e.stderr, "(first %d shown; next page: --offset %d)\n", f.limit, f.offset+f.limit)
	}
	return nil
}

func cmdCancel(e *env, pos []string) error {
	topic := pos[0]
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	if e.flags.bulk() {
		return e.cancelWhere(topic)
	}
	// The Inspector looks in every partition, by the count stored in Redis.
	out := cancelJSON{Topic: topic, Key: e.flags.key}
	var err error
	if out.Key != "" {
		out.Cancelled, err = e.insp.CancelKey(e.ctx, topic, out.Key)
	} else {
		out.UUID = pos[1]
		out.Cancelled, err = e.insp.Cancel(e.ctx, topic, out.UUID)
	}
	switch {
	case err != nil:
		return err
	case e.opts.json:
		return writeJSON(e.stdout, out)
	case out.Key != "" && out.Cancelled:
		fmt.Fprintf(e.stdout, "cancelled the message holding business key %q in topic %q\n", out.Key, topic)
	case out.Key != "":
		fmt.Fprintf(e.stdout, "not cancelled: no waiting message holds business key %q in topic %q (unknown, already cancelled, or already due)\n", out.Key, topic)
	case out.Cancelled:
		fmt.Fprintf(e.stdout, "cancelled message %s in topic %q\n", out.UUID, topic)
	default:
		fmt.Fprintf(e.stdout, "not cancelled: no message %s is waiting in topic %q (unknown, already cancelled, or already due)\n", out.UUID, topic)
	}
	return nil
}

func cmdReschedule(e *env, pos []string) error {
	topic := pos[0]
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	f := e.flags
	due := time.Now().Add(f.in)
	if f.at != "" && f.at != "now" {
		due, _ = time.Parse(time.RFC3339Nano, f.at) // checked
	}
	if f.bulk() {
		err := e.rescheduleWhere(topic, due)
		if err == nil && !f.dryRun {
			e.warnUnscheduled(topic)
		}
		return err
	}
	out := rescheduleJSON{Topic: topic, Key: f.key, Due: due.UTC()}
	var err error
	if out.Key != "" {
		out.Rescheduled, err = e.insp.RescheduleKey(e.ctx, topic, out.Key, due)
	} else {
		out.UUID = pos[1]
		out.Rescheduled, err = e.insp.Reschedule(e.ctx, topic, out.UUID, due)
	}
	if err == nil && out.Rescheduled {
		// Show the due time as stored: Redis's clock sets it, to the ms.
		var w redisdelay.WaitingMessage
		var found bool
		if out.Key != "" {
			w, found, err = e.insp.FindWaitingKey(e.ctx, topic, out.Key)
		} else {
			w, found, err = e.insp.FindWaiting(e.ctx, topic, out.UUID)
		}
		if found {
			out.Due = w.Due.UTC()
		}
	}
	when := out.Due.Format(dueLayout)
	if err == nil && out.Rescheduled {
		e.warnUnscheduled(topic)
	}
	switch {
	case err != nil:
		return err
	case e.opts.json:
		return writeJSON(e.stdout, out)
	case out.Key != "" && out.Rescheduled:
		fmt.Fprintf(e.stdout, "rescheduled the message holding business key %q in topic %q to %s\n", out.Key, topic, when)
	case out.Key != "":
		fmt.Fprintf(e.stdout, "not rescheduled: no waiting message holds business key %q in topic %q (unknown, cancelled, or already due)\n", out.Key, topic)
	case out.Rescheduled:
		fmt.Fprintf(e.stdout, "rescheduled message %s in topic %q to %s\n", out.UUID, topic, when)
	default:
		fmt.Fprintf(e.stdout, "not rescheduled: no message %s is waiting in topic %q (unknown, cancelled, or already due)\n", out.UUID, topic)
	}
	return nil
}

// waitingJSON and deadJSON add the payload when it was asked for.
func (e *env) waitingJSON(m redisdelay.WaitingMessage, now time.Time) waitingJSON {
	out := toWaitingJSON(m, now)
	if e.flags.payload && m.Corrupt == "" {
		out.payloadJSON = toPayloadJSON(m.Message.Payload, e.flags.maxPayload)
	}
	return out
}

// showJSON is show's output: where the message was found.
type showJSON struct {
	Topic   string        `json:"topic"`
	UUID    string        `json:"uuid"`
	Waiting []waitingJSON `json:"waiting"`
	Dead    []groupDead   `json:"dead"`
}

type groupDead struct {
	Group string `json:"group"`
	deadJSON
}

// cmdShow looks for the UUID among the topic's waiting messages and every
// group's dead letters, a page at a time: the Inspector has no index by
// UUID, and an operator's look-up can afford the scan.
func cmdShow(e *env, pos []string) error {
	topic, uuid := pos[0], pos[1]
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	e.flags.payload = true
	now := e.now()
	var waiting []redisdelay.WaitingMessage
	for offset := 0; ; offset += showPage {
		page, err := e.insp.Waiting(e.ctx, topic, offset, showPage)
		if err != nil {
			return err
		}
		for _, m := range page {
			if m.Message.UUID == uuid {
				waiting = append(waiting, m)
			}
		}
		if len(page) < showPage {
			break
		}
	}
	st, err := e.insp.Stats(e.ctx, topic)
	if err != nil {
		return err
	}
	slices.SortFunc(st.Groups, func(a, b redisdelay.GroupStats) int { return strings.Compare(a.Group, b.Group) })
	type found struct {
		group string
		dead  redisdelay.DeadLetter
	}
	var dead []found
	for _, g := range st.Groups {
		for after := ""; ; {
			page, err := e.insp.DeadLetters(e.ctx, topic, g.Group, after, showPage)
			if err != nil {
				return err
			}
			for _, d := range page {
				if d.Message != nil && d.Message.UUID == uuid {
					dead = append(dead, found{g.Group, d})
				}
			}
			if len(page) < showPage {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	if len(waiting) == 0 && len(dead) == 0 {
		return fmt.Errorf("redisdelay: no waiting message and no dead letter has UUID %q in topic %q (delivered and acknowledged messages are not kept; see \"redisdelay stats %s\")", uuid, topic, topic)
	}
	if e.opts.json {
		out := showJSON{Topic: topic, UUID: uuid, Waiting: []waitingJSON{}, Dead: []groupDead{}}
		for _, m := range waiting {
			out.Waiting = append(out.Waiting, e.waitingJSON(m, now))
		}
		for _, d := range dead {
			out.Dead = append(out.Dead, groupDead{d.group, e.deadJSON(d.dead)})
		}
		return writeJSON(e.stdout, out)
	}
	writeWaitingRecords(e.stdout, waiting, now, e.flags.maxPayload)
	for i, d := range dead {
		if i > 0 || len(waiting) > 0 {
			fmt.Fprintln(e.stdout)
		}
		writeDeadRecords(e.stdout, d.group, []redisdelay.DeadLetter{d.dead}, e.flags.maxPayload)
	}
	return nil
}
