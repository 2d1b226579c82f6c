package redisdelay_test

// Prometheus metrics and the queue Collector against the
// real test server. Every test uses a fresh topic and registry.

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/prommetrics"
)

// mtScrape is what /metrics serves for reg.
func mtScrape(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

func TestMetrics_NewTwiceOnARegistryFails(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, err := prommetrics.New(reg)
	require.NoError(t, err)
	_, err = prommetrics.New(reg)
	var already prometheus.AlreadyRegisteredError
	assert.True(t, errors.As(err, &already), "want AlreadyRegisteredError, got %v", err)

	m, err := prommetrics.New(nil) // registered by the caller
	require.NoError(t, err)
	require.NoError(t, prometheus.NewRegistry().Register(m))
}

// Publishing, consuming, acking and nacking a known number of messages
// counts exactly that.
func TestMetrics_PublishDeliverAckNackCounters(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	m, reg := newMetrics(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, Metrics: m}, logger)
	require.NoError(t, err)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{
		ConsumerGroup: "g", MaxAttempts: 2, CheckInterval: 100 * time.Millisecond, Metrics: m,
		RetryDelay: func(int) time.Duration { return 0 }, // the retry of i2 comes back at once
	})
	require.NoError(t, sub.SubscribeInitialize(topic))
	tg := map[string]string{"topic": topic, "consumer_group": "g"}
	with := func(k, v string) map[string]string {
		l := map[string]string{k: v}
		for a, b := range tg {
			l[a] = b
		}
		return l
	}

	require.NoError(t, pub.Publish(topic, newMessage("i1"), newMessage("i2"), newMessage("i3")))
	d1, d2 := newMessage("d1"), newMessage("d2")
	delay.Message(d1, delay.For(150*time.Millisecond))
	delay.Message(d2, delay.For(150*time.Millisecond))
	require.NoError(t, pub.Publish(topic, d1, d2))
	bad := newMessage("bad")
	bad.Metadata.Set(delay.DelayedForKey, "soon")
	require.ErrorIs(t, pub.Publish(topic, bad), redisdelay.ErrInvalidDelay)

	assert.Equal(t, 3.0, testutil.ToFloat64(mtCounter(t, reg, "redisdelay_published_messages_total", map[string]string{"topic": topic, "delay": "immediate"})))
	assert.Equal(t, 2.0, metricValue(t, reg, "redisdelay_published_messages_total", map[string]string{"topic": topic, "delay": "delayed"}))
	assert.Equal(t, 2.0, metricValue(t, reg, "redisdelay_publish_duration_seconds", map[string]string{"topic": topic, "result": "ok"}))
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_publish_duration_seconds", map[string]string{"topic": topic, "result": "error"}))

	// Ack all but i2, which fails twice: one retry, then the dead letters.
	ch := subscribe(t, sub, topic)
	for range 6 {
		msg := receive(t, ch, 3*time.Second)
		if string(msg.Payload) == "i2" {
			msg.Nack()
		} else {
			msg.Ack()
		}
	}
	nothing(t, ch, 200*time.Millisecond)

	assert.Equal(t, 5.0, metricValue(t, reg, "redisdelay_delivered_messages_total", with("attempt", "first")))
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_delivered_messages_total", with("attempt", "retry")))
	assert.Equal(t, 6.0, metricValue(t, reg, "redisdelay_delivery_lag_seconds", tg))
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_retries_total", tg))
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_dead_lettered_messages_total", with("source", "nack")))
	awaitMetric(t, reg, "redisdelay_ack_latency_seconds", tg, 4)
	// The two delayed messages; a retry without delay skips the retry set.
	assert.Equal(t, 2.0, metricValue(t, reg, "redisdelay_promoted_messages_total", map[string]string{"topic": topic}))
	assert.GreaterOrEqual(t, metricValue(t, reg, "redisdelay_scheduler_lateness_seconds", map[string]string{"topic": topic}), 1.0)
	t.Logf("scrape:\n%s", mtScrape(t, reg))
}

// mtCounter is the counter of family name with labels, as a Collector
// for testutil.ToFloat64.
func mtCounter(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	m := findMetric(t, reg, name, labels)
	require.NotNil(t, m, "%s%v", name, labels)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
	c.Add(m.Counter.GetValue())
	return c
}

// A scheduler with Metrics counts the messages it reclaims from a crashed
// consumer, and the dead letters of a reclaim on the last attempt.
func TestMetrics_ReclaimCounters(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	m, reg := newMetrics(t)
	pub := newPublisher(t, client)
	requeued, buried := topic(), topic()
	for _, c := range []struct {
		topic       string
		maxAttempts int
	}{{requeued, 2}, {buried, 1}} {
		sub := newSubscriber(t, client, redisdelay.SubscriberConfig{
			ConsumerGroup: "g", MaxAttempts: c.maxAttempts, VisibilityTimeout: 300 * time.Millisecond, DisableScheduler: true,
		})
		require.NoError(t, sub.SubscribeInitialize(c.topic))
		require.NoError(t, pub.Publish(c.topic, newMessage("x")))
		crashedRead(t, client, c.topic, "g", "crashed")
	}
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{requeued, buried}, CheckInterval: 50 * time.Millisecond, Metrics: m})

	awaitMetric(t, reg, "redisdelay_reclaimed_messages_total", map[string]string{"topic": requeued, "consumer_group": "g"}, 1)
	awaitMetric(t, reg, "redisdelay_dead_lettered_messages_total", map[string]string{"topic": buried, "consumer_group": "g", "source": "reclaim"}, 1)
	assert.Equal(t, -1.0, metricValue(t, reg, "redisdelay_reclaimed_messages_total", map[string]string{"topic": buried}))
	assert.Equal(t, -1.0, metricValue(t, reg, "redisdelay_dead_lettered_messages_total", map[string]string{"topic": requeued}))
}

// The Collector reads the queue sizes at each scrape.
func TestCollector_GaugesAfterAScrape(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := newPublisher(t, client)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	require.NoError(t, sub.SubscribeInitialize(topic))
	require.NoError(t, pub.Publish(topic, newMessage("r1"), newMessage("r2"), newMessage("r3")))
	crashedRead(t, client, topic, "g", "crashed")
	later, soon := newMessage("later"), newMessage("soon")
	delay.Message(later, delay.For(time.Hour))
	delay.Message(soon, delay.For(50*time.Millisecond))
	require.NoError(t, pub.Publish(topic, later))
	published := time.Now()
	require.NoError(t, pub.Publish(topic, soon))
	time.Sleep(400 * time.Millisecond) // no scheduler: soon stays waiting, overdue

	c, err := prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: newInspector(t, client), Topics: []string{topic}})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	tl := map[string]string{"topic": topic}
	tg := map[string]string{"topic": topic, "consumer_group": "g"}
	assert.Equal(t, 2.0, metricValue(t, reg, "redisdelay_waiting_messages", tl))
	overdue := metricValue(t, reg, "redisdelay_oldest_due_age_seconds", tl)
	// Due 50ms after its publish, read at least 400ms after it: overdue by
	// at least 0.35s less rounding, and by no more than the time since.
	assert.GreaterOrEqual(t, overdue, 0.3)
	assert.LessOrEqual(t, overdue, time.Since(published).Seconds())
	assert.Equal(t, 2.0, metricValue(t, reg, "redisdelay_ready_messages", tg))
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_pending_messages", tg))
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_retry_messages", tg))
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_dead_letters", tg))
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_consumers", tg))
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_scrape_errors_total", nil))
	t.Logf("scrape:\n%s", mtScrape(t, reg))

	// Without a topic list it exports every topic of the registry.
	all, err := prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: newInspector(t, client)})
	require.NoError(t, err)
	assert.Equal(t, 2.0, testutil.ToFloat64(mtOnly(t, all, "redisdelay_waiting_messages", tl)))
}

// mtOnly gathers one collector and returns the named metric as a
// Collector for testutil.ToFloat64.
func mtOnly(t *testing.T, c prometheus.Collector, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	m := findMetric(t, reg, name, labels)
	require.NotNil(t, m)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "copy"})
	g.Set(m.Gauge.GetValue())
	return g
}

// A Redis that cannot be reached makes a scrape count an error, not fail
// or hang past the timeout.
func TestCollector_ScrapeErrorsAreCounted(t *testing.T) {
	t.Parallel()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	insp := newInspector(t, dead)
	for _, topics := range [][]string{{"a", "b"}, nil} {
		c, err := prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: insp, Topics: topics, Timeout: time.Second})
		require.NoError(t, err)
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(c))
		started := time.Now()
		families, err := reg.Gather()
		require.NoError(t, err)
		assert.Less(t, time.Since(started), 2*time.Second)
		assert.Len(t, families, 1, "only the error counter")
		gathered := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return families, nil })
		assert.Equal(t, float64(max(len(topics), 1)), metricValue(t, gathered, "redisdelay_scrape_errors_total", nil))
	}

	_, err := prommetrics.NewCollector(prommetrics.CollectorConfig{})
	assert.ErrorContains(t, err, "CollectorConfig.Inspector is nil")
	_, err = prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: insp, Topics: []string{"a b"}})
	assert.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
	_, err = prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: insp, Timeout: -time.Second})
	assert.ErrorContains(t, err, "CollectorConfig.Timeout")
}
