package prommetrics_test

// Helpers of the tests against Redis (the server itself and newClient are
// in main_test.go): the names the redisdelay package's tests use for the
// helpers both share (internal/testkit), and a few of this package's own.

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/testkit"
)

var logger = testkit.Logger

func topic() string { return "t-" + watermill.NewShortUUID() }

func newMessage(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
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

var (
	newPublisher  = testkit.NewPublisher
	newSubscriber = testkit.NewSubscriber
	runManager    = testkit.RunManager
	crashedRead   = testkit.CrashedRead
	newInspector  = testkit.NewInspector
	newMetrics    = testkit.NewMetrics
	findMetric    = testkit.FindMetric
	metricValue   = testkit.MetricValue
	awaitMetric   = testkit.AwaitMetric
	subscribe     = testkit.Subscribe
	receive       = testkit.Receive
	nothing       = testkit.Nothing
)
