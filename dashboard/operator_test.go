package dashboard_test

// Operator asks: a banner when no scheduler holds a topic's lease, far due
// times in days, dead letters found by UUID.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/dashboard"
)

// alertOf reads the alert of a topic from /api/topic.
func (e *env) alertOf(topic string) (alert string, leased int) {
	e.t.Helper()
	status, body := e.get("/api/topic?t=" + topic)
	require.Equal(e.t, http.StatusOK, status, body)
	var got struct {
		Stats struct {
			Alert  string
			Leased int
		}
	}
	require.NoError(e.t, json.Unmarshal([]byte(body), &got))
	return got.Stats.Alert, got.Stats.Leased
}

// TestTopics_NoSchedulerBanner: messages wait and nobody schedules them (no
// Manager, no subscriber running a scheduler): the topic page says so in a
// banner, with how late they are, and the topics page tags the topic; a
// topic with nothing waiting (its scheduler gone, or dormant) has neither;
// once a Manager runs, the banner goes.
func TestTopics_NoSchedulerBanner(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.publish("orders", later(50*time.Millisecond, "late"), later(time.Hour, "later"))
	e.deadLetters("billing", "g", 1) // its subscriber's scheduler stopped; nothing waits
	time.Sleep(1200 * time.Millisecond)

	status, body := e.get("/topic?t=orders")
	require.Equal(t, http.StatusOK, status, body)
	assert.Regexp(t, `<p class="alert" id="sched-alert" role="alert">No scheduler holds this topic&#39;s lease: its 2 waiting message\(s\) are not moved to the consumer groups when due, and the earliest is overdue by [1-9]s\.`, body)
	alert, leased := e.alertOf("orders")
	assert.Contains(t, alert, "No scheduler holds this topic's lease")
	assert.Equal(t, 0, leased)

	status, body = e.get("/topic?t=billing")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `id="sched-alert" role="alert" hidden>`, "nothing waits: no lease is needed")
	alert, _ = e.alertOf("billing")
	assert.Empty(t, alert)

	status, body = e.get("/")
	require.Equal(t, http.StatusOK, status, body)
	assert.Regexp(t, `href="/topic\?t=orders">orders</a> <span class="tag unscheduled" title="No scheduler holds`, body)
	assert.Len(t, regexp.MustCompile(`class="tag unscheduled"`).FindAllString(body, -1), 1, "only orders")
	status, body = e.get("/api/topics")
	require.Equal(t, http.StatusOK, status, body)
	var all struct {
		Topics []struct{ Topic, Alert string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &all))
	for _, tp := range all.Topics {
		assert.Equal(t, tp.Topic == "orders", tp.Alert != "", "%+v", tp)
	}

	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: e.client, Topics: []string{"orders"}, CheckInterval: 100 * time.Millisecond}, watermill.NopLogger{})
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	require.Eventually(t, func() bool { a, l := e.alertOf("orders"); return a == "" && l == 1 }, 5*time.Second, 50*time.Millisecond)
	_, body = e.get("/topic?t=orders")
	assert.Contains(t, body, `id="sched-alert" role="alert" hidden>`)
}

// TestTopic_FarDueInDays: a message due in 1500 days reads "in 1500d13h55m", not
// "in 36013h55m0s", in the list and on its page.
func TestTopic_FarDueInDays(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	msg := later(time.Hour, "far")
	e.publish("orders", msg)
	due := time.Now().Add(1500*24*time.Hour + 13*time.Hour + 55*time.Minute + 30*time.Second)
	moved, err := e.insp.Reschedule(context.Background(), "orders", msg.UUID, due)
	require.NoError(t, err)
	require.True(t, moved)

	days := regexp.MustCompile(`in 1500d13h5[56]m<`)
	_, body := e.get("/topic?t=orders")
	assert.Regexp(t, days, body)
	assert.NotContains(t, body, "36013h")
	_, body = e.get("/message?t=orders&q=" + msg.UUID)
	assert.Regexp(t, `\(in 1500d13h5[56]m\)`, body)
	assert.NotContains(t, body, "36013h")
}

// TestSearch_FindsDeadLetter: the search by UUID finds a dead letter (with
// its group, reason, payload and requeue/delete form) when no message with
// that UUID waits; it reads a bounded number of each group's dead letters
// and says which it left out.
func TestSearch_FindsDeadLetter(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	uuids := e.deadLetters("orders", "billing", 3)
	waiting := later(time.Hour, "still waiting")
	e.publish("orders", waiting)

	status, body := e.get("/message?t=orders&q=" + uuids[1])
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "<h1>Dead letter</h1>")
	assert.Contains(t, body, `<code class="uuid">`+uuids[1]+`</code>`)
	assert.Contains(t, body, `href="/dead?g=billing&amp;t=orders">billing</a>`)
	assert.Contains(t, body, "dead b")
	assert.Contains(t, body, `<input type="hidden" name="g" value="billing">`)
	id := regexp.MustCompile(`name="id" value="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, id, "a requeue/delete form")
	form := url.Values{"csrf": {csrf(t, body)}, "t": {"orders"}, "g": {"billing"}, "action": {"requeue"}, "id": {id[1]}, "confirm": {"yes"}}
	_, res := e.post("/dead/action", form)
	assert.Contains(t, res, "Requeued 1 dead letter(s)")

	// A waiting message is shown as before; nothing found is a 404 that
	// says dead letters were searched too.
	status, body = e.get("/message?t=orders&q=" + waiting.UUID)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "<h1>Waiting message</h1>")
	assert.Contains(t, body, `<td id="next">When due, a scheduler copies it to the ready queue`)
	status, body = e.get("/message?t=orders&q=no-such-uuid")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, "in any state: waiting, ready, pending, retrying, queued in its group, or dead.")
	assert.NotContains(t, body, `id="unsearched"`)

	// Bounded: past the bound, the page names what it did not read. Five
	// dead letters now: a budget of 1 reads the oldest and the newest.
	more := e.deadLetters("orders", "billing", 3)
	defer dashboard.SetDeadScan(1)()
	_, body = e.get("/message?t=orders&q=" + more[0])
	assert.NotContains(t, body, `<code class="uuid">`+more[0], "the dead letter was not read")
	assert.Contains(t, body, `the search reads at most 1 entries of each (a stream's oldest and newest); not searched: `)
	assert.Contains(t, body, `group &#34;billing&#34;&#39;s dead letters in partition 0: 3 entries not read (scan budget 1)`)
	status, _ = e.get("/message?t=orders&q=" + uuids[0])
	assert.Equal(t, http.StatusOK, status)
}

// TestTopics_NoSchedulerBannerWaitingForGroup: a grouped message waiting for the
// topic's first consumer group needs no scheduler (a running one has let
// the idle partition's lease lapse): no banner.
func TestTopics_NoSchedulerBannerWaitingForGroup(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: e.client, Topics: []string{"tenants"}}, watermill.NopLogger{})
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	msg := later(0, "grouped")
	redisdelay.SetGroup(msg, "tenant-1")
	e.publish("tenants", msg)
	require.Eventually(t, func() bool {
		st, err := e.insp.Stats(context.Background(), "tenants")
		require.NoError(t, err)
		return st.WaitingForGroup == 1 && st.Leased == 0
	}, 20*time.Second, 20*time.Millisecond)
	alert, _ := e.alertOf("tenants")
	assert.Empty(t, alert)
	_, body := e.get("/")
	assert.NotContains(t, body, "no scheduler</span>")
}

// TestMessage_LocatesPendingAndReady: the search by UUID finds a message
// that is no longer waiting in its group's states, with what happens next.
func TestMessage_LocatesPendingAndReady(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.subscribe("orders", "billing") // its subscriber fetches and nobody handles: pending
	held := later(0, "held")
	e.publish("orders", held)
	var body string
	require.Eventually(t, func() bool {
		_, body = e.get("/message?t=orders&q=" + held.UUID)
		return strings.Contains(body, `<td class="state">pending</td>`)
	}, 5*time.Second, 20*time.Millisecond)
	assert.Contains(t, body, "<h1>Where message <code>"+held.UUID+"</code> is</h1>")
	assert.Contains(t, body, `href="/group?g=billing&amp;t=orders">billing</a>`)
	assert.Contains(t, body, "lease expires ")
	assert.Contains(t, body, " UTC")
	assert.Contains(t, body, "holds it (attempt 1)")
	_, body = e.get("/group?t=orders&g=billing&view=pending")
	assert.Contains(t, body, `id="prefetch-note">Handler: a subscription hands its messages to its handler one at a time`)
	assert.Contains(t, body, `<th title="handling: its consumer's handler has it`)
	// Nobody takes the message from the subscription's channel: buffered
	// once the consumer reports (at its first lease renewal), unreported
	// before.
	assert.Regexp(t, `<td class="nowrap">(buffered|unreported)</td>`, body)

	require.NoError(t, e.insp.Pause(context.Background(), "orders", "billing"))
	// No wait for the subscriber to hear of the pause: it reads nothing
	// more while its one message waits for somebody to take it from its
	// channel, so the next message stays ready either way.
	ready := later(0, "ready")
	ready.Metadata.Set(redisdelay.BusinessKey, "order-1")
	e.publish("orders", ready)
	status, body := e.get("/message?t=orders&by=key&q=order-1")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `<td class="state">ready</td>`)
	assert.Contains(t, body, "group paused")
	assert.Contains(t, body, "is paused: nothing of it is delivered until it is resumed")
}

// TestTopics_NoConsumerGroupFlagged: ready messages in a topic with no
// consumer group (a schedule ticking into it) are flagged on both pages
// and in the JSON the pages refresh from; group names link to their page.
func TestTopics_NoConsumerGroupFlagged(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.publish("pings", later(0, "tick"), later(0, "tick"))
	_, body := e.get("/")
	assert.Contains(t, body, `<span class="tag unscheduled no-group" title="This topic has no consumer group: its 2 ready message(s) wait for the first, and pile up meanwhile.`)
	assert.Contains(t, body, `2 ready, unread</span>`)
	_, body = e.get("/topic?t=pings")
	assert.Contains(t, body, `<p class="alert" id="group-alert" role="alert">This topic has no consumer group: its 2 ready message(s)`)
	status, js := e.get("/api/topics")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, js, `"no_group":"This topic has no consumer group`)

	e.subscribe("pings", "audit")
	_, body = e.get("/")
	assert.NotContains(t, body, "no-group")
	assert.Contains(t, body, `<a href="/group?g=audit&amp;t=pings" class="group-link">audit</a>`)
	_, body = e.get("/topic?t=pings")
	assert.Contains(t, body, `<p class="alert" id="group-alert" role="alert" hidden>`)
}

// TestPages_LocateAndStuckErrors: a Redis error in the message search's
// lookup, or in reading the stuck consumers, fails the page with 502
// (here: the Redis user may not HSCAN, nor run XINFO CONSUMERS).
func TestPages_LocateAndStuckErrors(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.subscribe("orders", "billing") // nobody handles: pending
	held := later(0, "held")
	e.publish("orders", held)
	require.Eventually(t, func() bool {
		st, err := e.insp.Stats(context.Background(), "orders")
		return err == nil && st.Groups[0].Pending == 1
	}, 5*time.Second, 20*time.Millisecond)
	require.NoError(t, e.client.Do(context.Background(), "ACL", "SETUSER", "default", "-hscan", "-xinfo|consumers").Err())

	status, body := e.get("/message?t=orders&q=" + held.UUID)
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, "NOPERM")
	status, body = e.get("/topic?t=orders")
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, "NOPERM")
	status, body = e.get("/api/topic?t=orders")
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, `"error":`)
}
