// The commands on waiting messages: waiting, show, cancel, reschedule
// (run-now is in states.go, with the other group states).

package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

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
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
		return notFoundUnless(out.Cancelled)
	case out.Key != "" && out.Cancelled:
		fmt.Fprintf(e.stdout, "cancelled the message holding business key %q in topic %q\n", out.Key, topic)
	case out.Key != "":
		fmt.Fprintf(e.stdout, "not cancelled: no waiting message holds business key %q in topic %q (unknown, already cancelled, or already due)\n", out.Key, topic)
	case out.Cancelled:
		fmt.Fprintf(e.stdout, "cancelled message %s in topic %q\n", out.UUID, topic)
	default:
		fmt.Fprintf(e.stdout, "not cancelled: no message %s is waiting in topic %q (unknown, already cancelled, or already due)\n", out.UUID, topic)
	}
	return notFoundUnless(out.Cancelled)
}

// notFoundUnless is the exit of a command on one message: exit status 3
// (errNotFound) when the message was not there, so a mistyped UUID or key
// does not pass for done in a script.
func notFoundUnless(found bool) error {
	if found {
		return nil
	}
	return errNotFound
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
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
		return notFoundUnless(out.Rescheduled)
	case out.Key != "" && out.Rescheduled:
		fmt.Fprintf(e.stdout, "rescheduled the message holding business key %q in topic %q to %s\n", out.Key, topic, when)
	case out.Key != "":
		fmt.Fprintf(e.stdout, "not rescheduled: no waiting message holds business key %q in topic %q (unknown, cancelled, or already due)\n", out.Key, topic)
	case out.Rescheduled:
		fmt.Fprintf(e.stdout, "rescheduled message %s in topic %q to %s\n", out.UUID, topic, when)
	default:
		fmt.Fprintf(e.stdout, "not rescheduled: no message %s is waiting in topic %q (unknown, cancelled, or already due)\n", out.UUID, topic)
	}
	return notFoundUnless(out.Rescheduled)
}

// waitingJSON and deadJSON add the payload when it was asked for.
func (e *env) waitingJSON(m redisdelay.WaitingMessage, now time.Time) waitingJSON {
	out := toWaitingJSON(m, now)
	if e.flags.payload && m.Corrupt == "" {
		out.payloadJSON = toPayloadJSON(m.Message.Payload, e.flags.maxPayload)
	}
	return out
}

// showJSON is show's output: where the message was found. Waiting and
// Dead are the locations of those states in the form of the waiting and
// dead listings (as before Locations existed); Locations has every state.
type showJSON struct {
	Topic     string         `json:"topic"`
	UUID      string         `json:"uuid,omitempty"`
	Key       string         `json:"key,omitempty"`
	Waiting   []waitingJSON  `json:"waiting"`
	Dead      []groupDead    `json:"dead"`
	Locations []locationJSON `json:"locations"`
	// Read counts the stored entries read; Unsearched says what the
	// lookup's scan budget left unread (see Inspector.Locate).
	Read       int64    `json:"read"`
	Unsearched []string `json:"unsearched"`
}

type groupDead struct {
	Group string `json:"group"`
	deadJSON
}

// locationJSON is one place show found the message (redisdelay.Location).
type locationJSON struct {
	State            string            `json:"state"`
	Group            string            `json:"group,omitempty"`
	Partition        int               `json:"partition"`
	ID               string            `json:"id,omitempty"`
	Far              bool              `json:"far,omitempty"`
	Due              *time.Time        `json:"due,omitempty"`
	Attempt          int               `json:"attempt"`
	MessageGroup     string            `json:"message_group,omitempty"`
	Consumer         string            `json:"consumer,omitempty"`
	Renewed          *time.Time        `json:"renewed,omitempty"`
	LeaseExpires     *time.Time        `json:"lease_expires,omitempty"`
	Deliveries       int64             `json:"deliveries,omitempty"`
	Handler          string            `json:"handler,omitempty"`
	HandedAt         *time.Time        `json:"handed_at,omitempty"`
	Reason           string            `json:"reason,omitempty"`
	Died             *time.Time        `json:"died,omitempty"`
	Paused           bool              `json:"paused,omitempty"`
	Next             string            `json:"next"`
	UUID             string            `json:"uuid"`
	PayloadBytes     int               `json:"payload_bytes"`
	Metadata         map[string]string `json:"metadata"`
	UndecodableBytes int               `json:"undecodable_bytes,omitempty"`
	payloadJSON
}

// utcPtr is t in UTC, nil for the zero time (omitted in JSON).
func utcPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func (e *env) locationJSON(l redisdelay.Location) locationJSON {
	out := locationJSON{State: string(l.State), Group: l.Group, Partition: l.Partition, ID: l.ID, Far: l.Far, Due: utcPtr(l.Due),
		Attempt: l.Attempt, MessageGroup: l.MessageGroup, Consumer: l.Consumer, Renewed: utcPtr(l.Renewed), LeaseExpires: utcPtr(l.LeaseExpires),
		Deliveries: l.Deliveries, Handler: string(l.Handler), HandedAt: utcPtr(l.HandedAt), Reason: l.Reason, Died: utcPtr(l.Died), Paused: l.Paused, Next: l.Next}
	out.UUID, out.PayloadBytes, out.Metadata, out.UndecodableBytes, out.payloadJSON = e.messageFields(l.Message, l.Body)
	return out
}

// cmdShow finds the message in every state with Inspector.Locate: by index
// while it waits, by a bounded scan of the group's structures after.
func cmdShow(e *env, pos []string) error {
	topic, key := pos[0], e.flags.key
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	e.flags.payload = true
	now := e.now()
	var (
		res  redisdelay.LocateResult
		err  error
		uuid string
	)
	if key != "" {
		res, err = e.insp.LocateKey(e.ctx, topic, key)
	} else {
		uuid = pos[1]
		res, err = e.insp.Locate(e.ctx, topic, uuid)
	}
	if err != nil {
		return err
	}
	for _, u := range res.Unsearched {
		fmt.Fprintf(e.stderr, "redisdelay: note: not searched: %s\n", u)
	}
	if len(res.Locations) == 0 {
		what := fmt.Sprintf("UUID %q", uuid)
		if key != "" {
			what = fmt.Sprintf("business key %q", key)
		}
		more := ""
		if len(res.Unsearched) > 0 {
			more = "; the scan budget left some entries unread (see the notes above)"
		}
		return notFoundf("redisdelay: no message with %s is in topic %q in any state (waiting, ready, pending, retrying, grouped or dead)%s: "+
			"acknowledged messages are not kept once every group has them (see \"redisdelay stats %s\")", what, topic, more, topic)
	}
	if e.opts.json {
		out := showJSON{Topic: topic, UUID: uuid, Key: key, Waiting: []waitingJSON{}, Dead: []groupDead{}, Locations: []locationJSON{},
			Read: res.Read, Unsearched: append([]string{}, res.Unsearched...)}
		for _, l := range res.Locations {
			out.Locations = append(out.Locations, e.locationJSON(l))
			switch l.State {
			case redisdelay.StateWaiting:
				out.Waiting = append(out.Waiting, e.waitingJSON(redisdelay.WaitingMessage{Message: l.Message, Due: l.Due, Corrupt: l.Corrupt}, now))
			case redisdelay.StateDead:
				out.Dead = append(out.Dead, groupDead{l.Group, e.deadJSON(deadOf(l))})
			}
		}
		return writeJSON(e.stdout, out)
	}
	for n, l := range res.Locations {
		if n > 0 {
			fmt.Fprintln(e.stdout)
		}
		e.writeLocation(l, now)
	}
	return nil
}

// deadOf is a dead letter's location as the dead listing has it.
func deadOf(l redisdelay.Location) redisdelay.DeadLetter {
	return redisdelay.DeadLetter{ID: l.ID, Message: l.Message, Body: l.Body, Attempts: l.Attempt, Reason: l.Reason, Time: l.Died}
}

// writeLocation prints one place a message was found, what happens next,
// and the message in full.
func (e *env) writeLocation(l redisdelay.Location, now time.Time) {
	w := e.stdout
	switch l.State {
	case redisdelay.StateWaiting:
		if l.Message == nil {
			l.Message = message.NewMessage("-", nil)
		}
		writeWaitingRecords(w, []redisdelay.WaitingMessage{{Message: l.Message, Due: l.Due, Corrupt: l.Corrupt}}, now, e.flags.maxPayload)
		fmt.Fprintf(w, "next:     %s\n", printable(l.Next))
		return
	case redisdelay.StateDead:
		writeDeadRecords(w, l.Group, []redisdelay.DeadLetter{deadOf(l)}, e.flags.maxPayload)
		fmt.Fprintf(w, "next:     %s\n", printable(l.Next))
		return
	}
	group := printable(l.Group)
	paused := ""
	if l.Paused {
		paused = ", group paused"
	}
	switch l.State {
	case redisdelay.StateWaitingForGroup:
		fmt.Fprintf(w, "state:    waiting for the topic's first consumer group (due %s)\n", l.Due.UTC().Format(time.RFC3339))
	case redisdelay.StateReady:
		fmt.Fprintf(w, "state:    ready for group %q, entry %s, attempt %d%s\n", group, l.ID, l.Attempt, paused)
	case redisdelay.StateGrouped:
		fmt.Fprintf(w, "state:    queued in group %q of consumer group %q, attempt %d%s\n", printable(l.MessageGroup), group, l.Attempt, paused)
	case redisdelay.StatePending:
		fmt.Fprintf(w, "state:    pending in group %q with consumer %s, %s, entry %s, attempt %d, renewed %s, %s\n", group, printable(l.Consumer),
			handlerCell(l.Handler, l.HandedAt, now), l.ID, l.Attempt, ago(l.Renewed, now), leaseCell(l.LeaseExpires, now))
	case redisdelay.StateRetrying:
		fmt.Fprintf(w, "state:    retrying in group %q as attempt %d, due %s (%s)%s\n", group, l.Attempt, l.Due.UTC().Format(time.RFC3339), dueIn(l.Due, now), paused)
		if l.Reason != "" {
			fmt.Fprintf(w, "reason:   %s\n", printable(oneLine(l.Reason)))
		}
	case redisdelay.StateAcknowledged:
		fmt.Fprintf(w, "state:    acknowledged by group %q, entry %s\n", group, l.ID)
	}
	fmt.Fprintf(w, "next:     %s\n", printable(l.Next))
	e.writeBody(l.Message, l.Body)
}
