package browsertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/dashboard"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// header makes the tab send a header with every request, as a browser
// does with the basic credentials it asked the operator for once.
func (b *browser) header(name, value string) {
	b.t.Helper()
	b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{name: value}})
		return err
	}))
}

// status is the HTTP status of a page's load, read by the page's script.
func (b *browser) status(u string) int {
	b.t.Helper()
	return eval[int](b, `fetch(`+jsString(u)+`, {credentials: "same-origin"}).then(r => r.status)`)
}

func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

// TestChromium_States: a dashboard behind a login; a consumer group's
// pages; run now; metadata with control characters; the charts while
// they collect.
func TestChromium_States(t *testing.T) {
	path := chromium(t)
	srv := redistest.ForTest(t, redistest.Options{KillWithParent: true})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	insp, pub := inspectorAndPublisher(t, client)
	ctx := context.Background()
	const tp = "orders.close-unpaid"
	msgs := make([]*message.Message, 0, 4)
	for i := range 3 {
		m := message.NewMessage(watermill.NewUUID(), []byte(`{"order":`+string(rune('1'+i))+`}`))
		m.Metadata.Set("tenant", "acme")
		delay.Message(m, delay.For(time.Duration(i+1)*time.Hour))
		msgs = append(msgs, m)
	}
	odd := message.NewMessage(watermill.NewUUID(), []byte("odd"))
	odd.Metadata.Set("color", "\x1b[31mred\u202eexe.txt")
	delay.Message(odd, delay.For(5*time.Hour))
	if err := pub.Publish(tp, append(msgs, odd)...); err != nil {
		t.Fatal(err)
	}
	// Group "audit": subscribed once, then gone; ready messages for it,
	// one read by a consumer that died.
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "audit", DisableScheduler: true}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	subCtx, stop := context.WithCancel(ctx)
	if _, err := sub.Subscribe(subCtx, tp); err != nil {
		t.Fatal(err)
	}
	stop()
	_ = sub.Close()
	for range 3 {
		if err := pub.Publish(tp, message.NewMessage(watermill.NewUUID(), []byte("now"))); err != nil {
			t.Fatal(err)
		}
	}
	stream := "redisdelay:{" + tp + "}:stream"
	if err := client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "audit", Consumer: "worker-9", Streams: []string{stream, ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}

	auth := httptest.NewServer(dashboard.New(insp, dashboard.Options{BasicAuth: map[string]string{"alice": "correct-horse-battery"}, SampleEvery: time.Hour}))
	t.Cleanup(auth.Close)
	b := newBrowser(t, path)

	t.Run("a login is required, and the live refresh works behind it", func(t *testing.T) {
		b.t = t
		// Without credentials a browser gets 401 (headless Chromium fails
		// the navigation rather than ask for a login).
		if _, err := chromedp.Run(b.ctx, chromedp.Navigate(auth.URL+"/")); err == nil || !strings.Contains(err.Error(), "ERR_INVALID_AUTH_CREDENTIALS") {
			t.Fatalf("navigation without credentials: %v, want net::ERR_INVALID_AUTH_CREDENTIALS", err)
		}
		b.header("Authorization", "Basic "+basicAuth("alice", "correct-horse-battery"))
		b.open(auth.URL+"/", "#topics")
		if got := b.status(auth.URL + "/api/topics"); got != http.StatusOK {
			t.Fatalf("the page's own fetch: status %d", got)
		}
		if got := b.text("#topics"); !strings.Contains(got, tp) {
			t.Errorf("topics page lacks %s:\n%s", tp, got)
		}
		if got := b.text("#server"); !strings.Contains(got, "maxmemory-policy noeviction") {
			t.Errorf("server line: %q", got)
		}
		cell := `document.querySelector('#topics a[href*="t=orders"]').closest("tr").cells[2].textContent`
		before := eval[string](b, cell)
		more := message.NewMessage(watermill.NewUUID(), []byte("more"))
		delay.Message(more, delay.For(20*time.Hour))
		if err := pub.Publish(tp, more); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for eval[string](b, cell) == before {
			if time.Now().After(deadline) {
				t.Fatal("the live refresh does not update behind the login")
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("charts take a line each while collecting", func(t *testing.T) {
		b.t = t
		b.open(auth.URL+"/topic?t="+url.QueryEscape(tp), "#charts")
		h := eval[float64](b, `document.getElementById("charts").getBoundingClientRect().height`)
		page := eval[float64](b, `document.documentElement.scrollHeight`)
		if h > 90 {
			t.Errorf("the collecting charts are %.0f px high of a %.0f px page: want a line each", h, page)
		}
		if got := b.text("#chart-throughput .collect-note"); !strings.Contains(got, "Collecting") {
			t.Errorf("note: %q", got)
		}
		// As they were drawn before: empty charts at full size.
		full := eval[float64](b, `(() => { document.querySelectorAll(".chart").forEach(f => f.classList.remove("collecting"));
			return document.getElementById("charts").getBoundingClientRect().height })()`)
		t.Logf("FIGURE charts while collecting: %.0f px of a %.0f px page (drawn empty at full size: %.0f px)", h, page, full)
	})

	t.Run("a group's pages: ready, pending, consumers", func(t *testing.T) {
		b.t = t
		b.open(auth.URL+"/topic?t="+url.QueryEscape(tp), "#groups")
		b.do(chromedp.Click(chromedp.CSS(`#groups a[href*="view=pending"]`)), chromedp.WaitVisible(chromedp.CSS("#group-list")))
		// worker-9 read the message raw: it reports nothing of a handler.
		if got := b.text("#group-list"); !strings.Contains(got, "worker-9") || !strings.Contains(got, "expires") || !strings.Contains(got, "unreported") {
			t.Errorf("pending list:\n%s", got)
		}
		b.do(chromedp.Click(chromedp.CSS("#tab-ready")), chromedp.WaitVisible(chromedp.CSS("#group-list")))
		if n := eval[int](b, `document.querySelectorAll("#group-list tbody tr").length`); n != 2 {
			t.Errorf("%d ready rows, want 2", n)
		}
		b.do(chromedp.Click(chromedp.CSS("#tab-consumers")), chromedp.WaitVisible(chromedp.CSS("#consumers")))
		if got := b.text("#consumers"); !strings.Contains(got, "worker-9") {
			t.Errorf("consumers:\n%s", got)
		}
	})

	t.Run("metadata with control characters shows them escaped", func(t *testing.T) {
		b.t = t
		b.open(auth.URL+"/message?"+url.Values{"t": {tp}, "q": {odd.UUID}}.Encode(), "#metadata")
		got := b.text("#metadata")
		if !strings.Contains(got, `\x1b[31mred\u202eexe.txt`) {
			t.Errorf("metadata shows %q", got)
		}
		if strings.ContainsAny(got, "\x1b\u202e") {
			t.Errorf("metadata holds raw control characters: %q", got)
		}
	})

	t.Run("run now, confirmed; delivered once a scheduler runs", func(t *testing.T) {
		b.t = t
		target := msgs[0]
		b.open(auth.URL+"/message?"+url.Values{"t": {tp}, "q": {target.UUID}}.Encode(), "#run-now")
		b.do(chromedp.Click(chromedp.CSS("#run-now")), chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if got := b.text("#prompt"); !strings.Contains(got, "now?") {
			t.Errorf("prompt: %q", got)
		}
		mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: client, Topics: []string{tp}}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = mgr.Run(context.Background()) }()
		defer mgr.Close()
		b.do(chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if got := b.text("#result"); !strings.Contains(got, "is due now") || strings.Contains(got, "no scheduler") {
			t.Errorf("result: %q", got)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, waiting, err := insp.FindWaiting(ctx, tp, target.UUID)
			if err != nil {
				t.Fatal(err)
			}
			if !waiting {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("still waiting 10 s after run now, with a Manager running")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

func basicAuth(user, pw string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pw)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}
