package prommetrics_test

// The Collector against the test server: every test uses a fresh topic and
// registry.

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/prommetrics"
)

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
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_grouped_messages", tg), "no message has a group")
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_active_groups", tg))
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_scrape_errors_total", nil))
	t.Logf("scrape:\n%s", scrape(t, reg))

	// Without a topic list it exports every topic of the registry.
	all, err := prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: newInspector(t, client)})
	require.NoError(t, err)
	assert.Equal(t, 2.0, testutil.ToFloat64(gaugeCopy(t, all, "redisdelay_waiting_messages", tl)))
}

// Grouped messages (redisdelay.SetGroup) a scheduler queued in their groups
// for a consumer group nobody consumes yet show in grouped_messages (and
// not in ready_messages), their groups in active_groups; both go back to 0
// once a subscriber has taken and acknowledged them.
func TestCollector_GroupedMessagesAndActiveGroups(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := newPublisher(t, client)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	require.NoError(t, sub.SubscribeInitialize(topic))
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{topic}})
	var msgs []*message.Message
	for i, tenant := range []string{"tenant-1", "tenant-1", "tenant-1", "tenant-2", "tenant-2"} {
		msg := newMessage(fmt.Sprint(tenant, "/", i))
		redisdelay.SetGroup(msg, tenant)
		msgs = append(msgs, msg)
	}
	msgs = append(msgs, newMessage("no group"))
	require.NoError(t, pub.Publish(topic, msgs...))

	c, err := prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: newInspector(t, client), Topics: []string{topic}})
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	tg := map[string]string{"topic": topic, "consumer_group": "g"}
	awaitMetric(t, reg, "redisdelay_grouped_messages", tg, 5)
	assert.Equal(t, 2.0, metricValue(t, reg, "redisdelay_active_groups", tg))
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_ready_messages", tg), "the message without a group")
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_waiting_messages", map[string]string{"topic": topic}))
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_scrape_errors_total", nil))
	t.Logf("scrape:\n%s", scrape(t, reg))

	ch := subscribe(t, sub, topic)
	for range msgs {
		receive(t, ch, 5*time.Second).Ack()
	}
	awaitMetric(t, reg, "redisdelay_active_groups", tg, 0)
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_grouped_messages", tg))
}

// gaugeCopy gathers one collector and returns the named metric as a
// Collector for testutil.ToFloat64.
func gaugeCopy(t *testing.T, c prometheus.Collector, name string, labels map[string]string) prometheus.Collector {
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
