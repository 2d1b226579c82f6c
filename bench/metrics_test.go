package main

import (
	"runtime"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/prommetrics"
)

// The hot paths of hotpath_test.go with Prometheus metrics on, to compare.

func newMetrics(b *testing.B) *prommetrics.Metrics {
	m, err := prommetrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkPublishMetrics is BenchmarkPublish (single messages) with
// PublisherConfig.Metrics.
func BenchmarkPublishMetrics(b *testing.B) {
	for _, c := range []struct {
		name  string
		delay time.Duration
	}{{"immediate", 0}, {"delayed", time.Hour}} {
		b.Run(c.name, func(b *testing.B) {
			pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: freshClient(b), Metrics: newMetrics(b)}, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetParallelism(max(1, publishers/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := pub.Publish("hot", []*message.Message{benchMessage(c.delay)}...); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkSubscribeAckMetrics is BenchmarkSubscribeAck with
// SubscriberConfig.Metrics.
func BenchmarkSubscribeAckMetrics(b *testing.B) { benchSubscribeAck(b, newMetrics(b)) }
