package browsertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/dashboard"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// bigTopic holds 100,000 waiting messages, the load test.
const (
	bigTopic = "reminders.send"
	bigCount = 100_000
	topic    = "orders.close-unpaid"
	group    = "billing"
)

// screenshotsEnv set to 1 rewrites docs/img/dashboard-*.png; without it
// (CI) the tracked files are left alone.
const screenshotsEnv = "REDISDELAY_SCREENSHOTS"

// chromium finds the browser: $REDISDELAY_CHROMIUM, or chromium on the
// PATH. Missing, the test skips, except in CI (CI=true), where it fails.
func chromium(t *testing.T) string {
	if p := os.Getenv("REDISDELAY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "needs Chromium: apt-get install -y chromium (Debian), or set REDISDELAY_CHROMIUM to the browser's path"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: the browser test must run in CI)")
	}
	t.Skip(msg)
	return ""
}

type fixture struct {
	client  *redis.Client
	insp    *redisdelay.Inspector
	pub     *redisdelay.Publisher
	orders  []*message.Message // waiting in topic, due in 1..8 h
	evil    *message.Message   // waiting in topic, with markup in payload and metadata
	binary  *message.Message   // waiting in topic, not text
	big     []string           // UUIDs of bigTopic, in publishing order
	deadIDs int
}

// backend starts a Redis of the test's own and returns an Inspector and a
// Publisher on it.
func backend(t *testing.T) (*redisdelay.Inspector, *redisdelay.Publisher) {
	t.Helper()
	srv := redistest.ForTest(t, redistest.Options{KillWithParent: true})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	return inspectorAndPublisher(t, client)
}

func inspectorAndPublisher(t *testing.T, client *redis.Client) (*redisdelay.Inspector, *redisdelay.Publisher) {
	t.Helper()
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return insp, pub
}

// dashboards serves the dashboard read-write and read-only, without
// history sampling.
func dashboards(t *testing.T, insp *redisdelay.Inspector) (rw, ro *httptest.Server) {
	t.Helper()
	rw = httptest.NewServer(dashboard.New(insp, dashboard.Options{SampleEvery: -1}))
	t.Cleanup(rw.Close)
	ro = httptest.NewServer(dashboard.New(insp, dashboard.Options{ReadOnly: true, SampleEvery: -1}))
	t.Cleanup(ro.Close)
	return rw, ro
}

func seed(t *testing.T, client *redis.Client) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{client: client}
	f.insp, f.pub = inspectorAndPublisher(t, client)

	// Dead letters: immediate messages nacked by a group allowed one attempt.
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: group, MaxAttempts: 1}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	subCtx, cancel := context.WithCancel(ctx)
	ch, err := sub.Subscribe(subCtx, topic)
	if err != nil {
		t.Fatal(err)
	}
	reasons := []string{"card declined", "customer not found: id 8812", "timeout calling payments API after 10s", "card declined", "invalid currency \"XYZ\"", "card declined"}
	for i, r := range reasons {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"order":%d,"amount":"%d.90","currency":"EUR"}`, 5100+i, 20+i*7)))
		msg.Metadata.Set("order_id", strconv.Itoa(5100+i))
		msg.Metadata.Set("reason", r)
		f.publish(t, topic, msg)
	}
	for range reasons {
		select {
		case m := <-ch:
			m.Metadata.Set(redisdelay.ErrorKey, m.Metadata.Get("reason"))
			m.Nack()
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery within 10 s")
		}
	}
	f.deadIDs = len(reasons)
	deadline := time.Now().Add(10 * time.Second)
	for f.dead(t) != int64(len(reasons)) {
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters after 10 s, want %d", f.dead(t), len(reasons))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	_ = sub.Close()

	for i := 1; i <= 8; i++ {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"order":%d,"action":"close if unpaid"}`, 1000+i)))
		msg.Metadata.Set(redisdelay.BusinessKey, "order-"+strconv.Itoa(1000+i))
		msg.Metadata.Set("tenant", "acme")
		delay.Message(msg, delay.For(time.Duration(i)*time.Hour+time.Duration(i)*7*time.Minute))
		f.orders = append(f.orders, msg)
	}
	f.evil = message.NewMessage(watermill.NewUUID(), []byte(`<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">`))
	f.evil.Metadata.Set("note", `"><script>window.__pwned = 3</script>`)
	delay.Message(f.evil, delay.For(9*time.Hour))
	f.binary = message.NewMessage(watermill.NewUUID(), []byte("\x00\x01\x02\xfe\xffPNG\r\n\x1a\n binary"))
	delay.Message(f.binary, delay.For(10*time.Hour))
	f.publish(t, topic, append(slices.Clone(f.orders), f.evil, f.binary)...)

	// The load test: 100,000 waiting messages due over the next 40 days,
	// more of them soon, each with a business key.
	start := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	batch := make([]*message.Message, 0, 1000)
	for i := range bigCount {
		x := rng.Float64()
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"user":%d,"template":"renewal-reminder"}`, i)))
		msg.Metadata.Set(redisdelay.BusinessKey, "reminder-"+strconv.Itoa(i))
		delay.Message(msg, delay.For(30*time.Second+time.Duration(x*x*x*float64(40*24*time.Hour))))
		f.big = append(f.big, msg.UUID)
		batch = append(batch, msg)
		if len(batch) == cap(batch) {
			f.publish(t, bigTopic, batch...)
			batch = batch[:0]
		}
	}
	t.Logf("seeded %d waiting messages in %s", bigCount, time.Since(start).Round(time.Millisecond))
	return f
}

func (f *fixture) publish(t *testing.T, topic string, msgs ...*message.Message) {
	t.Helper()
	if err := f.pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) dead(t *testing.T) int64 {
	t.Helper()
	st, err := f.insp.Stats(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range st.Groups {
		if g.Group == group {
			return g.Dead
		}
	}
	return 0
}

func (f *fixture) waiting(t *testing.T, uuid string) bool {
	t.Helper()
	_, ok, err := f.insp.FindWaiting(context.Background(), topic, uuid)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// browser is one Chromium tab.
type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T, path string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI containers run as root
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 1000),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return &browser{t: t, ctx: ctx}
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func eval[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// open loads a page and waits for an element of it; it returns how long
// that took.
func (b *browser) open(u, sel string) time.Duration {
	b.t.Helper()
	start := time.Now()
	b.do(chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS(sel)))
	return time.Since(start)
}

// screenshot writes docs/img/dashboard-<name>.png when $REDISDELAY_SCREENSHOTS is 1.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	if os.Getenv(screenshotsEnv) != "1" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatal(err)
	}
	if len(png) > 300<<10 {
		b.t.Errorf("screenshot %s is %d KB: keep it under 300 KB", name, len(png)>>10)
	}
	path := filepath.Join("..", "..", "docs", "img", "dashboard-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s (%d KB)", path, len(png)>>10)
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func TestChromium_Dashboard(t *testing.T) {
	path := chromium(t)
	srv := redistest.ForTest(t, redistest.Options{KillWithParent: true})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	f := seed(t, client)

	// Samples for the charts every 250 ms rather than 5 s, so that lines show
	// within seconds.
	rw := httptest.NewServer(dashboard.New(f.insp, dashboard.Options{SampleEvery: 250 * time.Millisecond}))
	t.Cleanup(rw.Close)
	ro := httptest.NewServer(dashboard.New(f.insp, dashboard.Options{ReadOnly: true}))
	t.Cleanup(ro.Close)
	b := newBrowser(t, path)
	topicURL := func(base, tp string) string { return base + "/topic?t=" + url.QueryEscape(tp) }
	msgURL := func(base, tp, by, q string) string {
		return base + "/message?" + url.Values{"t": {tp}, "by": {by}, "q": {q}}.Encode()
	}

	t.Run("topics page refreshes live", func(t *testing.T) {
		b.t = t
		b.open(rw.URL+"/", "#topics")
		page := b.text("#topics")
		for _, want := range []string{topic, bigTopic, group, strconv.Itoa(bigCount)} {
			if !strings.Contains(page, want) {
				t.Errorf("topics page lacks %q:\n%s", want, page)
			}
		}
		b.screenshot("topics")
		cell := `document.querySelector('#topics a[href*="t=orders"]').closest("tr").cells[2].textContent`
		before := eval[string](b, cell)
		more := message.NewMessage(watermill.NewUUID(), []byte(`{"order":1999}`))
		delay.Message(more, delay.For(20*time.Hour))
		f.publish(t, topic, more)
		deadline := time.Now().Add(10 * time.Second)
		for eval[string](b, cell) == before {
			if time.Now().After(deadline) {
				t.Fatalf("waiting count still %s 10 s after a publish: the page does not refresh", before)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("waiting count went from %s to %s without a reload", before, eval[string](b, cell))
	})

	t.Run("throughput and lateness charts", func(t *testing.T) {
		b.t = t
		b.open(topicURL(rw.URL, bigTopic), "#chart-throughput svg")
		// Immediate messages while the page is open: made ready at ~40/s.
		for i := range 12 {
			batch := make([]*message.Message, 10)
			for k := range batch {
				batch[k] = message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"now":%d}`, i*10+k)))
			}
			f.publish(t, bigTopic, batch...)
			time.Sleep(250 * time.Millisecond)
		}
		points := func(sel string) int {
			return eval[int](b, `document.querySelector(`+strconv.Quote(sel)+`).getAttribute("points").split(" ").filter(p => p).length`)
		}
		top := func() float64 {
			return eval[float64](b, `Number(document.querySelector("#chart-throughput .ymax").textContent)`)
		}
		// Await the traffic on the chart, not a number of points: the chart
		// shows (open returns) at the page's first refresh, 3 s after its
		// request, with a dozen samples taken before the first publish, all
		// at 0/s.
		deadline := time.Now().Add(15 * time.Second)
		for points("#chart-throughput polyline.l-ready") < 5 || points("#chart-lateness polyline.l-overdue") < 5 || top() < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("charts not drawn 15 s after the traffic: %d throughput points, y axis to %v/s after ~40 messages/s, %d lateness points",
					points("#chart-throughput polyline.l-ready"), top(), points("#chart-lateness polyline.l-overdue"))
			}
			time.Sleep(200 * time.Millisecond)
		}
		thr := eval[string](b, `document.getElementById("chart-throughput").textContent`)
		for _, want := range []string{"Throughput", "messages/s", "made ready", "now", "time (Redis clock)"} {
			if !strings.Contains(thr, want) {
				t.Errorf("throughput chart lacks %q:\n%s", want, thr)
			}
		}
		if late := eval[string](b, `document.getElementById("chart-lateness").textContent`); !strings.Contains(late, "seconds overdue") {
			t.Errorf("lateness chart lacks its unit:\n%s", late)
		}
		// SVG text has no innerText: read textContent.
		if empty := eval[string](b, `document.querySelector("#chart-throughput .empty").textContent`); empty != "" {
			t.Errorf("throughput chart still says %q", empty)
		}
		t.Logf("throughput: %d points, y axis to %v/s, latest %s; lateness: %d points, latest %s",
			points("#chart-throughput polyline.l-ready"), top(), b.text("#chart-throughput .last"),
			points("#chart-lateness polyline.l-overdue"), b.text("#chart-lateness .last"))
	})

	t.Run("100k waiting: load and search", func(t *testing.T) {
		b.t = t
		var loads, searches, keySearches []time.Duration
		for i := range 5 {
			loads = append(loads, b.open(topicURL(rw.URL, bigTopic), "#waiting-list"))
			if i == 0 {
				hist := b.text("#histogram")
				if !strings.Contains(hist, "1–7 days") {
					t.Errorf("histogram lacks its buckets:\n%s", hist)
				}
				if n := eval[int](b, `document.querySelectorAll("#waiting-list tbody tr").length`); n != 50 {
					t.Errorf("first page has %d rows, want 50 (paged server-side)", n)
				}
				b.screenshot("waiting")
			}
			// Search by UUID through the form, for a message deep in the set.
			want := f.big[bigCount/3+i*997]
			start := time.Now()
			b.do(chromedp.SetValue(chromedp.CSS("#search-q"), want), chromedp.Submit(chromedp.CSS("#search-q")), chromedp.WaitVisible(chromedp.CSS("#uuid")))
			searches = append(searches, time.Since(start))
			if got := b.text("#uuid"); got != want {
				t.Fatalf("search by UUID found %q, want %q", got, want)
			}
			// And by business key.
			b.open(topicURL(rw.URL, bigTopic), "#search-q")
			key := "reminder-" + strconv.Itoa(bigCount-1-i*1231)
			start = time.Now()
			b.do(chromedp.SetValue(chromedp.CSS("#search-by"), "key"), chromedp.SetValue(chromedp.CSS("#search-q"), key),
				chromedp.Submit(chromedp.CSS("#search-q")), chromedp.WaitVisible(chromedp.CSS("#uuid")))
			keySearches = append(keySearches, time.Since(start))
			if page := b.text("#summary"); !strings.Contains(page, key) {
				t.Fatalf("search by key %s shows:\n%s", key, page)
			}
		}
		heap := eval[float64](b, `performance.memory ? performance.memory.usedJSHeapSize : -1`)
		t.Logf("FIGURE topic page of %d waiting messages: load (navigate to visible list) median %s of %v", bigCount, median(loads), loads)
		t.Logf("FIGURE search by UUID among %d: median %s of %v", bigCount, median(searches), searches)
		t.Logf("FIGURE search by business key among %d: median %s of %v", bigCount, median(keySearches), keySearches)
		t.Logf("FIGURE JS heap of the page after the searches: %.1f MB", heap/1e6)

		// The same requests without the browser: the server's share.
		var server []time.Duration
		for range 5 {
			start := time.Now()
			resp, err := http.Get(topicURL(rw.URL, bigTopic))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			server = append(server, time.Since(start))
		}
		t.Logf("FIGURE server time of the topic page (stats, histogram, first 50): median %s of %v", median(server), server)
	})

	t.Run("message view escapes markup and shows binary as hex", func(t *testing.T) {
		b.t = t
		b.open(msgURL(rw.URL, topic, "uuid", f.evil.UUID), "#payload")
		if got := b.text("#payload"); !strings.Contains(got, "<script>window.__pwned = 1</script>") {
			t.Errorf("payload not shown as text: %q", got)
		}
		if pwned := eval[string](b, `String(window.__pwned)`); pwned != "undefined" {
			t.Fatalf("payload markup executed: window.__pwned = %s", pwned)
		}
		if n := eval[int](b, `document.querySelectorAll("img").length + document.querySelectorAll("script").length`); n != 1 {
			t.Errorf("the page has %d img/script elements, want only the dashboard's script", n)
		}
		b.open(msgURL(rw.URL, topic, "uuid", f.binary.UUID), "#payload")
		if got := b.text("#payload"); !strings.Contains(got, "00 01 02 fe ff 50 4e 47") {
			t.Errorf("binary payload not a hex dump: %q", got)
		}
		b.open(msgURL(rw.URL, topic, "key", "order-1003"), "#payload")
		b.screenshot("message")
	})

	t.Run("cancel with confirmation", func(t *testing.T) {
		b.t = t
		target := f.orders[0]
		b.open(msgURL(rw.URL, topic, "uuid", target.UUID), "#cancel")
		b.do(chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if !f.waiting(t, target.UUID) {
			t.Fatal("cancelled before the confirmation")
		}
		b.do(chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if got := b.text("#result"); !strings.Contains(got, "cancelled") {
			t.Errorf("result: %q", got)
		}
		if f.waiting(t, target.UUID) {
			t.Fatal("still waiting after the confirmed cancel")
		}
		// Going back from the confirmation changes nothing.
		other := f.orders[1]
		b.open(msgURL(rw.URL, topic, "uuid", other.UUID), "#cancel")
		b.do(chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitVisible(chromedp.CSS("#abort")),
			chromedp.Click(chromedp.CSS("#abort")), chromedp.WaitVisible(chromedp.CSS("#uuid")))
		if !f.waiting(t, other.UUID) {
			t.Fatal("cancelled although the operator said no")
		}
	})

	t.Run("reschedule with confirmation, see the new due time", func(t *testing.T) {
		b.t = t
		target := f.orders[3]
		due := func() time.Time {
			m, ok, err := f.insp.FindWaiting(context.Background(), topic, target.UUID)
			if err != nil || !ok {
				t.Fatalf("message %s not waiting (%v)", target.UUID, err)
			}
			return m.Due
		}
		before := due()
		b.open(msgURL(rw.URL, topic, "uuid", target.UUID), "#reschedule")
		b.do(chromedp.SetValue(chromedp.CSS("#reschedule-in"), "15m"), chromedp.Click(chromedp.CSS("#reschedule")),
			chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if got := b.text("#prompt"); !strings.Contains(got, "in 15m0s from when you confirm") {
			t.Errorf("prompt: %q", got)
		}
		if !due().Equal(before) {
			t.Fatal("moved before the confirmation")
		}
		start := time.Now()
		b.do(chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		after := due()
		if after.Before(start.Add(15*time.Minute)) || after.After(time.Now().Add(15*time.Minute+time.Second)) {
			t.Errorf("due at %s, want 15 min after the confirmation at %s", after, start)
		}
		shown := after.UTC().Format("2006-01-02 15:04:05.000 UTC")
		if got := b.text("#result"); !strings.Contains(got, "Moved") || !strings.Contains(got, shown) {
			t.Errorf("result %q lacks the new due time %s", got, shown)
		}
		// Back on the message page, which shows it too.
		b.do(chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS("#due")))
		if got := b.text("#due"); !strings.Contains(got, shown) {
			t.Errorf("message page shows due %q, want %s", got, shown)
		}
		// At a UTC time.
		at := time.Now().Add(30 * time.Hour).UTC().Truncate(time.Second)
		b.do(chromedp.SetValue(chromedp.CSS("#reschedule-at"), at.Format("2006-01-02 15:04:05")), chromedp.Click(chromedp.CSS("#reschedule")),
			chromedp.WaitVisible(chromedp.CSS("#confirm")), chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")),
			chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS("#due")))
		if got := b.text("#due"); !strings.Contains(got, at.Format("2006-01-02 15:04:05")) {
			t.Errorf("message page shows due %q, want %s", got, at)
		}
		// A typo answers 400 with what to type.
		b.do(chromedp.SetValue(chromedp.CSS("#reschedule-in"), "soon"), chromedp.Click(chromedp.CSS("#reschedule")),
			chromedp.WaitVisible(chromedp.CSS("#error")))
		if got := b.text("#error"); !strings.Contains(got, "is not a duration") {
			t.Errorf("error: %q", got)
		}
	})

	t.Run("pause a group, see the badge, resume", func(t *testing.T) {
		b.t = t
		paused := func() bool {
			ok, err := f.insp.Paused(context.Background(), topic, group)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		pauseBtn := `#groups button.pause[data-group="` + group + `"]`
		b.open(topicURL(rw.URL, topic), pauseBtn)
		b.do(chromedp.Click(chromedp.CSS(pauseBtn)), chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if paused() {
			t.Fatal("paused before the confirmation")
		}
		b.do(chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if !paused() {
			t.Fatal("not paused after the confirmation")
		}
		b.do(chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS("#groups .tag.paused")))
		b.open(rw.URL+"/", "#topics .tag.paused")
		// Resumed from elsewhere (the CLI): the live refresh drops the badge.
		if _, err := f.insp.Resume(context.Background(), topic, group); err != nil {
			t.Fatal(err)
		}
		badges := `document.querySelectorAll("#topics .tag.paused").length`
		deadline := time.Now().Add(10 * time.Second)
		for eval[int](b, badges) != 0 {
			if time.Now().After(deadline) {
				t.Fatal("paused badge still on the topics page 10 s after a resume: the refresh does not redraw it")
			}
			time.Sleep(200 * time.Millisecond)
		}
		// Paused from elsewhere: the topic page's refresh shows the badge and a Resume button.
		b.open(topicURL(rw.URL, topic), pauseBtn)
		if err := f.insp.Pause(context.Background(), topic, group); err != nil {
			t.Fatal(err)
		}
		resumeBtn := `#groups button.resume[data-group="` + group + `"]`
		deadline = time.Now().Add(10 * time.Second)
		for eval[int](b, `document.querySelectorAll(`+strconv.Quote(resumeBtn+", #groups .tag.paused")+`).length`) != 2 {
			if time.Now().After(deadline) {
				t.Fatal("no paused badge and Resume button 10 s after a pause: the refresh does not redraw them")
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The row the script drew has the server's columns, Grouped and Active groups included.
		if got := eval[string](b, `Array.from(document.querySelector("#groups tbody tr").cells, c => c.className).join(" | ")`); got != " | n | n | n | n | n | n grouped | n active-groups | n rate delivered-rate | n rate dead-rate | " {
			t.Errorf("cells of the refreshed group row: %q", got)
		}
		// The Resume button the script drew works: no confirmation.
		b.do(chromedp.Click(chromedp.CSS(resumeBtn)), chromedp.WaitVisible(chromedp.CSS("#result")))
		if got := b.text("#result"); !strings.Contains(got, "Resumed") {
			t.Errorf("result: %q", got)
		}
		if paused() {
			t.Fatal("still paused after Resume")
		}
		b.do(chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS(pauseBtn)))
		if n := eval[int](b, `document.querySelectorAll("#groups .tag.paused").length`); n != 0 {
			t.Errorf("%d paused badges after resuming", n)
		}
	})

	t.Run("dead letters: requeue and delete with confirmation", func(t *testing.T) {
		b.t = t
		deadURL := rw.URL + "/dead?" + url.Values{"t": {topic}, "g": {group}}.Encode()
		b.open(deadURL, "#dead-list")
		if got := b.text("#dead-list"); !strings.Contains(got, "customer not found") || !strings.Contains(got, "card declined") {
			t.Errorf("dead letters lack their reasons:\n%s", got)
		}
		b.do(chromedp.Click(chromedp.CSS("#dead-list details summary")))
		b.screenshot("dead")
		eval[bool](b, `(() => { const p = document.querySelectorAll("input.pick"); p[0].click(); p[1].click(); return true })()`)
		b.do(chromedp.Click(chromedp.CSS("#requeue-selected")), chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if got := b.text("#prompt"); !strings.Contains(got, "Requeue 2 dead letter(s)") {
			t.Errorf("prompt: %q", got)
		}
		if n := f.dead(t); n != int64(f.deadIDs) {
			t.Fatalf("%d dead letters before the confirmation, want %d", n, f.deadIDs)
		}
		b.do(chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if got := b.text("#result"); !strings.Contains(got, "Requeued 2") {
			t.Errorf("result: %q", got)
		}
		if n := f.dead(t); n != int64(f.deadIDs-2) {
			t.Fatalf("%d dead letters after requeueing 2 of %d", n, f.deadIDs)
		}
		// Bulk: select all on the page, delete.
		b.do(chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS("#select-all")),
			chromedp.Click(chromedp.CSS("#select-all")), chromedp.Click(chromedp.CSS("#delete-selected")),
			chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if got := b.text("#prompt"); !strings.Contains(got, fmt.Sprintf("Delete for good %d dead letter(s)", f.deadIDs-2)) {
			t.Errorf("prompt: %q", got)
		}
		b.do(chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if n := f.dead(t); n != 0 {
			t.Fatalf("%d dead letters after deleting all", n)
		}
	})

	t.Run("read-only mode hides and refuses actions", func(t *testing.T) {
		b.t = t
		target := f.orders[2]
		b.open(msgURL(ro.URL, topic, "uuid", target.UUID), "#read-only")
		if n := eval[int](b, `document.querySelectorAll("#cancel, form[method=post]").length`); n != 0 {
			t.Errorf("read-only message page has %d action forms", n)
		}
		status := eval[int](b, `fetch("/cancel", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "t=`+url.QueryEscape(topic)+`&uuid=`+target.UUID+`&confirm=yes"}).then(r => r.status)`)
		if status != http.StatusForbidden {
			t.Errorf("POST /cancel in read-only mode: status %d, want 403", status)
		}
		if !f.waiting(t, target.UUID) {
			t.Fatal("read-only mode cancelled a message")
		}
		status = eval[int](b, `fetch("/reschedule", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "t=`+url.QueryEscape(topic)+`&uuid=`+target.UUID+`&in=1m&confirm=yes"}).then(r => r.status)`)
		if status != http.StatusForbidden {
			t.Errorf("POST /reschedule in read-only mode: status %d, want 403", status)
		}
		b.open(topicURL(ro.URL, topic), "#groups")
		if n := eval[int](b, `document.querySelectorAll("#groups button, #groups form").length`); n != 0 {
			t.Errorf("read-only topic page has %d pause/resume controls", n)
		}
		status = eval[int](b, `fetch("/group", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "t=`+url.QueryEscape(topic)+`&g=`+group+`&action=pause&confirm=yes"}).then(r => r.status)`)
		if status != http.StatusForbidden {
			t.Errorf("POST /group in read-only mode: status %d, want 403", status)
		}
		if ok, err := f.insp.Paused(context.Background(), topic, group); err != nil || ok {
			t.Errorf("read-only mode paused the group (%v)", err)
		}
		b.open(ro.URL+"/dead?"+url.Values{"t": {topic}, "g": {group}}.Encode(), "#dead-list")
		if n := eval[int](b, `document.querySelectorAll("input.pick, #requeue-all, #purge").length`); n != 0 {
			t.Errorf("read-only dead letters page has %d action controls", n)
		}
	})

	// Last: the Manager it starts moves due messages.
	t.Run("no-scheduler banner, gone without a reload once a Manager runs", func(t *testing.T) {
		b.t = t
		b.open(rw.URL+"/", "#topics")
		if tag := b.text(`#topics a[href*="t=orders"] + .tag.unscheduled`); tag != "no scheduler" {
			t.Errorf("topics page tags orders %q, want \"no scheduler\"", tag)
		}
		b.open(topicURL(rw.URL, topic), "#sched-alert")
		if got := b.text("#sched-alert"); !strings.Contains(got, "No scheduler holds this topic's lease") {
			t.Errorf("banner reads %q", got)
		}
		b.screenshot("no-scheduler")
		mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: client, Topics: []string{topic}, CheckInterval: 100 * time.Millisecond}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = mgr.Run(context.Background()) }()
		defer mgr.Close()
		deadline := time.Now().Add(10 * time.Second)
		for !eval[bool](b, `document.getElementById("sched-alert").hidden`) {
			if time.Now().After(deadline) {
				t.Fatalf("banner still shown 10 s after a Manager started: %q", b.text("#sched-alert"))
			}
			time.Sleep(200 * time.Millisecond)
		}
		if visible := eval[bool](b, `document.getElementById("sched-alert").offsetParent !== null`); visible {
			t.Error("hidden banner still takes room on the page")
		}
	})
}
