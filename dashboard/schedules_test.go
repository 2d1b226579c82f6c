package dashboard_test

// The schedules page and its actions, read back with Inspector.Schedules.

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // America/New_York on hosts without a zoneinfo database

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/dashboard"
)

// schedule registers a schedule whose ticks wait an hour in their topic,
// so that a triggered tick can be found there and none is delivered.
func (e *env) schedule(s redisdelay.Schedule) {
	e.t.Helper()
	m := message.NewMessage(watermill.NewUUID(), nil)
	delay.Message(m, delay.For(time.Hour))
	s.Metadata = m.Metadata
	require.NoError(e.t, e.pub.Schedule(context.Background(), s))
}

// scheduleOf reads a schedule back from Redis; ok is false once removed.
func (e *env) scheduleOf(id string) (s redisdelay.Schedule, ok bool) {
	e.t.Helper()
	all, err := e.insp.Schedules(context.Background())
	require.NoError(e.t, err)
	for _, s := range all {
		if s.ID == id {
			return s, true
		}
	}
	return redisdelay.Schedule{}, false
}

// ticksWaiting lists the schedule IDs of the ticks waiting in a topic.
func (e *env) ticksWaiting(topic string) []string {
	e.t.Helper()
	msgs, err := e.insp.Waiting(context.Background(), topic, 0, 100)
	require.NoError(e.t, err)
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.Message.Metadata.Get(redisdelay.ScheduleIDKey))
	}
	return ids
}

func TestSchedules_Page(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	status, body := e.get("/schedules")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "No recurring schedules under this key prefix.")
	assert.Contains(t, body, `href="/schedules" id="nav-schedules">Schedules</a>`)
	_, body = e.get("/")
	assert.Contains(t, body, `href="/schedules" id="nav-schedules"`, "linked from every page")

	e.schedule(redisdelay.Schedule{ID: "daily-report", Spec: "0 9 * * 1-5", Timezone: "America/New_York", Topic: "reports.generate",
		Jitter: 250 * time.Millisecond, CatchUpWindow: 10 * time.Minute})
	e.schedule(redisdelay.Schedule{ID: "ping", Spec: "@every 1h", Topic: "pings", Overlap: redisdelay.OverlapSkip})
	e.schedule(redisdelay.Schedule{ID: `<b>x</b>"&'`, Spec: "@daily", Topic: `<i>t</i>`})
	e.schedule(redisdelay.Schedule{ID: "every-paris", Spec: "@every 1h", Timezone: "Europe/Paris", Topic: "pings"})
	_, err := e.insp.PauseSchedule(context.Background(), "ping")
	require.NoError(t, err)
	report, _ := e.scheduleOf("daily-report")
	ping, _ := e.scheduleOf("ping")
	require.False(t, report.Next.IsZero())
	require.False(t, ping.Paused.IsZero())

	status, body = e.get("/schedules")
	require.Equal(t, http.StatusOK, status, body)
	assert.NotContains(t, body, "No recurring schedules")
	row := func(id string) string {
		t.Helper()
		m := regexp.MustCompile(`(?s)<tr data-schedule="` + regexp.QuoteMeta(html.EscapeString(id)) + `">.*?</tr>`).FindString(body)
		require.NotEmpty(t, m, "no row for %q in\n%s", id, body)
		return m
	}
	r := row("daily-report")
	for _, want := range []string{
		"<code>0 9 * * 1-5</code>", "<td>America/New_York</td>",
		`<a href="/topic?t=reports.generate">reports.generate</a>`,
		report.Next.UTC().Format("2006-01-02 15:04:05") + " UTC",
		report.Next.In(mustLoad(t, "America/New_York")).Format("2006-01-02 15:04:05 MST"),
		"up to 250ms", "<td class=\"nowrap\">10m0s</td>", `every tick is published">allow</td>`,
		`value="pause"`, `value="trigger"`, `value="remove"`,
	} {
		assert.Contains(t, r, want)
	}
	assert.Regexp(t, `<span class="muted nowrap">in \d`, r, "relative next tick")
	assert.NotContains(t, r, "tag paused")

	r = row("ping")
	assert.Contains(t, r, "<td>UTC</td>", "no time zone: UTC")
	assert.Contains(t, r, `unfinished">skip</td>`, "the overlap policy")
	assert.Contains(t, r, `<span class="tag paused"`)
	assert.Contains(t, r, `since <span class="nowrap">`+ping.Paused.UTC().Format("2006-01-02 15:04:05")+" UTC</span>", "paused since")
	assert.NotContains(t, r, `<span class="muted nowrap">in `, "no next tick while paused")
	assert.Contains(t, r, "1h0m0s <span class=\"muted\">(default)</span>", "DefaultCatchUpWindow")
	assert.Contains(t, r, `<span class="muted">none</span>`, "no jitter")
	assert.Contains(t, r, `value="resume"`)
	assert.NotContains(t, r, `value="pause"`)

	// "@every" ticks in no zone: no local time, whatever Timezone says.
	r = row("every-paris")
	assert.Contains(t, r, "<td>Europe/Paris</td>")
	assert.NotContains(t, r, `<br>`)
	assert.NotContains(t, r, "CET")

	// Markup in an ID and a topic is text.
	r = row(`<b>x</b>"&'`)
	assert.Contains(t, r, `<code>&lt;b&gt;x&lt;/b&gt;&#34;&amp;&#39;</code>`)
	assert.Contains(t, r, `href="/topic?t=%3Ci%3Et%3C%2Fi%3E">&lt;i&gt;t&lt;/i&gt;</a>`)
	assert.NotContains(t, body, "<b>x")
	assert.NotContains(t, body, "<i>t")
	// Its topic's page exists: the link leads somewhere.
	status, _ = e.get("/topic?t=" + url.QueryEscape("<i>t</i>"))
	assert.Equal(t, http.StatusOK, status)
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// TestSchedules_Actions: pause (confirmed), resume, trigger (confirmed) and
// remove (confirmed), each read back from Redis.
func TestSchedules_Actions(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	id, odd := "nightly", `<b>odd</b>"&'`
	e.schedule(redisdelay.Schedule{ID: id, Spec: "0 3 * * *", Topic: "reports"})
	e.schedule(redisdelay.Schedule{ID: odd, Spec: "@every 1h", Topic: "reports"})
	_, page := e.get("/schedules")
	tok := csrf(t, page)
	post := func(action string, confirm bool) (int, string) {
		t.Helper()
		form := url.Values{"csrf": {tok}, "id": {id}, "action": {action}}
		if confirm {
			form.Set("confirm", "yes")
		}
		return e.post("/schedule", form)
	}
	before, _ := e.scheduleOf(id)

	// Pause: a confirmation first, which changes nothing.
	status, body := post("pause", false)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "Please confirm")
	assert.Contains(t, body, `Pause schedule &#34;nightly&#34; (0 3 * * *, to topic &#34;reports&#34;)?`)
	assert.Contains(t, body, `<input type="hidden" name="action" value="pause">`)
	assert.Contains(t, body, `class="primary"`)
	s, _ := e.scheduleOf(id)
	assert.True(t, s.Paused.IsZero(), "paused before the confirmation")
	status, body = post("pause", true)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `Paused schedule &#34;nightly&#34;`)
	assert.Contains(t, body, `href="/schedules"`, "back to the schedules")
	s, _ = e.scheduleOf(id)
	assert.False(t, s.Paused.IsZero(), "paused")
	assert.True(t, s.Next.IsZero())
	_, body = post("pause", true)
	assert.Contains(t, body, "was already paused: nothing changed")
	_, page = e.get("/schedules")
	assert.Contains(t, page, `<button type="submit" name="action" value="resume" class="resume" data-schedule="nightly">Resume</button>`)

	// Resume: no confirmation; it goes on from its first tick after now.
	status, body = post("resume", false)
	require.Equal(t, http.StatusOK, status, body)
	assert.NotContains(t, body, "Please confirm")
	s, _ = e.scheduleOf(id)
	assert.True(t, s.Paused.IsZero(), "resumed")
	assert.Equal(t, before.Next, s.Next, "a daily tick after now: the same one")
	assert.Contains(t, body, `Resumed schedule &#34;nightly&#34;: its next tick is at `+s.Next.UTC().Format("2006-01-02 15:04:05.000 UTC"))
	_, body = post("resume", false)
	assert.Contains(t, body, "was not paused: nothing changed")

	// Trigger: confirmed, one tick in the topic, the next tick unchanged.
	status, body = post("trigger", false)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `Publish one tick of schedule &#34;nightly&#34; to topic &#34;reports&#34; now?`)
	assert.Empty(t, e.ticksWaiting("reports"), "published before the confirmation")
	status, body = post("trigger", true)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `Published a tick of schedule &#34;nightly&#34; to topic &#34;reports&#34;`)
	assert.Equal(t, []string{id}, e.ticksWaiting("reports"))
	s, _ = e.scheduleOf(id)
	assert.Equal(t, before.Next, s.Next)

	// Trigger works on a paused schedule too.
	_, err := e.insp.PauseSchedule(context.Background(), id)
	require.NoError(t, err)
	_, body = post("trigger", true)
	assert.Contains(t, body, "Published a tick")
	assert.Equal(t, []string{id, id}, e.ticksWaiting("reports"))

	// Remove: a danger confirmation, then gone.
	status, body = post("remove", false)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `Remove schedule &#34;nightly&#34; (0 3 * * *, to topic &#34;reports&#34;) for good?`)
	assert.Contains(t, body, `class="danger"`)
	_, ok := e.scheduleOf(id)
	assert.True(t, ok, "removed before the confirmation")
	status, body = post("remove", true)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `Removed schedule &#34;nightly&#34;`)
	_, ok = e.scheduleOf(id)
	assert.False(t, ok, "removed")

	// An ID with markup goes through the forms as it is.
	form := url.Values{"csrf": {tok}, "id": {odd}, "action": {"pause"}}
	_, body = e.post("/schedule", form)
	assert.Contains(t, body, `<input type="hidden" name="id" value="&lt;b&gt;odd&lt;/b&gt;&#34;&amp;&#39;">`)
	form.Set("confirm", "yes")
	_, body = e.post("/schedule", form)
	assert.Contains(t, body, "Paused schedule")
	s, _ = e.scheduleOf(odd)
	assert.False(t, s.Paused.IsZero())
}

// TestSchedules_UnknownAndBadInput: an unknown ID is a 404 that says so,
// before any confirmation; a bad action or a missing ID a 400.
func TestSchedules_UnknownAndBadInput(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.schedule(redisdelay.Schedule{ID: "kept", Spec: "@every 1h", Topic: "reports"})
	_, page := e.get("/schedules")
	tok := csrf(t, page)
	for _, action := range []string{"pause", "resume", "trigger", "remove"} {
		for _, confirm := range []string{"", "yes"} {
			status, body := e.post("/schedule", url.Values{"csrf": {tok}, "id": {"nope"}, "action": {action}, "confirm": {confirm}})
			assert.Equal(t, http.StatusNotFound, status, "%s %q", action, confirm)
			assert.Contains(t, body, `there is no schedule &#34;nope&#34; under this key prefix`, action)
			assert.NotContains(t, body, "Please confirm")
		}
	}
	status, body := e.post("/schedule", url.Values{"csrf": {tok}, "id": {"kept"}, "action": {"explode"}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "use pause, resume, trigger or remove")
	status, body = e.post("/schedule", url.Values{"csrf": {tok}, "action": {"pause"}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "no schedule ID given to pause")
	s, ok := e.scheduleOf("kept")
	assert.True(t, ok)
	assert.True(t, s.Paused.IsZero())

	// Removed between the confirmation page and the confirmation.
	status, body = e.post("/schedule", url.Values{"csrf": {tok}, "id": {"kept"}, "action": {"pause"}})
	require.Equal(t, http.StatusOK, status, body)
	_, err := e.insp.RemoveSchedule(context.Background(), "kept")
	require.NoError(t, err)
	status, body = e.post("/schedule", url.Values{"csrf": {tok}, "id": {"kept"}, "action": {"pause"}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, `there is no schedule &#34;kept&#34;`)

	e.stopRedis()
	status, body = e.get("/schedules")
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, "connection refused")
	status, _ = e.post("/schedule", url.Values{"csrf": {tok}, "id": {"kept"}, "action": {"resume"}})
	assert.Equal(t, http.StatusBadGateway, status)
}

// TestSchedules_ActionsRefused: read-only mode hides the buttons and
// refuses the requests; a missing or wrong token, or another site's
// Origin, is refused; nothing changes in Redis.
func TestSchedules_ActionsRefused(t *testing.T) {
	ro := newEnv(t, dashboard.Options{ReadOnly: true, SampleEvery: -1})
	ro.schedule(redisdelay.Schedule{ID: "a", Spec: "@every 1h", Topic: "reports"})
	ro.schedule(redisdelay.Schedule{ID: "b", Spec: "@every 1h", Topic: "reports"})
	_, err := ro.insp.PauseSchedule(context.Background(), "b")
	require.NoError(t, err)
	status, page := ro.get("/schedules")
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `id="read-only"`)
	assert.NotContains(t, page, `name="action"`)
	assert.NotContains(t, page, `name="csrf"`)
	assert.Contains(t, page, `class="tag paused"`, "the badge still shows")
	for _, f := range []url.Values{
		{"id": {"a"}, "action": {"pause"}, "confirm": {"yes"}},
		{"id": {"b"}, "action": {"resume"}},
		{"id": {"a"}, "action": {"trigger"}, "confirm": {"yes"}},
		{"id": {"a"}, "action": {"remove"}, "confirm": {"yes"}},
	} {
		status, body := ro.post("/schedule", f)
		assert.Equal(t, http.StatusForbidden, status, f.Encode())
		assert.Contains(t, body, "read-only")
	}
	unchanged := func(e *env) {
		t.Helper()
		a, ok := e.scheduleOf("a")
		require.True(t, ok, "removed")
		assert.True(t, a.Paused.IsZero(), "paused")
		b, _ := e.scheduleOf("b")
		assert.False(t, b.Paused.IsZero(), "resumed")
		assert.Empty(t, e.ticksWaiting("reports"), "triggered")
	}
	unchanged(ro)

	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.schedule(redisdelay.Schedule{ID: "a", Spec: "@every 1h", Topic: "reports"})
	e.schedule(redisdelay.Schedule{ID: "b", Spec: "@every 1h", Topic: "reports"})
	_, err = e.insp.PauseSchedule(context.Background(), "b")
	require.NoError(t, err)
	_, page = e.get("/schedules")
	tok := csrf(t, page)
	for _, f := range []url.Values{
		{"id": {"a"}, "action": {"pause"}, "confirm": {"yes"}},
		{"id": {"b"}, "action": {"resume"}},
		{"id": {"a"}, "action": {"trigger"}, "confirm": {"yes"}},
		{"id": {"a"}, "action": {"remove"}, "confirm": {"yes"}},
	} {
		status, body := e.post("/schedule", f)
		assert.Equal(t, http.StatusForbidden, status, "no token: %s", f.Encode())
		assert.Contains(t, body, "token is missing or stale")
		f.Set("csrf", strings.Repeat("0", 32))
		status, _ = e.post("/schedule", f)
		assert.Equal(t, http.StatusForbidden, status, "wrong token: %s", f.Encode())
		f.Set("csrf", tok)
		status, body = e.post("/schedule", f, "Origin", "https://evil.example")
		assert.Equal(t, http.StatusForbidden, status, "another site: %s", f.Encode())
		assert.Contains(t, body, "does not come from this dashboard")
	}
	resp, _ := e.do(http.MethodGet, "/schedule?id=a&action=remove&confirm=yes", "", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "actions are POSTs")
	unchanged(e)
}

// TestSchedules_PageShowsSkips: the ticks an OverlapSkip schedule skipped
// (its first tick's message waits an hour) show beside its policy.
func TestSchedules_PageShowsSkips(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.schedule(redisdelay.Schedule{ID: "sync", Spec: "@every 200ms", Topic: "sync.run", Overlap: redisdelay.OverlapSkip})
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: e.client}, watermill.NopLogger{})
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	var s redisdelay.Schedule
	require.Eventually(t, func() bool { s, _ = e.scheduleOf("sync"); return s.Skipped >= 2 }, 10*time.Second, 50*time.Millisecond)
	_, body := e.get("/schedules")
	assert.Regexp(t, `unfinished">skip<br><span class="muted">\d+ skipped, last \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</span>`, body)
}
