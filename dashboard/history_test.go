package dashboard

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// TestCharts_RingBounded: a topic's ring never holds more than historyLen samples
// (28.8 KB), whatever the number added, and gives them oldest first.
func TestCharts_RingBounded(t *testing.T) {
	r := newRing(historyLen)
	for k := range 3*historyLen + 7 {
		r.add(sample{at: int64(k)})
	}
	all := r.all()
	if len(all) != historyLen || len(r.buf) != historyLen || cap(r.buf) != historyLen {
		t.Fatalf("ring holds %d samples in a buffer of %d (cap %d), want %d", len(all), len(r.buf), cap(r.buf), historyLen)
	}
	for k, s := range all {
		if want := int64(2*historyLen + 7 + k); s.at != want {
			t.Fatalf("sample %d is at %d, want %d (oldest first)", k, s.at, want)
		}
	}
	if size := int(unsafe.Sizeof(sample{})) * historyLen; size != 28800 {
		t.Errorf("a full ring is %d bytes, documented as 28,800", size)
	}
	t.Logf("FIGURE memory of one topic's ring: %d samples × %d B = %d B", historyLen, unsafe.Sizeof(sample{}), int(unsafe.Sizeof(sample{}))*historyLen)
	r = newRing(4)
	r.add(sample{at: 1})
	if got := r.all(); len(got) != 1 || got[0].at != 1 {
		t.Errorf("ring of one sample: %v", got)
	}
}

// TestCharts_RateFromTwoSamples: a rate is the counter's growth over the time
// between two readings; a shrunk (restarted) or unknown counter gives no
// point rather than a negative or made-up rate.
func TestCharts_RateFromTwoSamples(t *testing.T) {
	ready := func(s sample) int64 { return s.ready }
	got := rate([]sample{{at: 10_000, ready: 100}, {at: 15_000, ready: 150}}, ready)
	if len(got) != 1 || got[0].v != 10 || got[0].at != 15_000 {
		t.Fatalf("100 → 150 in 5 s: %v, want 10/s at the later sample", got)
	}
	if got := rate([]sample{{at: 10_000, ready: 100}}, ready); len(got) != 0 {
		t.Errorf("one sample gives a rate: %v", got)
	}
	if got := rate([]sample{{at: 0, ready: 500}, {at: 5000, ready: 3}, {at: 10_000, ready: 13}}, ready); len(got) != 1 || got[0].v != 2 {
		t.Errorf("after a restart: %v, want only the 2/s of the pair after it", got)
	}
	delivered := func(s sample) int64 { return s.delivered }
	if got := rate([]sample{{at: 0, delivered: -1}, {at: 5000, delivered: 9}}, delivered); len(got) != 0 {
		t.Errorf("from an unknown counter: %v", got)
	}
	if got := rate([]sample{{at: 5000, ready: 1}, {at: 5000, ready: 9}}, ready); len(got) != 0 {
		t.Errorf("two samples at the same instant: %v", got)
	}
}

// TestCharts_Geometry: the y axis tops at a round value above the highest
// point, the latest value is labelled with its unit, and x spans the
// samples.
func TestCharts_Geometry(t *testing.T) {
	c := chart{}
	draw(&c, 0, 10_000, "/s", []string{"a"}, []string{"l-a"}, []point{{0, 0}, {5000, 37}, {10_000, 12.5}})
	if c.YMax != "50" || c.Since != "−10s" {
		t.Errorf("y max %q, since %q; want 50, −10s", c.YMax, c.Since)
	}
	if l := c.Lines[0]; l.Points != "56.0,138.0 343.0,44.8 630.0,106.5" || l.Last != "12.5/s" {
		t.Errorf("line %+v", l)
	}
	for v, want := range map[float64]float64{0: 1, 0.4: 1, 1.5: 2, 3: 5, 7: 10, 10: 10, 11: 20, 420: 500, 999: 1000} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}

// TestCharts_SampleCommands counts the Redis commands of one sample of a topic of
// one partition and one consumer group, and of two partitions.
func TestCharts_SampleCommands(t *testing.T) {
	s := redistest.ForTest(t, redistest.Options{KillWithParent: true})
	client := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = client.Close() })
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	total := func() int64 {
		info := client.Info(context.Background(), "stats").Val()
		m := regexp.MustCompile(`total_commands_processed:(\d+)`).FindStringSubmatch(info)
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	for _, parts := range []int{1, 2} {
		tp := "t" + strconv.Itoa(parts)
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "g", Partitions: parts}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := sub.Subscribe(ctx, tp); err != nil {
			t.Fatal(err)
		}
		cancel()
		_ = sub.Close()
		h := newHistory(insp, time.Second, 5*time.Second)
		h.topics[tp] = &series{ring: newRing(historyLen)}
		before := total()
		h.sample(tp)
		n := total() - before - 1 // the second INFO counts the first
		if h.samples != 1 {
			t.Fatalf("no sample of %s", tp)
		}
		// 6 per partition: the far tier's head is read in both formats (issue 37)
		if want := int64(3 + 6*parts + parts); n != want {
			t.Errorf("%d partition(s), 1 group: %d commands per sample, want 3 + 6×partitions + partitions×groups = %d", parts, n, want)
		}
		t.Logf("FIGURE one sample of a topic of %d partition(s) and 1 group: %d Redis commands", parts, n)
	}
}
