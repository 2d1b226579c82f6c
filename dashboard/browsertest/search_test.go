package browsertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/chromedp"

	"github.com/redisdelay/watermill-redisdelay/dashboard"
)

// TestChromium_Search: search a topic by metadata from its page, near
// and far messages alike; cancel the matches through the dry run's count
// and its confirmation, and see them gone; a run of many steps continues
// by itself; markup in metadata is text; read-only mode has no bulk
// actions. No scheduler runs, so nothing falls due meanwhile.
func TestChromium_Search(t *testing.T) {
	path := chromium(t)
	insp, pub := backend(t)
	ctx := context.Background()
	const topic = "invoices.remind"
	msg := func(tenant string, d time.Duration) *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte(`{"invoice":"reminder for `+tenant+`"}`))
		m.Metadata.Set("tenant", tenant)
		delay.Message(m, delay.For(d))
		return m
	}
	var acme, globex []string
	var msgs []*message.Message
	for i := range 4 {
		near, far := msg("acme", 30*time.Second), msg("acme", time.Duration(i+1)*time.Hour) // the waiting set; the far tier
		other := msg("globex", time.Duration(i+1)*time.Hour)
		msgs = append(msgs, near, far, other)
		acme, globex = append(acme, near.UUID, far.UUID), append(globex, other.UUID)
	}
	evil := msg("evil", time.Hour)
	evil.Metadata.Set("note", `<img src=x onerror="window.__pwned=1">`)
	msgs = append(msgs, evil)
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	waiting := func(tp, uuid string) bool {
		_, ok, err := insp.FindWaiting(ctx, tp, uuid)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	rw, ro := dashboards(t, insp)
	// One batch of 1,000 stored messages a request, counting the requests.
	var steps atomic.Int64
	stepped := dashboard.New(insp, dashboard.Options{SampleEvery: -1, BulkStep: time.Nanosecond})
	stepper := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/bulk" {
			steps.Add(1)
		}
		stepped.ServeHTTP(w, r)
	}))
	t.Cleanup(stepper.Close)
	b := newBrowser(t, path)
	uuids := func() []string {
		return eval[[]string](b, `Array.from(document.querySelectorAll("#search-results code.uuid")).map(c => c.textContent)`)
	}

	t.Run("search by metadata from the topic page", func(t *testing.T) {
		b.t = t
		b.open(rw.URL+"/topic?t="+url.QueryEscape(topic), "#search-filter")
		b.do(chromedp.Click(chromedp.CSS("#search-filter")), chromedp.WaitVisible(chromedp.CSS("#filter")),
			chromedp.SendKeys(chromedp.CSS("#f-meta-0"), "tenant=acme"),
			chromedp.Click(chromedp.CSS("#f-search")), chromedp.WaitVisible(chromedp.CSS("#search-results")))
		if got := b.text("#search-summary"); !strings.Contains(got, "8 matches on this page; the search reached the end.") {
			t.Errorf("summary: %q", got)
		}
		got := uuids()
		slices.Sort(got)
		want := slices.Sorted(slices.Values(acme))
		if !slices.Equal(got, want) {
			t.Errorf("found %v, want acme's %v (near and far)", got, want)
		}
		if v := eval[string](b, `document.getElementById("f-meta-0").value`); v != "tenant=acme" {
			t.Errorf("the form lost what was typed: %q", v)
		}
		b.screenshot("search")
	})

	t.Run("cancel the matches: count, confirm, gone", func(t *testing.T) {
		b.t = t
		b.do(chromedp.Click(chromedp.CSS("#bulk-cancel")), chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if got := b.text("#prompt"); !strings.Contains(got, `8 waiting messages of topic "invoices.remind" match (13 stored messages read). Cancel them?`) {
			t.Errorf("prompt: %q", got)
		}
		for _, id := range acme {
			if !waiting(topic, id) {
				t.Fatalf("%s cancelled by the dry run", id)
			}
		}
		b.do(chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if got := b.text("#result"); !strings.Contains(got, `Cancelled 8 waiting messages of topic "invoices.remind" (8 matched`) {
			t.Errorf("result: %q", got)
		}
		for _, id := range acme {
			if waiting(topic, id) {
				t.Errorf("%s still waiting after the cancel", id)
			}
		}
		for _, id := range append(slices.Clone(globex), evil.UUID) {
			if !waiting(topic, id) {
				t.Errorf("%s, not acme's, was cancelled", id)
			}
		}
		// Back to the search: nothing matches any more.
		b.do(chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS("#search-summary")))
		if got := b.text("#search-summary"); got != "No message matches." {
			t.Errorf("summary after the cancel: %q", got)
		}
		if n := len(uuids()); n != 0 {
			t.Errorf("%d rows after the cancel", n)
		}
	})

	t.Run("markup in metadata is text", func(t *testing.T) {
		b.t = t
		b.open(rw.URL+"/search?"+url.Values{"t": {topic}, "meta": {"tenant=evil"}, "s": {"1"}}.Encode(), "#search-results")
		if got := b.text("#search-results td.meta"); !strings.Contains(got, `note=<img src=x onerror="window.__pwned=1">`) {
			t.Errorf("metadata cell: %q", got)
		}
		if pwned := eval[string](b, `String(window.__pwned)`); pwned != "undefined" {
			t.Fatalf("markup in metadata ran: window.__pwned = %s", pwned)
		}
		if n := eval[int](b, `document.querySelectorAll("img").length`); n != 0 {
			t.Errorf("%d img elements on the page", n)
		}
	})

	t.Run("a long run continues by itself", func(t *testing.T) {
		b.t = t
		const many = "reminders.bulk"
		var batch []*message.Message
		for i := range 2500 {
			batch = append(batch, msg([]string{"acme", "acme", "acme", "globex"}[i%4], time.Duration(10+i%50)*time.Minute))
		}
		if err := pub.Publish(many, batch...); err != nil {
			t.Fatal(err)
		}
		b.open(stepper.URL+"/search?"+url.Values{"t": {many}, "meta": {"tenant=acme"}, "s": {"1"}}.Encode(), "#bulk-cancel")
		b.do(chromedp.Click(chromedp.CSS("#bulk-cancel")), chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if got := b.text("#prompt"); !strings.Contains(got, "1,875 waiting messages of topic \"reminders.bulk\" match (2,500 stored messages read)") {
			t.Errorf("prompt: %q", got)
		}
		if n := steps.Load(); n < 3 {
			t.Errorf("the count took %d requests, want 3 or more (a batch of 1,000 each)", n)
		}
		steps.Store(0)
		b.do(chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if got := b.text("#result"); !strings.Contains(got, "Cancelled 1,875 waiting messages") {
			t.Errorf("result: %q", got)
		}
		if n := steps.Load(); n < 3 {
			t.Errorf("the cancel took %d requests, want 3 or more", n)
		}
		st, err := insp.Stats(ctx, many)
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiting != 625 {
			t.Errorf("%d messages waiting after the cancel, want globex's 625", st.Waiting)
		}
	})

	t.Run("read-only mode has no bulk actions", func(t *testing.T) {
		b.t = t
		b.open(ro.URL+"/search?"+url.Values{"t": {topic}, "meta": {"tenant=globex"}, "s": {"1"}}.Encode(), "#search-results")
		if n := len(uuids()); n != 4 {
			t.Errorf("read-only search found %d, want 4", n)
		}
		if n := eval[int](b, `document.querySelectorAll("#bulk-form, button[name=action]").length`); n != 0 {
			t.Errorf("read-only search page has %d bulk controls", n)
		}
		status := eval[int](b, `fetch("/bulk", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "t=`+topic+`&meta=tenant%3Dglobex&action=cancel&confirm=yes"}).then(r => r.status)`)
		if status != http.StatusForbidden {
			t.Errorf("POST /bulk in read-only mode: status %d, want 403", status)
		}
		for _, id := range globex {
			if !waiting(topic, id) {
				t.Fatalf("read-only mode cancelled %s", id)
			}
		}
	})
}
