package prommetrics_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/prommetrics"
)

// The hooks run on every Publish, delivery and Ack: once a label set is
// known they must not allocate. (The end-to-end counts are tested in the
// redisdelay package's metrics_test.go, against Redis.)
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
