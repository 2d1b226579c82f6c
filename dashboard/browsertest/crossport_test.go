package browsertest

import (
	"context"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/chromedp"

	"github.com/redisdelay/watermill-redisdelay/dashboard"
)

// seen is a request the dashboard answered, as the browser sent it.
type seen struct {
	path, site string
	status     int
}

// recorder notes the requests a handler answers and their status.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	reqs []seen
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	rec.next.ServeHTTP(sw, r)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.reqs = append(rec.reqs, seen{r.URL.Path, r.Header.Get("Sec-Fetch-Site"), sw.status})
}

func (rec *recorder) find(path string) (seen, bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, s := range rec.reqs {
		if s.path == path {
			return s, true
		}
	}
	return seen{}, false
}

// TestChromium_CrossPortCSRF: a page served on another port of the
// dashboard's host (another local app, a dev server, an XSS there) plants
// a token cookie of its own (cookies ignore ports) and submits a cancel
// form with it, and makes the browser load a deep page of waiting
// messages as an image. The dashboard refuses both, configured as
// redisdelay ui configures it (its address with the port) and as it used
// to (the address alone, which trusted every port of it); the operator's
// own cancel from the dashboard's page still works.
func TestChromium_CrossPortCSRF(t *testing.T) {
	path := chromium(t)
	insp, pub := backend(t)
	const tp = "orders.close-unpaid"
	publish := func() string {
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`))
		delay.Message(msg, delay.For(time.Hour))
		if err := pub.Publish(tp, msg); err != nil {
			t.Fatal(err)
		}
		return msg.UUID
	}
	b := newBrowser(t, path)

	for _, c := range []struct {
		name    string
		allowed func(port string) []string
	}{
		{"the address alone, as redisdelay ui gave it before", func(string) []string { return []string{"127.0.0.1"} }},
		{"the address and port listened on", func(port string) []string { return []string{"127.0.0.1:" + port} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b.t = t
			// The dashboard's listener first, so that its port is known
			// when its options are made.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			rec := &recorder{next: dashboard.New(insp, dashboard.Options{SampleEvery: -1, AllowedHosts: c.allowed(port)})}
			dash := &httptest.Server{Listener: ln, Config: &http.Server{Handler: rec}}
			dash.Start()
			t.Cleanup(dash.Close)

			// The operator has the dashboard open: its own token cookie is set.
			victim := publish()
			b.open(dash.URL+"/message?"+url.Values{"t": {tp}, "q": {victim}}.Encode(), "#cancel")

			const planted = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
			attack := fmt.Sprintf(`<!doctype html><html><body>
<img id="deep" src="%[1]s/topic?t=%[2]s&amp;offset=9950">
<form id="f" method="post" action="%[1]s/cancel">
<input type="hidden" name="csrf" value="%[3]s">
<input type="hidden" name="t" value="%[2]s">
<input type="hidden" name="uuid" value="%[4]s">
<input type="hidden" name="confirm" value="yes">
</form>
<script>
document.cookie = "redisdelay_csrf=%[3]s; path=/cancel";
window.addEventListener("load", function () { document.getElementById("f").submit(); });
</script></body></html>`, dash.URL, url.QueryEscape(tp), planted, html.EscapeString(victim))
			evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				_, _ = w.Write([]byte(attack))
			}))
			t.Cleanup(evil.Close)
			if !strings.HasPrefix(evil.URL, "http://127.0.0.1:") || evil.URL == dash.URL {
				t.Fatalf("the attacker's page must be on another port of 127.0.0.1: %s, dashboard %s", evil.URL, dash.URL)
			}

			b.do(chromedp.Navigate(evil.URL))
			deadline := time.Now().Add(15 * time.Second)
			for {
				if _, ok := rec.find("/cancel"); ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the attacker's form did not reach the dashboard within 15 s")
				}
				time.Sleep(50 * time.Millisecond)
			}
			post, _ := rec.find("/cancel")
			t.Logf("the attacker's form: Sec-Fetch-Site %q, answered %d", post.site, post.status)
			if post.status != http.StatusForbidden {
				t.Errorf("the cross-port form was answered %d, want 403", post.status)
			}
			_, found, err := insp.FindWaiting(b.ctx, tp, victim)
			if err != nil {
				t.Fatal(err)
			}
			if !found {
				t.Fatal("a page on another port of the host cancelled the message")
			}
			if img, ok := rec.find("/topic"); !ok {
				t.Error("the deep page was not requested by the <img>")
			} else {
				t.Logf("the <img> of a deep page: Sec-Fetch-Site %q, answered %d", img.site, img.status)
				if img.status != http.StatusForbidden {
					t.Errorf("the <img> of a deep page from another port was answered %d, want 403", img.status)
				}
			}

			// The operator's own cancel, from the dashboard's page, works,
			// the planted cookie (sent first, for its longer Path) aside.
			b.open(dash.URL+"/message?"+url.Values{"t": {tp}, "q": {victim}}.Encode(), "#cancel")
			ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
			defer cancel()
			if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
				chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result"))); err != nil {
				t.Fatalf("the operator's cancel: no result within 15 s (%v): %s", err, eval[string](b, "document.body.innerText"))
			}
			if got := b.text("#result"); !strings.Contains(got, "cancelled") {
				t.Errorf("the operator's cancel: %q", got)
			}
			if _, found, _ = insp.FindWaiting(b.ctx, tp, victim); found {
				t.Error("the operator's confirmed cancel left the message waiting")
			}
		})
	}
}
