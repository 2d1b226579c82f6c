// Package testkit holds the test helpers that the tests of several packages
// share (the root package's, prommetrics', the CLI's and the dashboard's):
// components closed when the test ends, Prometheus metrics read back, and
// a buffer written and read at once. Tests only.
package testkit

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
	"github.com/redisdelay/watermill-redisdelay/prommetrics"
)

// Logger is the tests' logger: errors only.
var Logger = watermill.NewStdLogger(false, false)

// NewPublisher returns a Publisher on client with the default config.
func NewPublisher(t testing.TB, client redis.UniversalClient) *redisdelay.Publisher {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, Logger)
	require.NoError(t, err)
	return pub
}

// NewSubscriber returns a Subscriber on client with config (Client is set
// here), closed when the test ends.
func NewSubscriber(t testing.TB, client redis.UniversalClient, config redisdelay.SubscriberConfig) *redisdelay.Subscriber {
	t.Helper()
	config.Client = client
	sub, err := redisdelay.NewSubscriber(config, Logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// NewInspector returns an Inspector on client.
func NewInspector(t testing.TB, client redis.UniversalClient) *redisdelay.Inspector {
	t.Helper()
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	require.NoError(t, err)
	return insp
}

// RunManager runs a Manager with config (Client is set here) until the test
// ends. Give it the test's topics: a Manager without a topic list would
// schedule every other test's topics too.
func RunManager(t testing.TB, client redis.UniversalClient, config redisdelay.ManagerConfig) *redisdelay.Manager {
	t.Helper()
	config.Client = client
	mgr, err := redisdelay.NewManager(config, Logger)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	<-mgr.Running()
	return mgr
}

// NewMetrics returns prommetrics Metrics registered in a new registry.
func NewMetrics(t testing.TB) (*prommetrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := prommetrics.New(reg)
	require.NoError(t, err)
	return m, reg
}

// FindMetric returns the metric of family name whose labels include
// labels, or nil.
func FindMetric(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
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

// MetricValue is the value of a counter or gauge (-1 when absent), or the
// sample count of a histogram.
func MetricValue(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := FindMetric(t, reg, name, labels)
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

// AwaitMetric waits up to 5 s for a metric to reach want.
func AwaitMetric(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return MetricValue(t, reg, name, labels) == want }, 5*time.Second, 20*time.Millisecond) {
		t.Fatalf("%s%v is %v, want %v", name, labels, MetricValue(t, reg, name, labels), want)
	}
}

// Subscribe subscribes sub to topic.
func Subscribe(t testing.TB, sub message.Subscriber, topic string) <-chan *message.Message {
	t.Helper()
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	return ch
}

// Receive returns the next message of ch, failing the test when none comes
// within the time given.
func Receive(t testing.TB, ch <-chan *message.Message, within time.Duration) *message.Message {
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

// Nothing fails the test when ch delivers a message during the time given.
func Nothing(t testing.TB, ch <-chan *message.Message, during time.Duration) {
	t.Helper()
	select {
	case msg := <-ch:
		t.Fatalf("unexpected message %s (%s)", msg.UUID, msg.Payload)
	case <-time.After(during):
	}
}

// CrashedRead fetches one message of the ready stream of topic (default
// key prefix, partition 0) as a consumer that then dies: it never acks nor
// extends the lease.
func CrashedRead(t testing.TB, client redis.UniversalClient, topic, group, consumer string) redis.XMessage {
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

// ReceiveHandled returns what a test's handler sent on ch, failing the test
// when nothing came within the time given.
func ReceiveHandled(t testing.TB, ch <-chan string, within time.Duration) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(within):
		t.Fatalf("nothing handled within %s", within)
		return ""
	}
}

// SyncBuffer is a bytes.Buffer that one goroutine writes (a logger, a
// command's output) while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
