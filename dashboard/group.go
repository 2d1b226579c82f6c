package dashboard

// A consumer group's page: its messages where they are (ready for its
// consumers, pending with one, retrying after a failure) and its
// consumers, a page at a time, each read bounded by the page whatever the
// backlog (Inspector.Ready, Pending, Retrying, Consumers).

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/present"
)

// groupPage is how many messages a group's page lists.
const groupPage = 50

// silentAfter is how long a consumer may be idle before its page tags it:
// a live subscription reads at least once per BlockTime (30 s) unless its
// group is paused, and renews the leases of the messages it holds every
// third of the visibility timeout (10 s by default).
const silentAfter = time.Minute

// groupViews are the tabs of a group's page.
var groupViews = []struct{ Name, Label string }{
	{"ready", "Ready"}, {"pending", "Pending"}, {"retrying", "Retrying"}, {"consumers", "Consumers"},
}

// groupMsgRow is a message of a group's listing.
type groupMsgRow struct {
	ID, UUID, Key, Corrupt string
	Attempt                int
	Group                  string // the message's group (SetGroup)
	At                     time.Time
	Metadata               [][2]string
	Payload                payloadView
	Gone                   bool
	// Pending messages: who holds it, whether its handler has it, since
	// when, until when.
	Consumer     string
	Handler      string
	LeaseExpires time.Time
	Expired      bool
}

type consumerRow struct {
	Name     string
	Pending  int64
	Idle     time.Duration
	LastSeen time.Time
	Silent   bool
	Stuck    bool // see redisdelay.Consumer.Stuck
}

type groupData struct {
	Topic, Group, View string
	Views              []struct{ Name, Label string }
	Stats              groupJSON
	Rows               []groupMsgRow
	Consumers          []consumerRow
	Cursor, Next       string
	PageMax            int
	SilentAfter        time.Duration
}

func messageRow(msg *message.Message, body []byte) groupMsgRow {
	switch {
	case msg == nil && body == nil:
		return groupMsgRow{Gone: true}
	case msg == nil:
		return groupMsgRow{Corrupt: "cannot be decoded", Payload: viewPayload(body)}
	}
	return groupMsgRow{UUID: msg.UUID, Key: msg.Metadata.Get(redisdelay.BusinessKey), Metadata: sortedMetadata(msg.Metadata), Payload: viewPayload(msg.Payload)}
}

func (h *handler) group(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	topic, group, view, cursor := q.Get("t"), q.Get("g"), q.Get("view"), q.Get("cursor")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	if view == "" {
		view = "ready"
	}
	if !slices.ContainsFunc(groupViews, func(v struct{ Name, Label string }) bool { return v.Name == view }) {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown view %q of a consumer group: use ready, pending, retrying or consumers", view))
		return
	}
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	d := groupData{Topic: topic, Group: group, View: view, Views: groupViews, Cursor: cursor, PageMax: groupPage, SilentAfter: silentAfter}
	known := false
	for _, g := range h.withRates(toTopicJSON(st, 0)).Groups {
		if g.Group == group {
			d.Stats, known = g, true
		}
	}
	if !known {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("topic %q has no consumer group %q: pick one on the topic's page", topic, group))
		return
	}
	now := time.Now()
	switch view {
	case "ready":
		var msgs []redisdelay.GroupMessage
		msgs, d.Next, err = h.insp.Ready(ctx, topic, group, cursor, groupPage)
		for _, m := range msgs {
			row := messageRow(m.Message, m.Body)
			row.ID, row.Attempt, row.Group, row.At = m.ID, m.Attempt, m.Group, m.Queued
			d.Rows = append(d.Rows, row)
		}
	case "pending":
		var msgs []redisdelay.PendingMessage
		msgs, d.Next, err = h.insp.Pending(ctx, topic, group, cursor, groupPage)
		for _, m := range msgs {
			row := messageRow(m.Message, m.Body)
			row.ID, row.Attempt, row.Group, row.At = m.ID, m.Attempt, m.Group, m.Renewed
			row.Consumer, row.LeaseExpires, row.Handler = m.Consumer, m.LeaseExpires, string(m.Handler)
			if m.Handler == redisdelay.HandlerRunning {
				row.Handler = "handling for " + present.Duration(max(now.Sub(m.HandedAt), 0))
			}
			row.Expired = !m.LeaseExpires.IsZero() && m.LeaseExpires.Before(now)
			d.Rows = append(d.Rows, row)
		}
	case "retrying":
		var msgs []redisdelay.RetryingMessage
		msgs, d.Next, err = h.insp.Retrying(ctx, topic, group, cursor, groupPage)
		for _, m := range msgs {
			row := messageRow(m.Message, m.Body)
			row.ID, row.Attempt, row.At = m.ID, m.Attempt, m.Due
			d.Rows = append(d.Rows, row)
		}
	case "consumers":
		var cs []redisdelay.Consumer
		cs, err = h.insp.Consumers(ctx, topic, group)
		for _, c := range cs {
			d.Consumers = append(d.Consumers, consumerRow{Name: c.Name, Pending: c.Pending, Idle: c.Idle, LastSeen: c.LastSeen, Silent: c.Idle >= silentAfter, Stuck: c.Stuck})
		}
	}
	if err != nil {
		h.fail(w, r, inspectorStatus(err), err)
		return
	}
	h.render(w, r, http.StatusOK, "group", "Group "+group+" of "+topic, topic, d)
}

func (h *handler) groupAction(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	topic, group, action := r.PostFormValue("t"), r.PostFormValue("g"), r.PostFormValue("action")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	if action != "pause" && action != "resume" {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown action %q on a consumer group: use pause or resume", action))
		return
	}
	// Only a listed group: the Inspector would pause a group that does not
	// exist yet, and a typo would then pause nothing visible.
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if !slices.ContainsFunc(st.Groups, func(g redisdelay.GroupStats) bool { return g.Group == group }) {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("topic %q has no consumer group %q: pick one on the topic's page", topic, group))
		return
	}
	back := h.link("/topic", "t", topic)
	// Resume only undoes a pause: no confirmation.
	if action == "pause" && r.PostFormValue("confirm") != "yes" {
		h.confirm(w, r, topic, confirmData{
			Action: h.link("/group"), Fields: [][2]string{{"t", topic}, {"g", group}, {"action", action}}, Back: back,
			Prompt: fmt.Sprintf("Pause consumer group %q of topic %q? Its subscribers, in every process, stop fetching new messages until it is resumed; due messages accumulate as ready.", group, topic),
		})
		return
	}
	var text string
	if action == "pause" {
		if err = h.insp.Pause(ctx, topic, group); err == nil {
			text = fmt.Sprintf("Paused consumer group %q of topic %q: its subscribers fetch no new messages until it is resumed.", group, topic)
		}
	} else {
		var was bool
		if was, err = h.insp.Resume(ctx, topic, group); err == nil {
			text = fmt.Sprintf("Resumed consumer group %q of topic %q: its subscribers fetch again at once.", group, topic)
			if !was {
				text = fmt.Sprintf("Consumer group %q of topic %q was not paused: nothing changed.", group, topic)
			}
		}
	}
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	h.render(w, r, http.StatusOK, "result", "Consumer group", topic, resultData{text, back})
}
