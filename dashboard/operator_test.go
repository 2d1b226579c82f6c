package dashboard_test

// Operator asks: a banner when no scheduler holds a topic's lease, far due
// times in days, dead letters found by UUID.

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
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

// TestNoSchedulerBanner: messages wait and nobody schedules them (no
// Manager, no subscriber running a scheduler): the topic page says so in a
// banner, with how late they are, and the topics page tags the topic; a
// topic with nothing waiting (its scheduler gone, or dormant) has neither;
// once a Manager runs, the banner goes.
func TestNoSchedulerBanner(t *testing.T) {
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

// TestFarDueInDays: a message due in 1500 days reads "in 1500d13h55m", not
// "in 36013h55m0s", in the list and on its page.
func TestFarDueInDays(t *testing.T) {
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
