// Package prommetrics exports the metrics of redisdelay to Prometheus:
// Metrics counts what this process's Publishers, Subscribers and
// schedulers do (pass it as their configs' Metrics), Collector reads the
// queue sizes Redis holds at each scrape. It is a separate package so that
// programs without Prometheus do not link it.
//
// Every metric is named redisdelay_*, in base units (seconds), labelled
// with topic and, where a consumer group applies, consumer_group; the
// partitions of a topic are summed. The list is in the
// repository's docs/metrics.md.
package prommetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisdelay/watermill-redisdelay"
)

// Metrics holds the Prometheus metrics of the Publishers, Subscribers and
// Managers (and Subscribers' embedded schedulers) it is given to, through
// the Metrics field of their configs. One Metrics serves any number of
// them. Safe for concurrent use.
//
// The queue sizes held in Redis are exported by a Collector instead (see
// NewCollector).
type Metrics struct {
	publishDuration *prometheus.HistogramVec // topic, result
	published       *prometheus.CounterVec   // topic, delay
	delivered       *prometheus.CounterVec   // topic, consumer_group, attempt
	deliveryLag     *prometheus.HistogramVec // topic, consumer_group
	ackLatency      *prometheus.HistogramVec // topic, consumer_group
	retries         *prometheus.CounterVec   // topic, consumer_group
	deadLettered    *prometheus.CounterVec   // topic, consumer_group, source
	expired         *prometheus.CounterVec   // topic, consumer_group
	timedOut        *prometheus.CounterVec   // topic, consumer_group
	reclaimed       *prometheus.CounterVec   // topic, consumer_group
	promoted        *prometheus.CounterVec   // topic
	lateness        *prometheus.HistogramVec // topic
}

var _ redisdelay.Metrics = (*Metrics)(nil)

// latencyBuckets span 0.5ms to 10s: Redis round trips to a backlog.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// New creates the metrics and registers them with reg (for example
// prometheus.DefaultRegisterer, or a prometheus.NewRegistry()). It fails
// when reg refuses them, e.g. because another Metrics is registered there
// already: create one Metrics per registry and share it. A nil reg
// registers nothing (the caller registers the Metrics, a
// prometheus.Collector, itself).
func New(reg prometheus.Registerer) (*Metrics, error) {
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
			Help: "Messages moved to the dead letters (source: nack for a Nack on the last attempt or an undecodable entry, reclaim for a consumer that stopped responding on the last attempt, expired for a message past its deadline)."},
			append(tg, "source")),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "expired_messages_total",
			Help: "Messages not handed to a handler because their deadline (metadata _redisdelay_expires_at) had passed: dead-lettered (also counted in dead_lettered_messages_total, source expired) or dropped."}, tg),
		timedOut: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "handler_timeouts_total",
			Help: "Deliveries whose handler did not Ack or Nack within its timeout (SubscriberConfig.HandlerTimeout): counted as failed attempts, requeued or dead-lettered (also counted there) or retried in place by an ordered subscription."}, tg),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reclaimed_messages_total",
			Help: "Messages taken back by this process's scheduler from consumers that stopped responding, and requeued for another attempt."}, tg),
		promoted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "promoted_messages_total",
			Help: "Messages moved by this process's scheduler from a waiting or retry set to where consumers read them, as they became due."}, []string{"topic"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "scheduler_lateness_seconds",
			Help:    "How late this process's scheduler moved the earliest due message of a tick, after the due time Redis reported for it.",
			Buckets: latencyBuckets}, []string{"topic"}),
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
		m.retries, m.deadLettered, m.expired, m.timedOut, m.reclaimed, m.promoted, m.lateness}
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

// The methods below implement redisdelay.Metrics; a nil *Metrics records
// nothing, like a nil redisdelay.Metrics.

// Published implements redisdelay.Metrics.
func (m *Metrics) Published(topic string, took time.Duration, delayed, immediate int, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.publishDuration.WithLabelValues(topic, result).Observe(took.Seconds())
	if err != nil {
		return
	}
	if delayed > 0 {
		m.published.WithLabelValues(topic, "delayed").Add(float64(delayed))
	}
	if immediate > 0 {
		m.published.WithLabelValues(topic, "immediate").Add(float64(immediate))
	}
}

// Subscription implements redisdelay.Metrics: it resolves the
// subscription's metrics once.
func (m *Metrics) Subscription(topic, consumerGroup string) redisdelay.SubscriptionMetrics {
	if m == nil {
		return nil
	}
	return &subscription{
		first:    m.delivered.WithLabelValues(topic, consumerGroup, "first"),
		retry:    m.delivered.WithLabelValues(topic, consumerGroup, "retry"),
		lag:      m.deliveryLag.WithLabelValues(topic, consumerGroup),
		ack:      m.ackLatency.WithLabelValues(topic, consumerGroup),
		retries:  m.retries.WithLabelValues(topic, consumerGroup),
		dead:     m.deadLettered.WithLabelValues(topic, consumerGroup, "nack"),
		expired:  m.expired.WithLabelValues(topic, consumerGroup),
		expDead:  m.deadLettered.WithLabelValues(topic, consumerGroup, "expired"),
		timedOut: m.timedOut.WithLabelValues(topic, consumerGroup),
	}
}

// Promoted implements redisdelay.Metrics.
func (m *Metrics) Promoted(topic string, moved int, late time.Duration) {
	if m == nil {
		return
	}
	if moved > 0 {
		m.promoted.WithLabelValues(topic).Add(float64(moved))
	}
	if late >= 0 {
		m.lateness.WithLabelValues(topic).Observe(late.Seconds())
	}
}

// Reclaimed implements redisdelay.Metrics.
func (m *Metrics) Reclaimed(topic, consumerGroup string, requeued, deadLettered int) {
	if m == nil {
		return
	}
	if requeued > 0 {
		m.reclaimed.WithLabelValues(topic, consumerGroup).Add(float64(requeued))
	}
	if deadLettered > 0 {
		m.deadLettered.WithLabelValues(topic, consumerGroup, "reclaim").Add(float64(deadLettered))
	}
}

// subscription is the metrics of one subscription, resolved once.
type subscription struct {
	first, retry prometheus.Counter
	lag, ack     prometheus.Observer
	retries      prometheus.Counter
	dead         prometheus.Counter
	expired      prometheus.Counter
	expDead      prometheus.Counter // dead letters, source expired
	timedOut     prometheus.Counter
}

func (s *subscription) Delivered(attempt int, lag time.Duration) {
	if attempt > 1 {
		s.retry.Inc()
	} else {
		s.first.Inc()
	}
	if lag >= 0 {
		s.lag.Observe(lag.Seconds())
	}
}

func (s *subscription) Nacked(deadLettered bool) {
	if deadLettered {
		s.dead.Inc()
	} else {
		s.retries.Inc()
	}
}

func (s *subscription) Expired(deadLettered bool) {
	s.expired.Inc()
	if deadLettered {
		s.expDead.Inc()
	}
}

func (s *subscription) TimedOut() { s.timedOut.Inc() }

func (s *subscription) AckWritten(latency time.Duration) { s.ack.Observe(latency.Seconds()) }
