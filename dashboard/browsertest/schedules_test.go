package browsertest

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // America/New_York on hosts without a zoneinfo database

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/chromedp"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// TestChromium_Schedules: the schedules page, its buttons through the
// confirmation pages, read back from Redis; a schedule ID with markup;
// read-only mode. No Manager runs, so only the triggered tick is published.
func TestChromium_Schedules(t *testing.T) {
	path := chromium(t)
	insp, pub := backend(t)
	ctx := context.Background()
	// The ticks wait an hour in their topic: a triggered one is found there.
	later := message.NewMessage(watermill.NewUUID(), nil)
	delay.Message(later, delay.For(time.Hour))
	const (
		id     = "daily-report"
		topic  = "reports.generate"
		evilID = `<img/src=x/onerror=window.__pwned=1>`
	)
	for _, s := range []redisdelay.Schedule{
		{ID: id, Spec: "0 9 * * 1-5", Timezone: "America/New_York", Topic: topic, Jitter: 30 * time.Second, Metadata: later.Metadata},
		{ID: "invoice-reminders", Spec: "0 */2 * * *", Timezone: "Europe/Paris", Topic: "invoices.remind", Metadata: later.Metadata},
		{ID: "ping", Spec: "@every 15m", Topic: "pings", CatchUpWindow: 5 * time.Minute, Metadata: later.Metadata},
	} {
		if err := pub.Schedule(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := insp.PauseSchedule(ctx, "ping"); err != nil {
		t.Fatal(err)
	}
	get := func(id string) (redisdelay.Schedule, bool) {
		all, err := insp.Schedules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			if s.ID == id {
				return s, true
			}
		}
		return redisdelay.Schedule{}, false
	}
	ticks := func() int {
		msgs, err := insp.Waiting(ctx, topic, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range msgs {
			if m.Message.Metadata.Get(redisdelay.ScheduleIDKey) == id {
				n++
			}
		}
		return n
	}

	rw, ro := dashboards(t, insp)
	b := newBrowser(t, path)
	row := `#schedules tr[data-schedule="` + id + `"]`
	button := func(class string) string { return row + " button." + class }

	t.Run("listed, linked from the nav", func(t *testing.T) {
		b.t = t
		b.open(rw.URL+"/", "#nav-schedules")
		b.do(chromedp.Click(chromedp.CSS("#nav-schedules")), chromedp.WaitVisible(chromedp.CSS("#schedules")))
		got := b.text(row)
		for _, want := range []string{id, "0 9 * * 1-5", "America/New_York", topic, " UTC", "up to 30s", "1h0m0s (default)"} {
			if !strings.Contains(got, want) {
				t.Errorf("row lacks %q: %q", want, got)
			}
		}
		if s, _ := get(id); !strings.Contains(got, s.Next.UTC().Format("2006-01-02 15:04:05")) {
			t.Errorf("row lacks the next tick %s: %q", s.Next.UTC(), got)
		}
		if got := b.text(`#schedules tr[data-schedule="ping"]`); !strings.Contains(got, "5m0s") || !strings.Contains(got, "UTC") || !strings.Contains(got, "paused") {
			t.Errorf("ping row: %q", got)
		}
		if n := eval[int](b, `document.querySelectorAll('#schedules tr[data-schedule="ping"] button.resume').length`); n != 1 {
			t.Errorf("paused ping has %d Resume buttons", n)
		}
		b.screenshot("schedules")
		// Its topic link leads to the topic page.
		b.do(chromedp.Click(chromedp.CSS(row+` a[href*="/topic?"]`)), chromedp.WaitVisible(chromedp.CSS("#groups")))
	})

	t.Run("pause with confirmation, see paused, resume", func(t *testing.T) {
		b.t = t
		b.open(rw.URL+"/schedules", button("pause"))
		b.do(chromedp.Click(chromedp.CSS(button("pause"))), chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if got := b.text("#prompt"); !strings.Contains(got, `Pause schedule "daily-report"`) {
			t.Errorf("prompt: %q", got)
		}
		if s, _ := get(id); !s.Paused.IsZero() {
			t.Fatal("paused before the confirmation")
		}
		b.do(chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if got := b.text("#result"); !strings.Contains(got, "Paused schedule") {
			t.Errorf("result: %q", got)
		}
		s, _ := get(id)
		if s.Paused.IsZero() {
			t.Fatal("not paused after the confirmation")
		}
		b.do(chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS(row+" .tag.paused")))
		if got := b.text(row + " td.next"); !strings.HasPrefix(got, "paused") || strings.Contains(got, " in ") {
			t.Errorf("next tick reads %q while paused", got)
		}
		if got := b.text(row + " .paused-since"); !strings.Contains(got, "since "+s.Paused.UTC().Format("2006-01-02 15:04:05")+" UTC") {
			t.Errorf("paused since reads %q, want %s", got, s.Paused.UTC())
		}

		// Resume: no confirmation.
		b.do(chromedp.Click(chromedp.CSS(button("resume"))), chromedp.WaitVisible(chromedp.CSS("#result")))
		if got := b.text("#result"); !strings.Contains(got, "Resumed schedule") || !strings.Contains(got, "its next tick is at") {
			t.Errorf("result: %q", got)
		}
		if s, _ := get(id); !s.Paused.IsZero() || s.Next.IsZero() {
			t.Fatalf("after Resume: paused %s, next %s", s.Paused, s.Next)
		}
		b.do(chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS(button("pause"))))
		if n := eval[int](b, `document.querySelectorAll(`+strconv.Quote(row+" .tag.paused")+`).length`); n != 0 {
			t.Errorf("%d paused badges after resuming", n)
		}
	})

	t.Run("trigger with confirmation", func(t *testing.T) {
		b.t = t
		before, _ := get(id)
		b.open(rw.URL+"/schedules", button("trigger"))
		b.do(chromedp.Click(chromedp.CSS(button("trigger"))), chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if n := ticks(); n != 0 {
			t.Fatalf("%d ticks before the confirmation", n)
		}
		// Going back publishes nothing.
		b.do(chromedp.Click(chromedp.CSS("#abort")), chromedp.WaitVisible(chromedp.CSS(button("trigger"))))
		if n := ticks(); n != 0 {
			t.Fatalf("%d ticks although the operator said no", n)
		}
		b.do(chromedp.Click(chromedp.CSS(button("trigger"))), chromedp.WaitVisible(chromedp.CSS("#confirm")),
			chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if got := b.text("#result"); !strings.Contains(got, `Published a tick of schedule "daily-report" to topic "reports.generate"`) {
			t.Errorf("result: %q", got)
		}
		if n := ticks(); n != 1 {
			t.Fatalf("%d ticks in %s after the trigger, want 1", n, topic)
		}
		if s, _ := get(id); !s.Next.Equal(before.Next) {
			t.Errorf("next tick moved from %s to %s", before.Next, s.Next)
		}
	})

	t.Run("read-only mode hides and refuses the actions", func(t *testing.T) {
		b.t = t
		b.open(ro.URL+"/schedules", "#read-only")
		if n := eval[int](b, `document.querySelectorAll("#schedules button, #schedules form").length`); n != 0 {
			t.Errorf("read-only schedules page has %d controls", n)
		}
		status := eval[int](b, `fetch("/schedule", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "id=`+id+`&action=remove&confirm=yes"}).then(r => r.status)`)
		if status != http.StatusForbidden {
			t.Errorf("POST /schedule in read-only mode: status %d, want 403", status)
		}
		if _, ok := get(id); !ok {
			t.Fatal("read-only mode removed the schedule")
		}
	})

	t.Run("markup in an ID is text, and its buttons work", func(t *testing.T) {
		b.t = t
		if err := pub.Schedule(ctx, redisdelay.Schedule{ID: evilID, Spec: "@hourly", Topic: "pings"}); err != nil {
			t.Fatal(err)
		}
		evil := `#schedules tr[data-schedule=` + strconv.Quote(evilID) + `]`
		b.open(rw.URL+"/schedules", evil)
		if got := b.text(evil + " code"); got != evilID {
			t.Errorf("evil ID shows as %q", got)
		}
		if pwned := eval[string](b, `String(window.__pwned)`); pwned != "undefined" {
			t.Fatalf("markup in a schedule ID ran: window.__pwned = %s", pwned)
		}
		if n := eval[int](b, `document.querySelectorAll("img").length`); n != 0 {
			t.Errorf("%d img elements on the page", n)
		}
		b.do(chromedp.Click(chromedp.CSS(evil+" button.pause")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
			chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if s, _ := get(evilID); s.Paused.IsZero() {
			t.Fatalf("not paused: %q", b.text("#result"))
		}
		if pwned := eval[string](b, `String(window.__pwned)`); pwned != "undefined" {
			t.Fatalf("markup in a schedule ID ran on the result page: window.__pwned = %s", pwned)
		}
	})

	t.Run("remove with confirmation", func(t *testing.T) {
		b.t = t
		b.open(rw.URL+"/schedules", button("remove"))
		b.do(chromedp.Click(chromedp.CSS(button("remove"))), chromedp.WaitVisible(chromedp.CSS("#prompt")))
		if cls := eval[string](b, `document.getElementById("confirm").className`); cls != "danger" {
			t.Errorf("confirm button is %q, want danger", cls)
		}
		b.do(chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
		if _, ok := get(id); ok {
			t.Fatal("still registered after Remove")
		}
		b.do(chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS("#schedules")))
		if n := eval[int](b, `document.querySelectorAll(`+strconv.Quote(row)+`).length`); n != 0 {
			t.Errorf("removed schedule still listed")
		}
	})
}
