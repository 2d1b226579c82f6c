package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// deliveryDelay is how far ahead the steady and end-to-end scenarios
// schedule each message.
const deliveryDelay = time.Second

// endToEnd measures scenario 3: n messages published as fast as 64
// goroutines can, each due deliveryDelay after its publish, consumed and
// acknowledged. The rate is n over the time from the first publish to the
// last delivery less deliveryDelay: how fast messages flow through publish,
// promotion and consumption, not counting the wait they asked for.
func (b *bench) endToEnd() {
	n := b.opts.EndToEnd
	rates, p50, p99 := map[string]*float64{}, map[string]*float64{}, map[string]*float64{}
	for _, sys := range deliverySystems(b.opts.Subscribers) {
		var lat *Lateness
		rates[sys.name] = b.measure(fmt.Sprintf("end-to-end delayed · %s", sys.name), n, func() (time.Duration, error) {
			var (
				d   time.Duration
				err error
			)
			lat, d, err = b.deliver(sys, n, func(q delayQueue, t *tracker) error {
				_, err := runPublishers(n, 1, func(i, _ int) error {
					return t.schedule(q, i, time.Now().Add(deliveryDelay))
				})
				return err
			})
			return d - deliveryDelay, err
		})
		if lat != nil {
			b.rep.Lateness = append(b.rep.Lateness, LatenessRun{"end-to-end", sys.name, lat})
			p50[sys.name], p99[sys.name] = ptr(lat.P50), ptr(lat.P99)
		}
	}
	label := fmt.Sprintf("end-to-end delayed, %s messages due %s after publish", count(n), deliveryDelay)
	b.rep.row("3", label, "msg/s", "", rates[sysRedisdelay], asynqPeers(rates)...)
	b.rep.row("3", "lateness p50 in that run", "ms", "", p50[sysRedisdelay], asynqPeers(p50)...)
	b.rep.row("3", "lateness p99 in that run", "ms", "", p99[sysRedisdelay], asynqPeers(p99)...)
}

// lateness measures scenario 4: steady rates of messages due deliveryDelay
// after their publish, and a burst all due at one instant.
func (b *bench) lateness() {
	type stats = map[string]*Lateness
	steady := make([]stats, len(b.opts.Rates))
	burst := stats{}
	for _, sys := range deliverySystems(b.opts.Subscribers) {
		for i, rate := range b.opts.Rates {
			if steady[i] == nil {
				steady[i] = stats{}
			}
			steady[i][sys.name] = b.steady(sys, rate)
		}
		burst[sys.name] = b.burst(sys)
	}
	for i, rate := range b.opts.Rates {
		scenario := fmt.Sprintf("steady %s/s", count(rate))
		b.latenessRows(scenario, steady[i], map[string]string{"p99": steadyTarget(rate)})
	}
	b.latenessRows(fmt.Sprintf("burst of %s due at once", count(b.opts.Burst)), burst, map[string]string{
		"max": "≤ 2,000 ms (all delivered within 2 s)",
	})
}

// steadyTarget is the p99 target at a steady rate.
func steadyTarget(rate int) string {
	switch {
	case rate <= 1000:
		return "≤ 5 ms"
	case rate <= 10000:
		return "≤ 20 ms"
	}
	return ""
}

// latenessRows adds the percentile rows of one scenario; targets are keyed
// by percentile name.
func (b *bench) latenessRows(scenario string, runs map[string]*Lateness, targets map[string]string) {
	stat := func(f func(*Lateness) float64) map[string]*float64 {
		m := map[string]*float64{}
		for name, l := range runs {
			if l != nil {
				m[name] = ptr(f(l))
			}
		}
		return m
	}
	earliest := stat(func(l *Lateness) float64 { return l.Min })
	b.rep.Rows = append(b.rep.Rows, Row{Section: "4", Figure: scenario + " min (negative: early)", Unit: "ms",
		Ours: earliest[sysRedisdelay], Peers: asynqPeers(earliest), NoRatio: true})
	for _, p := range []struct {
		name string
		f    func(*Lateness) float64
	}{
		{"p50", func(l *Lateness) float64 { return l.P50 }},
		{"p99", func(l *Lateness) float64 { return l.P99 }},
		{"p99.9", func(l *Lateness) float64 { return l.P999 }},
		{"max", func(l *Lateness) float64 { return l.Max }},
	} {
		v := stat(p.f)
		b.rep.row("4", scenario+" "+p.name, "ms", targets[p.name], v[sysRedisdelay], asynqPeers(v)...)
	}
	early := stat(func(l *Lateness) float64 { return float64(l.Early) })
	b.rep.row("4", scenario+": delivered early", "messages", "0 (never early)", early[sysRedisdelay], asynqPeers(early)...)
}

func asynqPeers(m map[string]*float64) []Peer {
	return []Peer{peer(sysAsynqFast, m[sysAsynqFast]), peer(sysAsynq, m[sysAsynq])}
}

// steady publishes rate messages per second for the configured duration,
// each due deliveryDelay after its publish.
func (b *bench) steady(sys deliverySystem, rate int) *Lateness {
	n := int(float64(rate) * b.opts.Steady.Seconds())
	scenario := fmt.Sprintf("steady %s/s", count(rate))
	var lat *Lateness
	b.measure(fmt.Sprintf("%s · %s", scenario, sys.name), n, func() (time.Duration, error) {
		var (
			d   time.Duration
			err error
		)
		lat, d, err = b.deliver(sys, n, func(q delayQueue, t *tracker) error {
			return paced(n, rate, func(i int) error {
				return t.schedule(q, i, time.Now().Add(deliveryDelay))
			})
		})
		return d, err
	})
	if lat != nil {
		b.rep.Lateness = append(b.rep.Lateness, LatenessRun{scenario, sys.name, lat})
	}
	return lat
}

// burst publishes messages all due at one instant, far enough ahead that
// publishing ends before it (the lead is calibrated by timing a sample of
// publishes), and measures how late they arrive.
func (b *bench) burst(sys deliverySystem) *Lateness {
	n := b.opts.Burst
	scenario := fmt.Sprintf("burst %s", count(n))
	var lat *Lateness
	b.measure(fmt.Sprintf("%s · %s", scenario, sys.name), n, func() (time.Duration, error) {
		var (
			d   time.Duration
			err error
		)
		lat, d, err = b.deliver(sys, n, func(q delayQueue, t *tracker) error {
			sample := min(2000, n)
			took, err := runPublishers(sample, 1, func(int, int) error {
				return q.schedule(time.Now().Add(farFuture), ignoredPayload)
			})
			if err != nil {
				return err
			}
			due := time.Now().Add(time.Second + time.Duration(1.5*float64(took)*float64(n)/float64(sample)))
			if _, err := runPublishers(n, 1, func(i, _ int) error { return t.schedule(q, i, due) }); err != nil {
				return err
			}
			if late := time.Since(due); late > 0 {
				return fmt.Errorf("publishing the burst ended %s after its due time: the calibrated lead was too short", late)
			}
			return nil
		})
		return d, err
	})
	if lat != nil {
		b.rep.Lateness = append(b.rep.Lateness, LatenessRun{scenario, sys.name, lat})
	}
	return lat
}

// deliver opens the system, runs publish, waits until every message is
// delivered and returns the lateness and the time from the start of
// publishing to the last delivery.
func (b *bench) deliver(sys deliverySystem, n int, publish func(delayQueue, *tracker) error) (*Lateness, time.Duration, error) {
	if err := b.flush(); err != nil {
		return nil, 0, err
	}
	t := newTracker(n)
	q, err := sys.open(b, t.deliver)
	if err != nil {
		return nil, 0, err
	}
	defer q.close()
	start := time.Now()
	if err := publish(q, t); err != nil {
		return nil, 0, err
	}
	published := time.Since(start)
	if err := waitFor(t.done, t.delivered.Load, n); err != nil {
		return nil, 0, err
	}
	lat, last := t.lateness()
	lat.PublishRate = float64(n) / published.Seconds()
	return lat, last.Sub(start), nil
}

// paced calls publish for 0..n-1 from 64 goroutines at rate calls per
// second.
func paced(n, rate int, publish func(i int) error) error {
	work := make(chan int)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		err     error
	)
	for range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if e := publish(i); e != nil {
					errOnce.Do(func() { err = e })
				}
			}
		}()
	}
	start := time.Now()
	for i := 0; i < n; {
		for due := min(n, int(time.Since(start).Seconds()*float64(rate))+1); i < due; i++ {
			work <- i
		}
		time.Sleep(time.Millisecond)
	}
	close(work)
	wg.Wait()
	return err
}

// ignoredPayload marks messages the tracker does not count.
var ignoredPayload = func() []byte {
	p := make([]byte, 16)
	binary.BigEndian.PutUint64(p, math.MaxUint64)
	return p
}()

// tracker records when each of n messages was due and delivered. A payload
// is 16 bytes: the message's index, big endian, then zeros.
type tracker struct {
	due        []int64 // unix ns, written before the message is scheduled
	at         []int64 // unix ns of the first delivery, 0 before
	delivered  atomic.Int64
	duplicates atomic.Int64
	done       chan struct{}
}

func newTracker(n int) *tracker {
	return &tracker{due: make([]int64, n), at: make([]int64, n), done: make(chan struct{})}
}

// schedule records message i's due time and schedules it.
func (t *tracker) schedule(q delayQueue, i int, due time.Time) error {
	t.due[i] = due.UnixNano()
	p := make([]byte, 16)
	binary.BigEndian.PutUint64(p, uint64(i))
	return q.schedule(due, p)
}

func (t *tracker) deliver(payload []byte) {
	now := time.Now().UnixNano()
	if len(payload) < 8 {
		return
	}
	i := binary.BigEndian.Uint64(payload)
	if i >= uint64(len(t.at)) {
		return
	}
	if !atomic.CompareAndSwapInt64(&t.at[i], 0, now) {
		t.duplicates.Add(1)
		return
	}
	if t.delivered.Add(1) == int64(len(t.at)) {
		close(t.done)
	}
}

// lateness summarises a finished run and returns its last delivery time.
// The due time recorded is taken before the publish call, so a system's
// own due time is at or after it: lateness is measured conservatively
// (by up to one publish round trip), and a message counted early was early.
func (t *tracker) lateness() (*Lateness, time.Time) {
	lat := make([]float64, 0, len(t.at))
	var last int64
	early := 0
	for i := range t.at {
		at := atomic.LoadInt64(&t.at[i])
		if at == 0 {
			continue
		}
		d := float64(at-t.due[i]) / 1e6
		if d < 0 {
			early++
		}
		lat = append(lat, d)
		last = max(last, at)
	}
	sort.Float64s(lat)
	l := &Lateness{
		Messages:   len(t.at),
		Delivered:  len(lat),
		Duplicates: int(t.duplicates.Load()),
		Early:      early,
	}
	if len(lat) > 0 {
		l.Min, l.Max = lat[0], lat[len(lat)-1]
		l.P50, l.P99, l.P999 = percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 0.999)
	}
	return l, time.Unix(0, last)
}

// percentile returns the q-quantile of sorted values (nearest rank).
func percentile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
