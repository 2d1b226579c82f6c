package prommetrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/names"
)

// CollectorConfig configures a Collector.
type CollectorConfig struct {
	// Inspector reads the queues. Required.
	Inspector *redisdelay.Inspector

	// Topics to export. Empty: every topic in the registry of the
	// Inspector's key prefix, listed again at each scrape.
	Topics []string

	// Timeout bounds one scrape's reads from Redis (default 5s). What is not
	// read by then is left out of the scrape and counted in
	// redisdelay_scrape_errors_total.
	Timeout time.Duration
}

// Collector is a prometheus.Collector of the queue sizes Redis holds, read
// through an Inspector at each scrape: per topic the waiting messages and
// how long the earliest of them is overdue, per topic and consumer group
// the ready, pending, retry and dead messages, the consumers, and the
// grouped messages queued and the active groups (see redisdelay.GroupKey).
// The values cover every process, unlike Metrics, which counts what this
// process did: register it in one process (or several: each reads the
// same values).
// Errors never fail a scrape: the topics that could not be read are left
// out and counted in redisdelay_scrape_errors_total.
type Collector struct {
	insp    *redisdelay.Inspector
	topics  []string
	timeout time.Duration
	errors  prometheus.Counter

	waiting, overdue, ready, pending, retry, dead, consumers, grouped, activeGroups *prometheus.Desc
}

// NewCollector returns a Collector; register it, e.g. with
// prometheus.MustRegister(collector).
func NewCollector(config CollectorConfig) (*Collector, error) {
	if config.Inspector == nil {
		return nil, errors.New("prommetrics: CollectorConfig.Inspector is nil: pass one from redisdelay.NewInspector")
	}
	for i, t := range config.Topics {
		if p := names.Problem(fmt.Sprintf("CollectorConfig.Topics[%d]", i), t); p != "" {
			return nil, fmt.Errorf("%w: %s", redisdelay.ErrInvalidTopic, p)
		}
	}
	if config.Timeout == 0 {
		config.Timeout = 5 * time.Second
	}
	if config.Timeout < time.Millisecond {
		return nil, fmt.Errorf("prommetrics: CollectorConfig.Timeout is %s: use at least 1ms (0 means the default)", config.Timeout)
	}
	tg := []string{"topic", "consumer_group"}
	desc := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("redisdelay_"+name, help, labels, nil)
	}
	return &Collector{
		insp: config.Inspector, topics: config.Topics, timeout: config.Timeout,
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "redisdelay_scrape_errors_total",
			Help: "Topics (or topic lists) the Collector could not read from Redis during a scrape; they were left out of it."}),
		waiting:      desc("waiting_messages", "Delayed messages waiting for their due time, including due ones no scheduler has moved yet.", []string{"topic"}),
		overdue:      desc("oldest_due_age_seconds", "How long the earliest waiting message is overdue (Redis clock); 0 when none is due. Grows when no scheduler runs or it falls behind.", []string{"topic"}),
		ready:        desc("ready_messages", "Messages due and not yet fetched by a consumer of the group (new ones and redeliveries).", tg),
		pending:      desc("pending_messages", "Messages fetched by a consumer of the group and not yet acknowledged.", tg),
		retry:        desc("retry_messages", "Nacked or reclaimed messages waiting for their retry delay.", tg),
		dead:         desc("dead_letters", "Dead letters held for the group.", tg),
		consumers:    desc("consumers", "Consumers of the group known to Redis (including crashed ones not removed yet); the most of any partition.", tg),
		grouped:      desc("grouped_messages", "Grouped messages (GroupKey) due and queued in their groups for the consumer group, not yet taken by a consumer (not in ready_messages).", tg),
		activeGroups: desc("active_groups", "Groups (GroupKey) holding queued or unsettled messages of the consumer group, summed over partitions.", tg),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.waiting, c.overdue, c.ready, c.pending, c.retry, c.dead, c.consumers, c.grouped, c.activeGroups} {
		ch <- d
	}
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector: it reads Redis, within the
// configured timeout.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	topics := c.topics
	if len(topics) == 0 {
		var err error
		if topics, err = c.insp.Topics(ctx); err != nil {
			c.errors.Inc()
		}
	}
	for _, topic := range topics {
		if names.Problem("topic", topic) != "" {
			continue
		}
		st, err := c.insp.Stats(ctx, topic)
		var overdue time.Duration
		if err == nil {
			overdue, err = c.insp.Overdue(ctx, topic)
		}
		if err != nil {
			c.errors.Inc()
			continue
		}
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		gauge(c.waiting, float64(st.Waiting), topic)
		gauge(c.overdue, overdue.Seconds(), topic)
		for _, g := range st.Groups {
			if g.Ready >= 0 {
				gauge(c.ready, float64(g.Ready), topic, g.Group)
			}
			gauge(c.pending, float64(g.Pending), topic, g.Group)
			gauge(c.retry, float64(g.Retry), topic, g.Group)
			gauge(c.dead, float64(g.Dead), topic, g.Group)
			gauge(c.consumers, float64(g.Consumers), topic, g.Group)
			gauge(c.grouped, float64(g.Grouped), topic, g.Group)
			gauge(c.activeGroups, float64(g.ActiveGroups), topic, g.Group)
		}
	}
	c.errors.Collect(ch)
}
