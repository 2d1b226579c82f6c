package browsertest

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// until polls the page's script until js is true, failing after 10 s:
// the pages refresh every 3 s.
func (b *browser) until(js, what string) {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !eval[bool](b, js) {
		if time.Now().After(deadline) {
			b.t.Fatalf("the live refresh never showed %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestChromium_NoGroupAndLocate: a topic filling with no consumer group is
// flagged, and the flag follows the live refresh (the pages' script) on
// and off; the search finds a message no longer waiting, with what
// happens next.
func TestChromium_NoGroupAndLocate(t *testing.T) {
	path := chromium(t)
	srv := redistest.ForTest(t, redistest.Options{KillWithParent: true})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	insp, pub := inspectorAndPublisher(t, client)
	rw, _ := dashboards(t, insp)
	b := newBrowser(t, path)
	const tp = "pings"
	tick := message.NewMessage(watermill.NewUUID(), []byte("tick"))
	if err := pub.Publish(tp, tick); err != nil {
		t.Fatal(err)
	}

	b.open(rw.URL+"/", "#topics .no-group")
	if got := b.text("#topics .no-group"); got != "1 ready, unread" {
		t.Errorf("tag %q", got)
	}
	// The script's refresh redraws it with the new count.
	if err := pub.Publish(tp, message.NewMessage(watermill.NewUUID(), []byte("tick"))); err != nil {
		t.Fatal(err)
	}
	b.until(`(document.querySelector("#topics .no-group") || {}).textContent === "2 ready, unread"`, "2 ready, unread")

	b.open(rw.URL+"/topic?t="+tp, "#group-alert")
	if got := b.text("#group-alert"); !strings.Contains(got, "no consumer group") {
		t.Errorf("alert %q", got)
	}
	// A group created (its subscriber gone again): the alert goes at the
	// next refresh, and the group's name links to its page.
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "audit", DisableScheduler: true}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	if _, err := sub.Subscribe(ctx, tp); err != nil {
		t.Fatal(err)
	}
	stop()
	_ = sub.Close()
	b.until(`document.getElementById("group-alert").hidden`, "the alert hidden")
	b.open(rw.URL+"/", "#topics .group-link")
	b.until(`(document.querySelector("#topics .group-link") || {}).textContent === "audit"`, "the group's link")

	b.open(rw.URL+"/message?"+url.Values{"t": {tp}, "q": {tick.UUID}}.Encode(), "#locations")
	got := b.text("#locations")
	if !strings.Contains(got, "ready") || !strings.Contains(got, `The next consumer of group "audit" to read gets it`) {
		t.Errorf("locations:\n%s", got)
	}
}
