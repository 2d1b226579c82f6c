package prommetrics_test

// Helpers of the tests against Redis (the server itself and newClient are
// in main_test.go): small copies of the redisdelay package's test helpers
// (its helpers_test.go and helpers_redis_test.go), which the tests of
// another package cannot call, and the metrics read back.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
	"github.com/redisdelay/watermill-redisdelay/prommetrics"
)

var logger = watermill.NewStdLogger(false, false)

func topic() string { return "t-" + watermill.NewShortUUID() }

func newMessage(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
}

func subscribe(t *testing.T, sub message.Subscriber, topic string) <-chan *message.Message {
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	return ch
}

func receive(t *testing.T, ch <-chan *message.Message, within time.Duration) *message.Message {
	t.Helper()
	select {
	case msg := <-ch:
		require.NotNil(t, msg, "channel closed")
		return msg
	case <-time.After(within):
		t.Fatalf("no message within %s", within)
		return nil
	}
}

func nothing(t *testing.T, ch <-chan *message.Message, during time.Duration) {
	t.Helper()
	select {
	case msg := <-ch:
		t.Fatalf("unexpected message %s (%s)", msg.UUID, msg.Payload)
	case <-time.After(during):
	}
}

func newPublisher(t *testing.T, client redis.UniversalClient) *redisdelay.Publisher {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, logger)
	require.NoError(t, err)
	return pub
}

// newSubscriber returns a Subscriber on client with config (Client is set
// here), closed when the test ends.
func newSubscriber(t *testing.T, client redis.UniversalClient, config redisdelay.SubscriberConfig) *redisdelay.Subscriber {
	t.Helper()
	config.Client = client
	sub, err := redisdelay.NewSubscriber(config, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func newInspector(t *testing.T, client redis.UniversalClient) *redisdelay.Inspector {
	t.Helper()
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	require.NoError(t, err)
	return insp
}

// runManager runs a Manager for the given topics only (a Manager without a
// topic list would schedule every other test's topics too).
func runManager(t *testing.T, client redis.UniversalClient, config redisdelay.ManagerConfig) *redisdelay.Manager {
	t.Helper()
	config.Client = client
	mgr, err := redisdelay.NewManager(config, logger)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	<-mgr.Running()
	return mgr
}

// crashedRead fetches one message of the ready stream as a consumer that
// then dies: it never acks nor extends the lease.
func crashedRead(t *testing.T, client redis.UniversalClient, topic, group, consumer string) redis.XMessage {
	t.Helper()
	stream := store.Keys{Prefix: redisdelay.DefaultKeyPrefix}.Shard(topic, 0).Stream()
	res, err := client.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: 1, Block: -1,
	}).Result()
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Len(t, res[0].Messages, 1)
	return res[0].Messages[0]
}

// newMetrics returns Metrics registered in a new registry.
func newMetrics(t *testing.T) (*prommetrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := prommetrics.New(reg)
	require.NoError(t, err)
	return m, reg
}

// findMetric returns the metric of family name whose labels include labels,
// or nil.
func findMetric(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
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

// metricValue is the value of a counter or gauge (-1 when absent), or the
// sample count of a histogram.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := findMetric(t, reg, name, labels)
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

func awaitMetric(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return metricValue(t, reg, name, labels) == want }, 5*time.Second, 20*time.Millisecond) {
		t.Fatalf("%s%v is %v, want %v", name, labels, metricValue(t, reg, name, labels), want)
	}
}

// scrape is what /metrics serves for reg.
func scrape(t *testing.T, reg prometheus.Gatherer) string {
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
