// A topic's page (/topic) and its JSON (/api/topic): counts, rates, the
// due-time histogram and the waiting messages.

package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// bucket is a bar of the due histogram.
type bucket struct {
	Label string `json:"label"`
	Count int64  `json:"count"`
}

func (h *handler) histogram(ctx context.Context, topic string, now time.Time) ([]bucket, error) {
	edges := []time.Time{now}
	for _, s := range histogramSpans {
		edges = append(edges, now.Add(s.d))
	}
	counts, err := h.insp.DueHistogram(ctx, topic, edges)
	if err != nil {
		return nil, err
	}
	out := []bucket{{"overdue", counts[0]}}
	for n, s := range histogramSpans {
		out = append(out, bucket{s.label, counts[n+1]})
	}
	return append(out, bucket{"> 30 days", counts[len(counts)-1]}), nil
}

type waitingRow struct {
	UUID, Key, Preview, Corrupt string
	Due                         time.Time
	Size                        int
}

type topicData struct {
	Stats     topicJSON
	Histogram []bucket
	Max       int64
	Waiting   []waitingRow
	Offset    int
	Prev      int
	Next      int // 0: no next page
	Now       time.Time
	Charts    []chart
}

func (h *handler) topic(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	topic := r.URL.Query().Get("t")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	h.hist.watch(topic)
	offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
	offset = max(offset, 0)
	if offset > maxOffset {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("offset %d is past the deepest page the dashboard lists (offset %d): a page reads every "+
			"waiting message before it, bodies included, so a deep one would move the whole backlog out of Redis. To see messages "+
			"further ahead, search the topic by due time (the search page's from and to fields: %s)", offset, maxOffset,
			h.link("/search", "t", topic, "s", "1", "from", time.Now().Add(time.Hour).UTC().Format("2006-01-02 15:04"))))
		return
	}
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	overdue, err := h.overdue(ctx, st)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	now := time.Now()
	d := topicData{Stats: h.withRates(toTopicJSON(st, overdue)), Offset: offset, Prev: max(offset-waitingPage, 0), Now: now, Charts: h.hist.charts(topic)}
	if err := h.withStuck(ctx, &d.Stats); err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if d.Histogram, err = h.histogram(ctx, topic, now); err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	for _, b := range d.Histogram {
		d.Max = max(d.Max, b.Count)
	}
	msgs, err := h.insp.Waiting(ctx, topic, offset, waitingPage)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	for _, m := range msgs {
		d.Waiting = append(d.Waiting, waitingRow{
			UUID: m.Message.UUID, Key: m.Message.Metadata.Get(redisdelay.BusinessKey), Corrupt: m.Corrupt,
			Preview: preview(m.Message.Payload), Due: m.Due, Size: len(m.Message.Payload),
		})
	}
	if len(msgs) == waitingPage && offset+waitingPage <= maxOffset {
		d.Next = offset + waitingPage
	}
	h.render(w, r, http.StatusOK, "topic", "Topic "+topic, topic, d)
}

func (h *handler) apiTopic(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	topic := r.URL.Query().Get("t")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	h.hist.watch(topic)
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	overdue, err := h.overdue(ctx, st)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	hist, err := h.histogram(ctx, topic, time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	stats := h.withRates(toTopicJSON(st, overdue))
	if err := h.withStuck(ctx, &stats); err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"stats": stats, "histogram": hist, "charts": h.hist.charts(topic)})
}

// withStuck names the stuck consumers of each group holding pending
// messages (a consumer holding none is never stuck): one read of the
// group's consumers per partition, for the groups with pending messages
// only, so an idle topic costs nothing more.
func (h *handler) withStuck(ctx context.Context, t *topicJSON) error {
	for n := range t.Groups {
		g := &t.Groups[n]
		if g.Pending == 0 {
			continue
		}
		cs, err := h.insp.Consumers(ctx, t.Topic, g.Group)
		if err != nil {
			return err
		}
		for _, c := range cs {
			if c.Stuck {
				g.Stuck = append(g.Stuck, c.Name)
			}
		}
	}
	return nil
}

// withRates adds the consumer groups' throughput the sampler measured.
func (h *handler) withRates(t topicJSON) topicJSON {
	rates := h.hist.groupRates(t.Topic)
	for n := range t.Groups {
		if r, ok := rates[t.Groups[n].Group]; ok {
			t.Groups[n].Delivered, t.Groups[n].DeadLettered = rateText(r.delivered), rateText(r.dead)
		}
	}
	return t
}

// rateText is a rate per second, "?" when unknown.
func rateText(r float64) string {
	if r < 0 {
		return "?"
	}
	return formatValue(r) + "/s"
}

// overdue is how late the topic's earliest waiting message is, read only
// when some wait.
func (h *handler) overdue(ctx context.Context, st redisdelay.TopicStats) (time.Duration, error) {
	if st.Waiting == 0 {
		return 0, nil
	}
	return h.insp.Overdue(ctx, st.Topic)
}
