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

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
	"github.com/redisdelay/watermill-redisdelay/internal/testkit"
)

var logger = watermill.NewStdLogger(false, false)

func topic() string { return "t-" + watermill.NewShortUUID() }

func newMessage(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
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

func newPublisher(t *testing.T, client redis.UniversalClient) *redisdelay.Publisher {
	t.Helper()
	return testkit.NewPublisher(t, client, logger)
}

func newSubscriber(t *testing.T, client redis.UniversalClient, config redisdelay.SubscriberConfig) *redisdelay.Subscriber {
	t.Helper()
	return testkit.NewSubscriber(t, client, config, logger)
}

func runManager(t *testing.T, client redis.UniversalClient, config redisdelay.ManagerConfig) *redisdelay.Manager {
	t.Helper()
	return testkit.RunManager(t, client, config, logger)
}

var (
	newInspector = testkit.NewInspector
	newMetrics   = testkit.NewMetrics
	findMetric   = testkit.FindMetric
	metricValue  = testkit.MetricValue
	awaitMetric  = testkit.AwaitMetric
)

var (
	subscribe = testkit.Subscribe
	receive   = testkit.Receive
	nothing   = testkit.Nothing
)
