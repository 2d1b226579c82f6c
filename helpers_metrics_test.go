package redisdelay_test

// The Prometheus metrics of prommetrics, read back by the tests of the
// features that record them.

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/prommetrics"
)

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
