// The topics page (/) and its JSON (/api/topics).

package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/present"
)

type groupJSON struct {
	Group     string `json:"group"`
	Ready     int64  `json:"ready"`
	Pending   int64  `json:"pending"`
	Retry     int64  `json:"retry"`
	Dead      int64  `json:"dead"`
	Consumers int64  `json:"consumers"`
	Paused    bool   `json:"paused"`
	// Grouped counts grouped messages (redisdelay.GroupKey) queued in their
	// groups, not yet taken (not in Ready); ActiveGroups the groups holding
	// queued or unsettled messages.
	Grouped      int64 `json:"grouped"`
	ActiveGroups int64 `json:"active_groups"`
	// Delivered and DeadLettered are the group's rates over the topic
	// page's last sampling interval ("12.5/s"), "–" until two samples.
	Delivered    string `json:"delivered_rate"`
	DeadLettered string `json:"dead_rate"`
	// Stuck names the group's stuck consumers (redisdelay.Consumer.Stuck),
	// read for the topic page only (see withStuck); empty otherwise.
	Stuck []string `json:"stuck"`
}

type topicJSON struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	Waiting    int64  `json:"waiting"`
	Stream     int64  `json:"stream"`
	Leased     int    `json:"leased"`
	Alert      string `json:"alert"` // see schedulingAlert; "" when all is well
	// NoGroup says that ready messages pile up in a topic with no consumer
	// group to read them (see noGroupAlert); "" otherwise.
	NoGroup string      `json:"no_group"`
	Groups  []groupJSON `json:"groups"`
}

// toTopicJSON is a topic's stats as the pages show them; overdue is
// Inspector.Overdue's (0 when not read).
func toTopicJSON(st redisdelay.TopicStats, overdue time.Duration) topicJSON {
	out := topicJSON{Topic: st.Topic, Partitions: st.Partitions, Waiting: st.Waiting, Stream: st.Stream, Leased: st.Leased,
		Alert: schedulingAlert(st, overdue), NoGroup: noGroupAlert(st), Groups: []groupJSON{}}
	for _, g := range st.Groups {
		out.Groups = append(out.Groups, groupJSON{g.Group, g.Ready, g.Pending, g.Retry, g.Dead, g.Consumers, g.Paused, g.Grouped, g.ActiveGroups, "–", "–", []string{}})
	}
	slices.SortFunc(out.Groups, func(a, b groupJSON) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// schedulingAlert says why a topic's due messages are not delivered, or ""
// when nothing says so. A topic with nothing waiting gets none, whatever
// its leases: a scheduler lets the lease of a partition with nothing to
// schedule lapse (its loop retires, the partition goes dormant), so a
// missing lease there is no fault, and no message is late for it. With
// messages waiting, a running scheduler holds the lease of their
// partitions: none held means that none runs (or one is taking over,
// for a few seconds). Messages overdue by overdueAlert despite a lease
// mean a partition nobody schedules or a scheduler that cannot keep up.
func schedulingAlert(st redisdelay.TopicStats, overdue time.Duration) string {
	// Grouped messages waiting for the topic's first consumer group need
	// no scheduler until then: a partition holding only them has no lease.
	waiting := st.Waiting - st.WaitingForGroup
	if waiting <= 0 {
		return ""
	}
	late := ""
	if overdue >= time.Second {
		late = fmt.Sprintf(", and the earliest is overdue by %s", present.Duration(overdue))
	}
	if st.Leased == 0 {
		return fmt.Sprintf("No scheduler holds this topic's lease: its %d waiting message(s) are not moved to the consumer groups when due%s. "+
			"Run a redisdelay Manager, or a subscriber without DisableScheduler, for this topic.", waiting, late)
	}
	if overdue >= overdueAlert {
		return fmt.Sprintf("Waiting messages are late: the earliest is overdue by %s, although a scheduler holds the lease of %d of %d partition(s). "+
			"A partition without one is not scheduled, or the scheduler cannot keep up: see its logs.", present.Duration(overdue), st.Leased, st.Partitions)
	}
	return ""
}

// noGroupAlert says that a topic holds ready messages and no consumer
// group (Health's no_consumer_group): a schedule ticking into a topic
// nobody subscribed to, or a publisher ahead of its subscribers. Nothing
// reads them until a group is created, and they pile up meanwhile.
// Grouped messages waiting for the first group alone wait aside, by
// design: no alert.
func noGroupAlert(st redisdelay.TopicStats) string {
	if len(st.Groups) > 0 || st.Stream == 0 {
		return ""
	}
	return fmt.Sprintf("This topic has no consumer group: its %d ready message(s) wait for the first, and pile up meanwhile. "+
		"Start its subscribers, or stop what publishes to it (a schedule? see Schedules).", st.Stream)
}

func (h *handler) allStats(ctx context.Context) ([]topicJSON, error) {
	topics, err := h.insp.Topics(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(topics)
	out := make([]topicJSON, 0, len(topics))
	for _, t := range topics {
		st, err := h.insp.Stats(ctx, t)
		if err != nil {
			return nil, err
		}
		out = append(out, toTopicJSON(st, 0)) // Overdue left out: a round trip per topic
	}
	return out, nil
}

type topicsData struct {
	Topics  []topicJSON
	Servers []redisdelay.RedisServer
	Storage *redisdelay.StorageInfo // nil when it cannot be read
}

func (h *handler) topics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	all, err := h.allStats(ctx)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	// The server's version, memory and maxmemory policy: one INFO per
	// server, read with the page (not refreshed live).
	servers, err := h.insp.Servers(ctx)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	data := topicsData{Topics: all, Servers: servers}
	if st, err := h.insp.Storage(ctx); err == nil {
		data.Storage = &st
	}
	h.render(w, r, http.StatusOK, "topics", "Topics", "", data)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *handler) apiTopics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	all, err := h.allStats(ctx)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"topics": all})
}
