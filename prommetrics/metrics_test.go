package prommetrics_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/prommetrics"
)

// The hooks run on every Publish, delivery and Ack: once a label set is
// known they must not allocate. (The end-to-end counts are tested below,
// against Redis.)
func TestMetrics_HooksDoNotAllocate(t *testing.T) {
	m, err := prommetrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var rm redisdelay.Metrics = m
	sub := rm.Subscription("t", "g")
	fail := errors.New("x")
	steps := map[string]func(){
		"Published":  func() { rm.Published("t", time.Millisecond, 1, 2, nil) },
		"Failed":     func() { rm.Published("t", time.Millisecond, 0, 0, fail) },
		"Promoted":   func() { rm.Promoted("t", 3, time.Millisecond) },
		"Reclaimed":  func() { rm.Reclaimed("t", "g", 1, 1) },
		"Delivered":  func() { sub.Delivered(2, time.Millisecond) },
		"Nacked":     func() { sub.Nacked(true) },
		"AckWritten": func() { sub.AckWritten(time.Millisecond) },
	}
	for name, step := range steps {
		step() // creates the label set
		if n := testing.AllocsPerRun(100, step); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}

// A nil *Metrics stored in a config's Metrics is a non-nil interface: it
// must record nothing rather than panic.
func TestMetrics_NilRecordsNothing(t *testing.T) {
	var m *prommetrics.Metrics
	var rm redisdelay.Metrics = m
	rm.Published("t", time.Millisecond, 1, 1, nil)
	rm.Promoted("t", 1, 0)
	rm.Reclaimed("t", "g", 1, 1)
	if sub := rm.Subscription("t", "g"); sub != nil {
		t.Errorf("Subscription of a nil *Metrics is %v, want nil", sub)
	}
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

	assert.Equal(t, 3.0, testutil.ToFloat64(counterCopy(t, reg, "redisdelay_published_messages_total", map[string]string{"topic": topic, "delay": "immediate"})))
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
	t.Logf("scrape:\n%s", scrape(t, reg))
}

// counterCopy is the counter of family name with labels, as a Collector
// for testutil.ToFloat64.
func counterCopy(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) prometheus.Collector {
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
