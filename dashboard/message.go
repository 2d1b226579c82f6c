// A message's page (/message) and the actions on one waiting message:
// cancel, reschedule, run now.

package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/present"
)

type messageData struct {
	Topic    string
	Found    bool
	By, Q    string
	Message  waitingRow
	Metadata [][2]string
	Payload  payloadView
	// Dead are the dead letters holding the message and Elsewhere its
	// other places (ready, pending, retrying, ...), looked for with
	// Inspector.Locate when it is not waiting; Unsearched says what the
	// lookup's scan budget (DeadScan entries per structure) left unread.
	Dead       []deadFound
	Elsewhere  []locationRow
	Unsearched []string
	DeadScan   int
}

// deadFound is a dead letter found by UUID, and its group.
type deadFound struct {
	Group string
	deadRow
}

// locationRow is a place of the message other than waiting or dead.
type locationRow struct {
	State, Group, Detail, Next string
	UUID                       string
	Metadata                   [][2]string
	Payload                    payloadView
}

// locate finds a message that is not waiting in every other state, reading
// at most deadScan entries of each structure Redis indexes by time only
// (see Inspector.Locate), which bounds a search to a few seconds of Redis
// work and some MB of transfer per structure however long the backlog.
func (h *handler) locate(ctx context.Context, topic, by, value string, now time.Time) (dead []deadFound, elsewhere []locationRow, unsearched []string, err error) {
	q := redisdelay.LocateQuery{UUID: value, Scan: deadScan}
	if by == "key" {
		q = redisdelay.LocateQuery{BusinessKey: value, Scan: deadScan}
	}
	res, err := h.insp.LocateWith(ctx, topic, q)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, l := range res.Locations {
		if l.State == redisdelay.StateDead {
			dead = append(dead, deadFound{l.Group, toDeadRow(redisdelay.DeadLetter{ID: l.ID, Message: l.Message, Body: l.Body,
				Attempts: l.Attempt, Reason: l.Reason, Time: l.Died})})
			continue
		}
		row := locationRow{State: string(l.State), Group: l.Group, Detail: locationDetail(l, now), Next: l.Next}
		if l.Message != nil {
			row.UUID, row.Metadata, row.Payload = l.Message.UUID, sortedMetadata(l.Message.Metadata), viewPayload(l.Message.Payload)
		} else {
			row.Payload = viewPayload(l.Body)
		}
		elsewhere = append(elsewhere, row)
	}
	return dead, elsewhere, res.Unsearched, nil
}

// locationDetail describes a location in a line: its entry, attempt, and
// the state's own facts, times with their zone.
func locationDetail(l redisdelay.Location, now time.Time) string {
	const layout = "2006-01-02 15:04:05 UTC"
	var b strings.Builder
	if l.ID != "" {
		fmt.Fprintf(&b, "entry %s, ", l.ID)
	}
	fmt.Fprintf(&b, "attempt %d", l.Attempt)
	switch l.State {
	case redisdelay.StatePending:
		fmt.Fprintf(&b, ", consumer %s, ", l.Consumer)
		if l.Handler == redisdelay.HandlerRunning {
			fmt.Fprintf(&b, "its handler has it since %s", l.HandedAt.UTC().Format(layout))
		} else {
			b.WriteString(string(l.Handler))
		}
		fmt.Fprintf(&b, ", renewed %s ago", present.Duration(now.Sub(l.Renewed)))
		if !l.LeaseExpires.IsZero() {
			fmt.Fprintf(&b, ", lease expires %s", l.LeaseExpires.UTC().Format(layout))
		}
	case redisdelay.StateRetrying, redisdelay.StateWaitingForGroup:
		fmt.Fprintf(&b, ", due %s", l.Due.UTC().Format(layout))
		if l.Reason != "" {
			fmt.Fprintf(&b, ", after: %s", l.Reason)
		}
	case redisdelay.StateGrouped:
		fmt.Fprintf(&b, ", in group %s", l.MessageGroup)
	}
	if l.Paused {
		b.WriteString(", group paused")
	}
	return b.String()
}

func (h *handler) message(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	topic, by, value := q.Get("t"), q.Get("by"), strings.TrimSpace(q.Get("q"))
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	if value == "" {
		h.fail(w, r, http.StatusBadRequest, errors.New("nothing to search for: give a message UUID or a business key"))
		return
	}
	var (
		m   redisdelay.WaitingMessage
		ok  bool
		err error
	)
	switch by {
	case "", "uuid":
		by = "uuid"
		m, ok, err = h.insp.FindWaiting(ctx, topic, value)
	case "key":
		m, ok, err = h.insp.FindWaitingKey(ctx, topic, value)
	default:
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("search by %q: use uuid or key", by))
		return
	}
	d := messageData{Topic: topic, Found: ok, By: by, Q: value, DeadScan: deadScan}
	if err == nil && !ok {
		d.Dead, d.Elsewhere, d.Unsearched, err = h.locate(ctx, topic, by, value, time.Now())
	}
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if ok {
		d.Message = waitingRow{UUID: m.Message.UUID, Key: m.Message.Metadata.Get(redisdelay.BusinessKey), Corrupt: m.Corrupt, Due: m.Due, Size: len(m.Message.Payload)}
		d.Metadata = sortedMetadata(m.Message.Metadata)
		d.Payload = viewPayload(m.Message.Payload)
	}
	status := http.StatusOK
	if !ok && len(d.Dead) == 0 && len(d.Elsewhere) == 0 {
		status = http.StatusNotFound
	}
	h.render(w, r, status, "message", "Message", topic, d)
}

// confirmData is the confirmation step of an action: the same form again,
// with confirm=yes.
type confirmData struct {
	Action string // the form's path
	Fields [][2]string
	Items  []string
	More   int
	Prompt string
	Back   string
	Danger bool
}

type resultData struct {
	Text string
	Back string
}

func (h *handler) confirm(w http.ResponseWriter, r *http.Request, topic string, d confirmData) {
	d.Fields = append(d.Fields, [2]string{"confirm", "yes"})
	if len(d.Items) > 100 {
		d.More, d.Items = len(d.Items)-100, d.Items[:100]
	}
	h.render(w, r, http.StatusOK, "confirm", "Confirm", topic, d)
}

func (h *handler) cancel(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	topic, uuid := r.PostFormValue("t"), r.PostFormValue("uuid")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	if uuid == "" {
		h.fail(w, r, http.StatusBadRequest, errors.New("no message UUID given to cancel"))
		return
	}
	back := h.link("/topic", "t", topic)
	if r.PostFormValue("confirm") != "yes" {
		h.confirm(w, r, topic, confirmData{
			Action: h.link("/cancel"), Fields: [][2]string{{"t", topic}, {"uuid", uuid}},
			Items: []string{uuid}, Danger: true, Back: h.link("/message", "t", topic, "q", uuid),
			Prompt: fmt.Sprintf("Cancel this waiting message of topic %q? It will never be delivered.", topic),
		})
		return
	}
	ok, err := h.insp.Cancel(ctx, topic, uuid)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	text := fmt.Sprintf("Message %s cancelled.", uuid)
	if !ok {
		text = fmt.Sprintf("Message %s was not waiting any more (already due, or cancelled): nothing changed.", uuid)
	}
	h.render(w, r, http.StatusOK, "result", "Cancel", topic, resultData{text, back})
}

// parseDue reads the new due time of a reschedule form: in (a duration
// from now, as time.ParseDuration reads it) or at (a UTC time). It returns
// the due time and how the prompt says it.
func parseDue(in, at string, now time.Time) (time.Time, string, error) {
	in, at = strings.TrimSpace(in), strings.TrimSpace(at)
	switch {
	case in != "" && at != "":
		return time.Time{}, "", errors.New(`give either "deliver in" or "at", not both`)
	case in != "":
		d, err := time.ParseDuration(in)
		if err != nil {
			return time.Time{}, "", fmt.Errorf("%q is not a duration: use a number with a unit, such as 90s, 10m or 2h30m (units ns, us, ms, s, m, h)", in)
		}
		if d < 0 {
			return time.Time{}, "", fmt.Errorf("%q is negative: give how long from now, such as 10m (0s delivers at once)", in)
		}
		return now.Add(d), fmt.Sprintf("in %s from when you confirm (about %s)", present.Duration(d), now.Add(d).UTC().Format("2006-01-02 15:04:05 UTC")), nil
	case at != "":
		for _, layout := range atLayouts {
			if t, err := time.Parse(layout, at); err == nil {
				what := "at " + t.UTC().Format("2006-01-02 15:04:05.000 UTC")
				if !t.After(now) {
					what += ", which has passed: it will be due at once"
				}
				return t, what, nil
			}
		}
		return time.Time{}, "", fmt.Errorf("%q is not a time: use UTC such as 2030-01-02 15:04:05, or RFC 3339 with a zone such as 2030-01-02T15:04:05+02:00", at)
	}
	return time.Time{}, "", errors.New(`no new due time given: fill "deliver in" (such as 10m) or "at" (a UTC time)`)
}

// messageRef reads the waiting message a form names, by UUID or business
// key, for an action (verb), and answers the request itself when it names
// none or an unknown topic (ok false).
func (h *handler) messageRef(ctx context.Context, w http.ResponseWriter, r *http.Request, verb string) (topic, by, value, what string, ok bool) {
	topic, uuid, key := r.PostFormValue("t"), strings.TrimSpace(r.PostFormValue("uuid")), strings.TrimSpace(r.PostFormValue("key"))
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return "", "", "", "", false
	}
	switch {
	case uuid == "" && key == "":
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("no message UUID or business key given to %s", verb))
		return "", "", "", "", false
	case uuid == "":
		return topic, "key", key, fmt.Sprintf("the message holding business key %q", key), true
	}
	return topic, "uuid", uuid, "message " + uuid, true
}

func (h *handler) reschedule(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	topic, by, value, what, ok := h.messageRef(ctx, w, r, "reschedule")
	if !ok {
		return
	}
	in, at := r.PostFormValue("in"), r.PostFormValue("at")
	// The duration counts from the confirmation, not from the first step:
	// the confirmation page carries what the operator typed.
	due, when, err := parseDue(in, at, time.Now())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	msgLink := h.link("/message", "t", topic, "by", by, "q", value)
	if by == "uuid" {
		msgLink = h.link("/message", "t", topic, "q", value)
	}
	if r.PostFormValue("confirm") != "yes" {
		h.confirm(w, r, topic, confirmData{
			Action: h.link("/reschedule"), Fields: [][2]string{{"t", topic}, {by, value}, {"in", in}, {"at", at}},
			Items: []string{value}, Back: msgLink,
			Prompt: fmt.Sprintf("Reschedule %s of topic %q to be due %s?", what, topic, when),
		})
		return
	}
	var moved bool
	if by == "uuid" {
		moved, err = h.insp.Reschedule(ctx, topic, value, due)
	} else {
		moved, err = h.insp.RescheduleKey(ctx, topic, value, due)
	}
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, redisdelay.ErrInvalidDelay) || errors.Is(err, redisdelay.ErrInvalidMessage) {
			status = http.StatusBadRequest
		}
		h.fail(w, r, status, err)
		return
	}
	if !moved {
		text := fmt.Sprintf("Nothing changed: %s is no longer waiting in topic %q (already due and on its way to subscribers, delivered, or cancelled).", what, topic)
		h.render(w, r, http.StatusOK, "result", "Reschedule", topic, resultData{text, h.link("/topic", "t", topic)})
		return
	}
	// Read the due time back: Redis counted the delay from its own now.
	var m redisdelay.WaitingMessage
	var still bool
	if by == "uuid" {
		m, still, err = h.insp.FindWaiting(ctx, topic, value)
	} else {
		m, still, err = h.insp.FindWaitingKey(ctx, topic, value)
	}
	if err == nil && still {
		due = m.Due
	}
	text := fmt.Sprintf("Moved: %s rescheduled, now due at %s (%s).", what, due.UTC().Format("2006-01-02 15:04:05.000 UTC"), since(due)) + h.schedulerMissing(ctx, topic)
	h.render(w, r, http.StatusOK, "result", "Reschedule", topic, resultData{text, msgLink})
}

// runNow makes one waiting message due now (Inspector.RunNow, RunNowKey),
// after a confirmation.
func (h *handler) runNow(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	topic, by, value, what, ok := h.messageRef(ctx, w, r, "run now")
	if !ok {
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		h.confirm(w, r, topic, confirmData{
			Action: h.link("/runnow"), Fields: [][2]string{{"t", topic}, {by, value}}, Items: []string{value},
			Back:   h.link("/message", "t", topic, "by", by, "q", value),
			Prompt: fmt.Sprintf("Run %s of topic %q now? It becomes due at once: a scheduler moves it to the consumer groups, which act on it.", what, topic),
		})
		return
	}
	var ran bool
	var err error
	if by == "uuid" {
		ran, err = h.insp.RunNow(ctx, topic, value)
	} else {
		ran, err = h.insp.RunNowKey(ctx, topic, value)
	}
	if err != nil {
		h.fail(w, r, inspectorStatus(err), err)
		return
	}
	text := fmt.Sprintf("Nothing changed: %s is no longer waiting in topic %q (already due and on its way to subscribers, delivered, or cancelled).", what, topic)
	if ran {
		text = fmt.Sprintf("Run now: %s is due now; a scheduler moves it to the consumer groups.", what) + h.schedulerMissing(ctx, topic)
	}
	h.render(w, r, http.StatusOK, "result", "Run now", topic, resultData{text, h.link("/topic", "t", topic)})
}

// schedulerMissing says, after an action that made messages due, that no
// scheduler holds the topic's lease and so nothing delivers them; "" when
// one took it within schedulerWait.
func (h *handler) schedulerMissing(ctx context.Context, topic string) string {
	if missing, _ := present.SchedulerMissing(ctx, h.insp, topic, schedulerWait); !missing {
		return ""
	}
	return " But no scheduler holds this topic's lease: nothing moves due messages to the consumer groups. " +
		"Run a redisdelay Manager, or a subscriber without DisableScheduler, for this topic."
}
