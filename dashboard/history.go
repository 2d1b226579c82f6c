package dashboard

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/present"
)

// The Inspector keeps no history, so the dashboard samples what it charts:
// per topic a ring of the last historyLen samples (one hour at the default
// 5 s), taken only while someone looks at the topic. A topic is watched
// for idleSamples intervals after its page (or the page's live refresh)
// was last requested; with nothing watched the sampling goroutine exits,
// so an idle dashboard sends Redis nothing.
const (
	historyLen  = 720
	idleSamples = 60 // 5 minutes at the default interval
)

// sample is one reading of a topic: 40 bytes, so a full ring is 28.8 KB.
type sample struct {
	at        int64 // Redis's clock, Unix milliseconds
	ready     int64 // TopicCounters.Ready
	delivered int64 // GroupCounters.Delivered summed over groups; -1 unknown
	dead      int64 // GroupCounters.DeadTotal summed over groups
	overdue   int64 // Inspector.Overdue, milliseconds
}

// ring holds the last len(buf) samples of a topic.
type ring struct {
	buf  []sample
	next int // where the next sample goes
	n    int // samples held
}

func newRing(size int) *ring { return &ring{buf: make([]sample, size)} }

func (r *ring) add(s sample) {
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	r.n = min(r.n+1, len(r.buf))
}

// all returns the samples held, oldest first.
func (r *ring) all() []sample {
	out := make([]sample, 0, r.n)
	for k := range r.n {
		out = append(out, r.buf[(r.next-r.n+k+len(r.buf))%len(r.buf)])
	}
	return out
}

type series struct {
	ring *ring
	seen time.Time // last request for the topic's page
	// prev and cur are the last two readings of the counters, for the
	// rates of each consumer group (the ring sums the groups).
	prev, cur *redisdelay.TopicCounters
}

// history samples the watched topics.
type history struct {
	insp    *redisdelay.Inspector
	every   time.Duration
	timeout time.Duration

	mu      sync.Mutex
	topics  map[string]*series
	running bool
	samples int // taken since New, for tests
}

func newHistory(insp *redisdelay.Inspector, every, timeout time.Duration) *history {
	return &history{insp: insp, every: every, timeout: timeout, topics: map[string]*series{}}
}

// watch marks topic as looked at and starts sampling if it was idle.
func (h *history) watch(topic string) {
	if h.every <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.topics[topic]
	if s == nil {
		s = &series{ring: newRing(historyLen)}
		h.topics[topic] = s
	}
	s.seen = time.Now()
	if !h.running {
		h.running = true
		go h.run()
	}
}

// watched returns the topics to sample now, forgets those unwatched for
// longer than the ring spans (their points would all be stale), and
// reports false, marking the sampler stopped, when nothing is watched.
func (h *history) watched() ([]string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for t, s := range h.topics {
		idle := time.Since(s.seen)
		if idle < idleSamples*h.every {
			out = append(out, t)
		} else if idle > historyLen*h.every {
			delete(h.topics, t)
		}
	}
	if len(out) == 0 {
		h.running = false
	}
	return out, len(out) > 0
}

func (h *history) run() {
	for {
		topics, ok := h.watched()
		if !ok {
			return
		}
		for _, t := range topics {
			h.sample(t)
		}
		time.Sleep(h.every)
	}
}

// sample reads a topic's counters and lateness; a failed read leaves a
// gap rather than a wrong point.
func (h *history) sample(topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	c, err := h.insp.Counters(ctx, topic)
	if err != nil {
		return
	}
	overdue, err := h.insp.Overdue(ctx, topic)
	if err != nil {
		return
	}
	s := sample{at: c.Time.UnixMilli(), ready: c.Ready, overdue: overdue.Milliseconds()}
	for _, g := range c.Groups {
		s.dead += g.DeadTotal
		if g.Delivered < 0 || s.delivered < 0 {
			s.delivered = -1
		} else {
			s.delivered += g.Delivered
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ser := h.topics[topic]; ser != nil {
		ser.ring.add(s)
		ser.prev, ser.cur = ser.cur, &c
		h.samples++
	}
}

// groupRate is a consumer group's throughput between the last two
// samples: messages per second delivered for the first time and moved to
// its dead letters; -1 when unknown.
type groupRate struct{ delivered, dead float64 }

// groupRates are the consumer groups' rates between the topic's last two
// samples, by group: none until two were taken.
func (h *history) groupRates(topic string) map[string]groupRate {
	h.mu.Lock()
	defer h.mu.Unlock()
	ser := h.topics[topic]
	if ser == nil || ser.prev == nil || ser.cur == nil {
		return nil
	}
	a, b := ser.prev, ser.cur
	dt := b.Time.Sub(a.Time).Seconds()
	if dt <= 0 {
		return nil
	}
	out := map[string]groupRate{}
	for _, g := range b.Groups {
		r := groupRate{-1, -1}
		for _, was := range a.Groups {
			if was.Group != g.Group {
				continue
			}
			if was.Delivered >= 0 && g.Delivered >= was.Delivered {
				r.delivered = float64(g.Delivered-was.Delivered) / dt
			}
			if g.DeadTotal >= was.DeadTotal {
				r.dead = float64(g.DeadTotal-was.DeadTotal) / dt
			}
		}
		out[g.Group] = r
	}
	return out
}

func (h *history) points(topic string) []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.topics[topic]; s != nil {
		return s.ring.all()
	}
	return nil
}

// point is a value at a time (Unix milliseconds).
type point struct {
	at int64
	v  float64
}

// rate turns consecutive readings of a growing counter into per-second
// rates, at the later reading's time. A counter that shrank was restarted
// (its stream deleted) and an unknown one is -1: no point for those pairs.
func rate(ss []sample, counter func(sample) int64) []point {
	var out []point
	for k := 1; k < len(ss); k++ {
		a, b := ss[k-1], ss[k]
		dt := float64(b.at-a.at) / 1000
		ca, cb := counter(a), counter(b)
		if dt <= 0 || ca < 0 || cb < ca {
			continue
		}
		out = append(out, point{b.at, float64(cb-ca) / dt})
	}
	return out
}

// Charts: SVG drawn on the server, so the page needs no chart library and
// the live refresh only swaps attributes and text (app.js).

// The plot area in the SVG's 640×170 viewBox (topic.html draws the axes).
const (
	plotX0, plotX1 = 56, 630
	plotY0, plotY1 = 12, 138 // top, bottom
)

type chartLine struct {
	Name   string `json:"name"`
	Class  string `json:"class"`
	Points string `json:"points"` // SVG polyline points
	Last   string `json:"last"`   // the latest value, with its unit
}

type chart struct {
	ID    string      `json:"id"`
	Title string      `json:"-"`
	Unit  string      `json:"-"`
	YMax  string      `json:"ymax"`
	Since string      `json:"since"` // x axis label of the left edge
	Empty string      `json:"empty"` // shown instead of lines
	Lines []chartLine `json:"lines"`
}

// charts draws the topic's throughput and lateness.
func (h *history) charts(topic string) []chart {
	ss := h.points(topic)
	thr := chart{ID: "chart-throughput", Title: "Throughput", Unit: "messages/s"}
	late := chart{ID: "chart-lateness", Title: "Lateness", Unit: "seconds overdue"}
	ready := rate(ss, func(s sample) int64 { return s.ready })
	delivered := rate(ss, func(s sample) int64 { return s.delivered })
	dead := rate(ss, func(s sample) int64 { return s.dead })
	var overdue []point
	for _, s := range ss {
		overdue = append(overdue, point{s.at, float64(s.overdue) / 1000})
	}
	var from, to int64
	if len(ss) > 0 {
		from, to = ss[0].at, ss[len(ss)-1].at
	}
	draw(&thr, from, to, "/s", []string{"made ready", "delivered (all groups)", "dead-lettered"},
		[]string{"l-ready", "l-delivered", "l-dead"}, ready, delivered, dead)
	draw(&late, from, to, " s", []string{"earliest waiting message overdue by"}, []string{"l-overdue"}, overdue)
	if h.every <= 0 {
		thr.Empty = "Not sampled: Options.SampleEvery is negative."
		late.Empty = thr.Empty
	} else if len(ss) < 2 {
		thr.Empty = fmt.Sprintf("Collecting: a sample every %s while this page is open; the lines start after two.", h.every)
		late.Empty = thr.Empty
	}
	return []chart{thr, late}
}

func draw(c *chart, from, to int64, unit string, names, classes []string, lines ...[]point) {
	top := 0.0
	for _, l := range lines {
		for _, p := range l {
			top = max(top, p.v)
		}
	}
	top = niceCeil(top)
	c.YMax = formatValue(top)
	c.Since = "now"
	if span := time.Duration(to-from) * time.Millisecond; span > 0 {
		c.Since = "−" + present.Duration(span)
	}
	for n, l := range lines {
		var b strings.Builder
		for _, p := range l {
			x := float64(plotX0)
			if to > from {
				x += float64(plotX1-plotX0) * float64(p.at-from) / float64(to-from)
			}
			y := float64(plotY1) - float64(plotY1-plotY0)*p.v/top
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		line := chartLine{Name: names[n], Class: classes[n], Points: strings.TrimSpace(b.String()), Last: "–"}
		if len(l) > 0 {
			line.Last = formatValue(l[len(l)-1].v) + unit
		}
		c.Lines = append(c.Lines, line)
	}
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten, at least 1.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func formatValue(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
