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
	// Dead are the dead letters with the UUID searched, looked for when no
	// message with it waits; Unsearched says which dead letters were not
	// read (see findDead).
	Dead       []deadFound
	Unsearched []string
	DeadScan   int
}

// deadFound is a dead letter found by UUID, and its group.
type deadFound struct {
	Group string
	deadRow
}

// findDead looks for the dead letters of a message UUID in every group of
// the topic, as "redisdelay show" does, but reads at most the oldest
// deadScan of each group (a dead letter is found by reading it: Redis
// indexes them by time only), which bounds a search to a few seconds of
// Redis work and some MB of transfer per group however many are kept
// (MaxDeadLetters, 100,000 by default). It returns what it found, and for
// each group holding more, how many it left unread.
func (h *handler) findDead(ctx context.Context, topic, uuid string) (found []deadFound, unsearched []string, err error) {
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	groups := toTopicJSON(st, 0).Groups // by name
	for _, g := range groups {
		read := 0
		for after := ""; read < deadScan; {
			page, err := h.insp.DeadLetters(ctx, topic, g.Group, after, deadScanPage)
			if err != nil {
				return nil, nil, err
			}
			for _, l := range page {
				if l.Message != nil && l.Message.UUID == uuid {
					found = append(found, deadFound{g.Group, toDeadRow(l)})
				}
			}
			read += len(page)
			if len(page) < deadScanPage {
				break
			}
			after = page[len(page)-1].ID
		}
		if read >= deadScan && g.Dead > int64(read) {
			unsearched = append(unsearched, fmt.Sprintf("group %q: the newest %d of its %d dead letters", g.Group, g.Dead-int64(read), g.Dead))
		}
	}
	return found, unsearched, nil
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
	if err == nil && !ok && by == "uuid" {
		d.Dead, d.Unsearched, err = h.findDead(ctx, topic, value)
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
	if !ok && len(d.Dead) == 0 {
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
