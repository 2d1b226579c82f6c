package redisdelay_test

import "github.com/redisdelay/watermill-redisdelay/internal/testkit"

// The Prometheus metrics of prommetrics, read back by the tests of the
// features that record them (internal/testkit, shared with prommetrics).
var (
	newMetrics  = testkit.NewMetrics
	metricValue = testkit.MetricValue
	awaitMetric = testkit.AwaitMetric
)
