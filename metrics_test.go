package redisdelay_test

// Prometheus metrics, the queue Collector and the health check against the
// real test server. Every test uses a fresh topic and registry.

import (
	"context"
	"encoding/json"
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

// mtMetrics returns Metrics registered in a new registry.
func mtMetrics(t *testing.T) (*prommetrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := prommetrics.New(reg)
	require.NoError(t, err)
	return m, reg
}

// mtFind returns the metric of family name whose labels include labels,
// or nil.
func mtFind(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// mtValue is the value of a counter or gauge (-1 when absent), or the
// sample count of a histogram.
func mtValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := mtFind(t, reg, name, labels)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

func mtEventually(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return mtValue(t, reg, name, labels) == want }, 5*time.Second, 20*time.Millisecond) {
		t.Fatalf("%s%v is %v, want %v", name, labels, mtValue(t, reg, name, labels), want)
	}
}

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
	m, reg := mtMetrics(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, Metrics: m}, logger)
	require.NoError(t, err)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{
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

	require.NoError(t, pub.Publish(topic, lcMessage("i1"), lcMessage("i2"), lcMessage("i3")))
	d1, d2 := lcMessage("d1"), lcMessage("d2")
	delay.Message(d1, delay.For(150*time.Millisecond))
	delay.Message(d2, delay.For(150*time.Millisecond))
	require.NoError(t, pub.Publish(topic, d1, d2))
	bad := lcMessage("bad")
	bad.Metadata.Set(delay.DelayedForKey, "soon")
	require.ErrorIs(t, pub.Publish(topic, bad), redisdelay.ErrInvalidDelay)

	assert.Equal(t, 3.0, testutil.ToFloat64(mtCounter(t, reg, "redisdelay_published_messages_total", map[string]string{"topic": topic, "delay": "immediate"})))
	assert.Equal(t, 2.0, mtValue(t, reg, "redisdelay_published_messages_total", map[string]string{"topic": topic, "delay": "delayed"}))
	assert.Equal(t, 2.0, mtValue(t, reg, "redisdelay_publish_duration_seconds", map[string]string{"topic": topic, "result": "ok"}))
	assert.Equal(t, 1.0, mtValue(t, reg, "redisdelay_publish_duration_seconds", map[string]string{"topic": topic, "result": "error"}))

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

	assert.Equal(t, 5.0, mtValue(t, reg, "redisdelay_delivered_messages_total", with("attempt", "first")))
	assert.Equal(t, 1.0, mtValue(t, reg, "redisdelay_delivered_messages_total", with("attempt", "retry")))
	assert.Equal(t, 6.0, mtValue(t, reg, "redisdelay_delivery_lag_seconds", tg))
	assert.Equal(t, 1.0, mtValue(t, reg, "redisdelay_retries_total", tg))
	assert.Equal(t, 1.0, mtValue(t, reg, "redisdelay_dead_lettered_messages_total", with("source", "nack")))
	mtEventually(t, reg, "redisdelay_ack_latency_seconds", tg, 4)
	// The two delayed messages; a retry without delay skips the retry set.
	assert.Equal(t, 2.0, mtValue(t, reg, "redisdelay_promoted_messages_total", map[string]string{"topic": topic}))
	assert.GreaterOrEqual(t, mtValue(t, reg, "redisdelay_scheduler_lateness_seconds", map[string]string{"topic": topic}), 1.0)
	t.Logf("scrape:\n%s", mtScrape(t, reg))
}

// mtCounter is the counter of family name with labels, as a Collector
// for testutil.ToFloat64.
func mtCounter(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	m := mtFind(t, reg, name, labels)
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
	m, reg := mtMetrics(t)
	pub := lcPublisher(t, client)
	requeued, buried := topic(), topic()
	for _, c := range []struct {
		topic       string
		maxAttempts int
	}{{requeued, 2}, {buried, 1}} {
		sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{
			ConsumerGroup: "g", MaxAttempts: c.maxAttempts, VisibilityTimeout: 300 * time.Millisecond, DisableScheduler: true,
		})
		require.NoError(t, sub.SubscribeInitialize(c.topic))
		require.NoError(t, pub.Publish(c.topic, lcMessage("x")))
		lcCrashedRead(t, client, c.topic, "g", "crashed")
	}
	lcManager(t, client, redisdelay.ManagerConfig{Topics: []string{requeued, buried}, CheckInterval: 50 * time.Millisecond, Metrics: m})

	mtEventually(t, reg, "redisdelay_reclaimed_messages_total", map[string]string{"topic": requeued, "consumer_group": "g"}, 1)
	mtEventually(t, reg, "redisdelay_dead_lettered_messages_total", map[string]string{"topic": buried, "consumer_group": "g", "source": "reclaim"}, 1)
	assert.Equal(t, -1.0, mtValue(t, reg, "redisdelay_reclaimed_messages_total", map[string]string{"topic": buried}))
	assert.Equal(t, -1.0, mtValue(t, reg, "redisdelay_dead_lettered_messages_total", map[string]string{"topic": requeued}))
}

// The Collector reads the queue sizes at each scrape.
func TestCollector_GaugesAfterAScrape(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	require.NoError(t, sub.SubscribeInitialize(topic))
	require.NoError(t, pub.Publish(topic, lcMessage("r1"), lcMessage("r2"), lcMessage("r3")))
	lcCrashedRead(t, client, topic, "g", "crashed")
	later, soon := lcMessage("later"), lcMessage("soon")
	delay.Message(later, delay.For(time.Hour))
	delay.Message(soon, delay.For(50*time.Millisecond))
	require.NoError(t, pub.Publish(topic, later))
	published := time.Now()
	require.NoError(t, pub.Publish(topic, soon))
	time.Sleep(400 * time.Millisecond) // no scheduler: soon stays waiting, overdue

	c, err := prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: lcInspector(t, client), Topics: []string{topic}})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	tl := map[string]string{"topic": topic}
	tg := map[string]string{"topic": topic, "consumer_group": "g"}
	assert.Equal(t, 2.0, mtValue(t, reg, "redisdelay_waiting_messages", tl))
	overdue := mtValue(t, reg, "redisdelay_oldest_due_age_seconds", tl)
	// Due 50ms after its publish, read at least 400ms after it: overdue by
	// at least 0.35s less rounding, and by no more than the time since.
	assert.GreaterOrEqual(t, overdue, 0.3)
	assert.LessOrEqual(t, overdue, time.Since(published).Seconds())
	assert.Equal(t, 2.0, mtValue(t, reg, "redisdelay_ready_messages", tg))
	assert.Equal(t, 1.0, mtValue(t, reg, "redisdelay_pending_messages", tg))
	assert.Equal(t, 0.0, mtValue(t, reg, "redisdelay_retry_messages", tg))
	assert.Equal(t, 0.0, mtValue(t, reg, "redisdelay_dead_letters", tg))
	assert.Equal(t, 1.0, mtValue(t, reg, "redisdelay_consumers", tg))
	assert.Equal(t, 0.0, mtValue(t, reg, "redisdelay_scrape_errors_total", nil))
	t.Logf("scrape:\n%s", mtScrape(t, reg))

	// Without a topic list it exports every topic of the registry.
	all, err := prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: lcInspector(t, client)})
	require.NoError(t, err)
	assert.Equal(t, 2.0, testutil.ToFloat64(mtOnly(t, all, "redisdelay_waiting_messages", tl)))
}

// mtOnly gathers one collector and returns the named metric as a
// Collector for testutil.ToFloat64.
func mtOnly(t *testing.T, c prometheus.Collector, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	m := mtFind(t, reg, name, labels)
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
	insp := lcInspector(t, dead)
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
		assert.Equal(t, float64(max(len(topics), 1)), mtValue(t, gathered, "redisdelay_scrape_errors_total", nil))
	}

	_, err := prommetrics.NewCollector(prommetrics.CollectorConfig{})
	assert.ErrorContains(t, err, "CollectorConfig.Inspector is nil")
	_, err = prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: insp, Topics: []string{"a b"}})
	assert.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
	_, err = prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: insp, Timeout: -time.Second})
	assert.ErrorContains(t, err, "CollectorConfig.Timeout")
}

// ---------------------------------------------------------------- health

func mtHealth(t *testing.T, insp *redisdelay.Inspector, config redisdelay.HealthConfig) redisdelay.HealthReport {
	t.Helper()
	rep, err := insp.Health(context.Background(), config)
	require.NoError(t, err)
	return rep
}

func TestHealth_HealthyTopic(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", CheckInterval: 100 * time.Millisecond})
	ch := subscribe(t, sub, topic)
	msg := lcMessage("x")
	delay.Message(msg, delay.For(100*time.Millisecond))
	require.NoError(t, pub.Publish(topic, msg, lcMessage("y")))
	receive(t, ch, 3*time.Second).Ack()
	receive(t, ch, 3*time.Second).Ack()
	later := lcMessage("later")
	delay.Message(later, delay.For(time.Hour))
	require.NoError(t, pub.Publish(topic, later))
	time.Sleep(300 * time.Millisecond)

	insp := lcInspector(t, client)
	config := redisdelay.HealthConfig{Topics: []string{topic}, StuckAfter: 200 * time.Millisecond,
		ConsumerIdle: 200 * time.Millisecond, MaxOverdue: 200 * time.Millisecond}
	rep := mtHealth(t, insp, config)
	assert.True(t, rep.Healthy, "%+v", rep.Problems)
	assert.Equal(t, 1, rep.Topics)

	srv := httptest.NewServer(redisdelay.HealthHandler(insp, config, 0))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	var body redisdelay.HealthReport
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	assert.True(t, body.Healthy)
}

// A consumer that read a message and died, with no scheduler to reclaim
// it: the message is stuck.
func TestHealth_StuckPendingMessage(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	require.NoError(t, sub.SubscribeInitialize(topic))
	require.NoError(t, pub.Publish(topic, lcMessage("x")))
	e := lcCrashedRead(t, client, topic, "g", "crashed")
	time.Sleep(300 * time.Millisecond)

	insp := lcInspector(t, client)
	config := redisdelay.HealthConfig{Topics: []string{topic}, StuckAfter: 200 * time.Millisecond}
	rep := mtHealth(t, insp, config)
	require.False(t, rep.Healthy)
	require.Len(t, rep.Problems, 1, "%+v", rep.Problems)
	p := rep.Problems[0]
	assert.Equal(t, redisdelay.ProblemStuckPending, p.Kind)
	assert.Equal(t, topic, p.Topic)
	assert.Equal(t, "g", p.Group)
	assert.Contains(t, p.Detail, e.ID)
	assert.NotContains(t, p.Detail, "crashed", "consumer names are shown only with ShowConsumers")
	t.Log(p.Detail)
	config.ShowConsumers = true
	assert.Contains(t, mtHealth(t, insp, config).Problems[0].Detail, `for consumer "crashed"`)

	// The default limit is twice the group's stored VisibilityTimeout (30s).
	assert.True(t, mtHealth(t, insp, redisdelay.HealthConfig{Topics: []string{topic}}).Healthy)

	srv := httptest.NewServer(redisdelay.HealthHandler(insp, config, time.Second))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
	b, _ := io.ReadAll(res.Body)
	t.Logf("%s", b)
	var body redisdelay.HealthReport
	require.NoError(t, json.Unmarshal(b, &body))
	assert.False(t, body.Healthy)
	require.Len(t, body.Problems, 1)
	assert.Equal(t, redisdelay.HealthProblem{Topic: topic, Group: "g", Kind: redisdelay.ProblemStuckPending, Detail: body.Problems[0].Detail}, body.Problems[0])
}

// Messages ready and no consumer: a group created and never consumed, and
// one whose consumer stopped reading.
func TestHealth_ReadyMessagesAndNoActiveConsumer(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	for _, g := range []string{"never", "stopped"} {
		sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: g, DisableScheduler: true})
		require.NoError(t, sub.SubscribeInitialize(topic))
	}
	require.NoError(t, pub.Publish(topic, lcMessage("1"), lcMessage("2")))
	lcCrashedRead(t, client, topic, "stopped", "gone")
	time.Sleep(300 * time.Millisecond)

	insp := lcInspector(t, client)
	rep := mtHealth(t, insp, redisdelay.HealthConfig{Topics: []string{topic}, ConsumerIdle: 200 * time.Millisecond, StuckAfter: time.Hour})
	require.Len(t, rep.Problems, 2, "%+v", rep.Problems)
	byGroup := map[string]redisdelay.HealthProblem{}
	for _, p := range rep.Problems {
		assert.Equal(t, redisdelay.ProblemNoActiveConsumer, p.Kind)
		byGroup[p.Group] = p
		t.Log(p.Detail)
	}
	assert.Contains(t, byGroup["never"].Detail, "2 message(s) ready and the group has no consumer")
	assert.Contains(t, byGroup["stopped"].Detail, "1 message(s) ready and none of its 1 consumer(s) read for")

	// A live subscription reads every BlockTime: healthy again.
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "never", DisableScheduler: true, BlockTime: 50 * time.Millisecond})
	ch := subscribe(t, sub, topic)
	receive(t, ch, 3*time.Second).Ack()
	receive(t, ch, 3*time.Second).Ack()
	rep = mtHealth(t, insp, redisdelay.HealthConfig{Topics: []string{topic}, ConsumerIdle: 200 * time.Millisecond, StuckAfter: time.Hour})
	require.Len(t, rep.Problems, 1, "%+v", rep.Problems)
	assert.Equal(t, "stopped", rep.Problems[0].Group)
}

// Subscribers with DisableScheduler and no Manager: due messages stay
// waiting and the topic is reported.
func TestHealth_SchedulerNotRunning(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true, BlockTime: 50 * time.Millisecond})
	ch := subscribe(t, sub, topic)
	msg := lcMessage("x")
	delay.Message(msg, delay.For(50*time.Millisecond))
	require.NoError(t, pub.Publish(topic, msg))
	nothing(t, ch, 400*time.Millisecond)

	insp := lcInspector(t, client)
	overdue, err := insp.Overdue(context.Background(), topic)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, overdue, 300*time.Millisecond)
	rep := mtHealth(t, insp, redisdelay.HealthConfig{Topics: []string{topic}, MaxOverdue: 200 * time.Millisecond})
	require.Len(t, rep.Problems, 1, "%+v", rep.Problems)
	p := rep.Problems[0]
	assert.Equal(t, redisdelay.ProblemSchedulerBehind, p.Kind)
	assert.Empty(t, p.Group)
	assert.Contains(t, p.Detail, "no scheduler runs")
	t.Log(p.Detail)
	// The default MaxOverdue is a minute.
	assert.True(t, mtHealth(t, insp, redisdelay.HealthConfig{Topics: []string{topic}}).Healthy)
}

func TestHealth_Errors(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	insp := lcInspector(t, client)
	_, err := insp.Health(context.Background(), redisdelay.HealthConfig{StuckAfter: -time.Second})
	assert.ErrorContains(t, err, "must not be negative")
	_, err = insp.Health(context.Background(), redisdelay.HealthConfig{Topics: []string{"a{b"}})
	assert.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
	_, err = insp.Overdue(context.Background(), "")
	assert.ErrorIs(t, err, redisdelay.ErrInvalidTopic)

	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	deadInsp := lcInspector(t, dead)
	for _, topics := range [][]string{{"a"}, nil} {
		_, err = deadInsp.Health(context.Background(), redisdelay.HealthConfig{Topics: topics})
		assert.Error(t, err)
	}
	_, err = deadInsp.Overdue(context.Background(), "a")
	assert.Error(t, err)

	srv := httptest.NewServer(redisdelay.HealthHandler(deadInsp, redisdelay.HealthConfig{Topics: []string{"a"}}, time.Second))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	var body struct {
		Healthy bool   `json:"healthy"`
		Error   string `json:"error"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	assert.False(t, body.Healthy)
	assert.Contains(t, body.Error, "127.0.0.1:1")
}
