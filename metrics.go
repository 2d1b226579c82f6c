package redisdelay

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the Prometheus metrics of the Publishers, Subscribers and
// Managers (and Subscribers' embedded schedulers) it is given to, through
// the Metrics field of their configs. One Metrics serves any number of
// them; a nil Metrics (the default) records nothing and costs nothing.
// Safe for concurrent use.
//
// Every metric is named redisdelay_*, in base units (seconds), labelled
// with topic and, where a consumer group applies, consumer_group; the
// partitions of a topic are summed. See "Metrics and health" in the README
// for the list. The queue sizes held in Redis are exported by a Collector
// instead (see NewCollector).
type Metrics struct {
	publishDuration *prometheus.HistogramVec // topic, result
	published       *prometheus.CounterVec   // topic, delay
	delivered       *prometheus.CounterVec   // topic, consumer_group, attempt
	deliveryLag     *prometheus.HistogramVec // topic, consumer_group
	ackLatency      *prometheus.HistogramVec // topic, consumer_group
	retries         *prometheus.CounterVec   // topic, consumer_group
	deadLettered    *prometheus.CounterVec   // topic, consumer_group, source
	reclaimed       *prometheus.CounterVec   // topic, consumer_group
	promoted        *prometheus.CounterVec   // topic
	lateness        *prometheus.HistogramVec // topic

	mu     sync.Mutex
	expect map[shard]time.Time // per scheduled partition: when its earliest waiting message is due (host clock)
}

// latencyBuckets span 0.5ms to 10s: Redis round trips to a backlog.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// NewMetrics creates the metrics and registers them with reg (for example
// prometheus.DefaultRegisterer, or a prometheus.NewRegistry()). It fails
// when reg refuses them, e.g. because another Metrics is registered there
// already: create one Metrics per registry and share it. A nil reg
// registers nothing (the caller registers the Metrics, a
// prometheus.Collector, itself).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns = "redisdelay"
	tg := []string{"topic", "consumer_group"}
	m := &Metrics{
		publishDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "publish_duration_seconds",
			Help:    "Duration of Publish calls, from the call to its result (result: ok or error).",
			Buckets: latencyBuckets}, []string{"topic", "result"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "published_messages_total",
			Help: "Messages stored by successful Publish calls (delay: delayed, or immediate when due at once)."}, []string{"topic", "delay"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "delivered_messages_total",
			Help: "Messages handed to a handler (attempt: first, or retry for redeliveries after a Nack or a reclaim)."}, append(tg, "attempt")),
		deliveryLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "delivery_lag_seconds",
			Help:    "Time from a message becoming ready in Redis (its stream entry ID, Redis clock) to its hand-off to a handler (host clock).",
			Buckets: latencyBuckets}, tg),
		ackLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "ack_latency_seconds",
			Help:    "Time from a handler's Ack to the acknowledgement being written to Redis (acks are written in batches, in the background).",
			Buckets: latencyBuckets}, tg),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "retries_total",
			Help: "Nacked messages requeued for another attempt."}, tg),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "dead_lettered_messages_total",
			Help: "Messages moved to the dead letters (source: nack for a Nack on the last attempt or an undecodable entry, reclaim for a consumer that stopped responding on the last attempt)."},
			append(tg, "source")),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reclaimed_messages_total",
			Help: "Messages taken back by this process's scheduler from consumers that stopped responding, and requeued for another attempt."}, tg),
		promoted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "promoted_messages_total",
			Help: "Messages moved by this process's scheduler from a waiting or retry set to where consumers read them, as they became due."}, []string{"topic"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "scheduler_lateness_seconds",
			Help:    "How late this process's scheduler moved the earliest due message of a tick, after the due time Redis reported for it.",
			Buckets: latencyBuckets}, []string{"topic"}),
		expect: map[shard]time.Time{},
	}
	if reg != nil {
		if err := reg.Register(m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.publishDuration, m.published, m.delivered, m.deliveryLag, m.ackLatency,
		m.retries, m.deadLettered, m.reclaimed, m.promoted, m.lateness}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// observePublish records a Publish call that started at start and ended
// with *err.
func (m *Metrics) observePublish(topic string, messages []*message.Message, start, now time.Time, err *error) {
	result := "ok"
	if *err != nil {
		result = "error"
	}
	m.publishDuration.WithLabelValues(topic, result).Observe(time.Since(start).Seconds())
	if *err != nil {
		return
	}
	delayed := 0
	for _, msg := range messages {
		if d, _ := messageDelay(msg.Metadata, now); d > 0 {
			delayed++
		}
	}
	if delayed > 0 {
		m.published.WithLabelValues(topic, "delayed").Add(float64(delayed))
	}
	if n := len(messages) - delayed; n > 0 {
		m.published.WithLabelValues(topic, "immediate").Add(float64(n))
	}
}

// subMetrics are the metrics of one subscription (a partition of a topic
// read for a consumer group), resolved once. A nil *subMetrics records
// nothing.
type subMetrics struct {
	first, retry prometheus.Counter
	lag, ack     prometheus.Observer
	retries      prometheus.Counter
	dead         prometheus.Counter

	// when each queued acknowledgement was made, in queue order (as
	// subscription.ackReady and ackRedo); guarded by the subscription's mu
	readyAt, redoAt []time.Time
}

// subscription returns the metrics of a subscription, or nil.
func (m *Metrics) subscription(topic, group string) *subMetrics {
	if m == nil {
		return nil
	}
	return &subMetrics{
		first:   m.delivered.WithLabelValues(topic, group, "first"),
		retry:   m.delivered.WithLabelValues(topic, group, "retry"),
		lag:     m.deliveryLag.WithLabelValues(topic, group),
		ack:     m.ackLatency.WithLabelValues(topic, group),
		retries: m.retries.WithLabelValues(topic, group),
		dead:    m.deadLettered.WithLabelValues(topic, group, "nack"),
	}
}

// delivered records a message handed to a handler: its attempt and the
// time since its stream entry was added.
func (sm *subMetrics) delivered(attempt int, entryID string) {
	if sm == nil {
		return
	}
	if attempt > 1 {
		sm.retry.Inc()
	} else {
		sm.first.Inc()
	}
	ms, _, _ := strings.Cut(entryID, "-")
	if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
		sm.lag.Observe(max(time.Since(time.UnixMilli(n)).Seconds(), 0))
	}
}

// nacked records the outcome of a nack script: 1 requeued, 2 dead letter.
func (sm *subMetrics) nacked(outcome int64) {
	if sm == nil {
		return
	}
	switch outcome {
	case 1:
		sm.retries.Inc()
	case 2:
		sm.dead.Inc()
	}
}

// ackQueued records when an acknowledgement was queued. The subscription's
// mu is held.
func (sm *subMetrics) ackQueued(redo bool) {
	if sm == nil {
		return
	}
	if redo {
		sm.redoAt = append(sm.redoAt, time.Now())
	} else {
		sm.readyAt = append(sm.readyAt, time.Now())
	}
}

// acksWritten records the first ready and redo acknowledgements of the
// queue as written to Redis. The subscription's mu is held.
func (sm *subMetrics) acksWritten(ready, redo int) {
	if sm == nil || ready+redo == 0 {
		return
	}
	// The time queues follow the id queues entry for entry; min guards
	// against a mismatch ever panicking.
	ready, redo = min(ready, len(sm.readyAt)), min(redo, len(sm.redoAt))
	now := time.Now()
	for _, at := range sm.readyAt[:ready] {
		sm.ack.Observe(now.Sub(at).Seconds())
	}
	for _, at := range sm.redoAt[:redo] {
		sm.ack.Observe(now.Sub(at).Seconds())
	}
	sm.readyAt = shiftTimes(sm.readyAt, ready)
	sm.redoAt = shiftTimes(sm.redoAt, redo)
}

func shiftTimes(ts []time.Time, n int) []time.Time {
	k := copy(ts, ts[n:])
	return ts[:k]
}

// promoted records one tick of a scheduler on a partition of topic: the
// messages it moved and, when it holds the lease, waitUs (µs until the
// earliest message still waiting is due, 0 when more is due now, -1 when
// nothing waits). The lateness of a tick that moved messages is measured
// against the due time the previous tick reported, by the host clock.
func (m *Metrics) promotedTick(sh shard, topic string, moved, waitUs int64, held bool) {
	if m == nil {
		return
	}
	now := time.Now()
	if moved > 0 {
		m.promoted.WithLabelValues(topic).Add(float64(moved))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if due, ok := m.expect[sh]; ok && moved > 0 && !now.Before(due) {
		m.lateness.WithLabelValues(topic).Observe(now.Sub(due).Seconds())
	}
	if held && waitUs >= 0 {
		m.expect[sh] = now.Add(time.Duration(waitUs) * time.Microsecond)
	} else {
		delete(m.expect, sh)
	}
}

// forget drops a partition's scheduling state, when its loop ends.
func (m *Metrics) forget(sh shard) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.expect, sh)
	m.mu.Unlock()
}

// reclaimedTick records a reclaim of a group's messages: requeued ones and
// those buried in the dead letters.
func (m *Metrics) reclaimedTick(topic, group string, requeued, buried int64) {
	if m == nil {
		return
	}
	if requeued > 0 {
		m.reclaimed.WithLabelValues(topic, group).Add(float64(requeued))
	}
	if buried > 0 {
		m.deadLettered.WithLabelValues(topic, group, "reclaim").Add(float64(buried))
	}
}
