// A consumer group's dead letters (/dead) and the actions on them.

package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

type deadRow struct {
	ID, UUID, Reason string
	Attempts         int
	Time             time.Time
	Metadata         [][2]string
	Payload          payloadView
}

func toDeadRow(l redisdelay.DeadLetter) deadRow {
	row := deadRow{ID: l.ID, Reason: l.Reason, Attempts: l.Attempts, Time: l.Time}
	if l.Message != nil {
		row.UUID, row.Metadata, row.Payload = l.Message.UUID, sortedMetadata(l.Message.Metadata), viewPayload(l.Message.Payload)
	} else {
		row.Payload = viewPayload(l.Body)
	}
	return row
}

type deadData struct {
	Topic  string
	Groups []groupJSON
	Group  string
	Count  int64
	Rows   []deadRow
	After  string
	Next   string
}

func (h *handler) dead(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	topic, group, after := q.Get("t"), q.Get("g"), q.Get("after")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	d := deadData{Topic: topic, Groups: toTopicJSON(st, 0).Groups, Group: group, After: after}
	if group == "" && len(d.Groups) > 0 {
		d.Group = d.Groups[0].Group
	}
	known := false
	for _, g := range d.Groups {
		if g.Group == d.Group {
			known, d.Count = true, g.Dead
		}
	}
	if d.Group != "" && !known {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("topic %q has no consumer group %q", topic, d.Group))
		return
	}
	if known {
		letters, err := h.insp.DeadLetters(ctx, topic, d.Group, after, deadPage)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err)
			return
		}
		for _, l := range letters {
			d.Rows = append(d.Rows, toDeadRow(l))
		}
		if len(letters) == deadPage {
			d.Next = letters[len(letters)-1].ID
		}
	}
	h.render(w, r, http.StatusOK, "dead", "Dead letters of "+topic, topic, d)
}

func (h *handler) deadAction(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	topic, group, action := r.PostFormValue("t"), r.PostFormValue("g"), r.PostFormValue("action")
	ids := r.PostForm["id"]
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	back := h.link("/dead", "t", topic, "g", group)
	var prompt string
	switch action {
	case "requeue", "delete":
		if len(ids) == 0 {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("no dead letter selected to %s: tick some first", action))
			return
		}
		prompt = fmt.Sprintf("%s %d dead letter(s) of group %q in topic %q?", map[string]string{"requeue": "Requeue", "delete": "Delete for good"}[action], len(ids), group, topic)
	case "requeue-all":
		prompt = fmt.Sprintf("Requeue EVERY dead letter of group %q in topic %q?", group, topic)
	case "purge":
		prompt = fmt.Sprintf("Delete EVERY dead letter of group %q in topic %q for good?", group, topic)
	default:
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown action %q: use requeue, delete, requeue-all or purge", action))
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		fields := [][2]string{{"t", topic}, {"g", group}, {"action", action}}
		for _, id := range ids {
			fields = append(fields, [2]string{"id", id})
		}
		h.confirm(w, r, topic, confirmData{Action: h.link("/dead/action"), Fields: fields, Items: ids, Prompt: prompt, Back: back,
			Danger: action == "delete" || action == "purge"})
		return
	}
	var (
		done int
		err  error
	)
	switch action {
	case "requeue", "delete":
		for _, id := range ids {
			var ok bool
			if action == "requeue" {
				ok, err = h.insp.RequeueDeadLetter(ctx, topic, group, id)
			} else {
				ok, err = h.insp.DeleteDeadLetter(ctx, topic, group, id)
			}
			if err != nil {
				break
			}
			if ok {
				done++
			}
		}
	case "requeue-all":
		done, err = h.insp.RequeueDeadLetters(ctx, topic, group)
	case "purge":
		var n int64
		n, err = h.insp.PurgeDeadLetters(ctx, topic, group)
		done = int(n)
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("after %d done: %w", done, err))
		return
	}
	verb := map[string]string{"requeue": "Requeued", "requeue-all": "Requeued", "delete": "Deleted", "purge": "Deleted"}[action]
	text := fmt.Sprintf("%s %d dead letter(s) of group %q.", verb, done, group)
	if (action == "requeue" || action == "delete") && done < len(ids) {
		text += fmt.Sprintf(" %d were gone already.", len(ids)-done)
	}
	h.render(w, r, http.StatusOK, "result", "Dead letters", topic, resultData{text, back})
}
