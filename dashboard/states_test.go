package dashboard_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/dashboard"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

func TestMain(m *testing.M) {
	// After an action that made messages due, the dashboard waits this
	// long for a scheduler to hold the topic's lease before it says none
	// does: most tests run none, and would wait 3 s per action.
	dashboard.SetSchedulerWait(200 * time.Millisecond)
	os.Exit(m.Run())
}

// TestSecurity_Authentication: with BasicAuth or BearerTokens, every request needs
// one of them, static files and the Host check's refusals aside.
func TestSecurity_Authentication(t *testing.T) {
	e := newEnv(t, dashboard.Options{BasicAuth: map[string]string{"alice": "correct-horse-battery"}, BearerTokens: []string{"token-of-the-monitoring-script"}})
	for _, path := range []string{"/", "/api/topics", "/static/app.js", "/schedules"} {
		resp, _ := e.do(http.MethodGet, path, "", nil)
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		assert.Equal(t, `Basic realm="redisdelay dashboard", charset="UTF-8"`, resp.Header.Get("WWW-Authenticate"))
	}
	for _, c := range []struct {
		header string
		want   int
	}{
		{"Basic " + basic("alice", "correct-horse-battery"), http.StatusOK},
		{"Basic " + basic("alice", "correct-horse-batterY"), http.StatusUnauthorized},
		{"Basic " + basic("bob", "correct-horse-battery"), http.StatusUnauthorized},
		{"Bearer token-of-the-monitoring-script", http.StatusOK},
		{"Bearer token-of-the-monitoring", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
	} {
		resp, body := e.do(http.MethodGet, "/api/topics", "", nil, "Authorization", c.header)
		assert.Equal(t, c.want, resp.StatusCode, "%s: %s", c.header, body)
	}
	// The Host check comes first: a rebound name gets 403 whatever it sends.
	resp, _ := e.do(http.MethodGet, "/", "rebind.example", nil, "Authorization", "Basic "+basic("alice", "correct-horse-battery"))
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)

	tokenOnly := newEnv(t, dashboard.Options{BearerTokens: []string{"token-of-the-monitoring-script"}})
	resp, _ = tokenOnly.do(http.MethodGet, "/", "", nil)
	assert.Equal(t, `Bearer realm="redisdelay dashboard"`, resp.Header.Get("WWW-Authenticate"))

	for _, c := range []struct {
		opts dashboard.Options
		want string
	}{
		{dashboard.Options{BasicAuth: map[string]string{"alice": "short"}}, `password of user "alice" has 5 characters: use at least 12`},
		{dashboard.Options{BasicAuth: map[string]string{"": "correct-horse-battery"}}, `BasicAuth user "": give a name that is not empty and has no ':'`},
		{dashboard.Options{BasicAuth: map[string]string{"a:b": "correct-horse-battery"}}, `BasicAuth user "a:b"`},
		{dashboard.Options{BearerTokens: []string{"tok"}}, "BearerTokens[0] has 3 characters: use at least 12"},
	} {
		assert.ErrorContains(t, c.opts.Validate(), c.want)
		assert.PanicsWithError(t, c.opts.Validate().Error(), func() { dashboard.New(e.insp, c.opts) })
	}
	assert.NoError(t, dashboard.Options{}.Validate())
}

func basic(user, pw string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pw)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestPages_ControlCharactersShown: control and bidi characters of metadata,
// keys and reasons show as escapes, not as boxes or reordered text.
func TestPages_ControlCharactersShown(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	msg := later(time.Hour, "x")
	msg.Metadata.Set("color\x07", "\x1b[31mred\u202etxt.exe")
	msg.Metadata.Set(redisdelay.BusinessKey, "key\x00zero")
	e.publish("orders", msg)
	_, page := e.get("/message?t=orders&q=" + msg.UUID)
	assert.Contains(t, page, `<tr><th>color\a</th><td>\x1b[31mred\u202etxt.exe</td></tr>`)
	assert.Contains(t, page, `<td>key\x00zero</td>`)
	assert.NotContains(t, page, "\x1b")
	assert.NotContains(t, page, "\u202e")
	_, page = e.get("/topic?t=orders")
	assert.Contains(t, page, `<td>key\x00zero</td>`)
	assert.NotContains(t, page, "\x00")
}

// TestGroup_Page: a group's ready, pending and retrying messages and its
// consumers, paged.
func TestGroup_Page(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	ctx := context.Background()
	e.subscribe("orders", "billing") // the group, and its subscriber
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: e.client, ConsumerGroup: "audit", DisableScheduler: true}, watermill.NopLogger{})
	require.NoError(t, err)
	subCtx, stop := context.WithCancel(ctx)
	_, err = sub.Subscribe(subCtx, "orders")
	require.NoError(t, err)
	stop()
	require.NoError(t, sub.Close())
	var uuids []string
	for n := range 60 {
		m := message.NewMessage(watermill.NewUUID(), []byte("job"))
		m.Metadata.Set("n", string(rune('a'+n%26)))
		uuids = append(uuids, m.UUID)
		e.publish("orders", m)
	}
	require.Eventually(t, func() bool {
		st, err := e.insp.Stats(ctx, "orders")
		for _, g := range st.Groups {
			if g.Group == "audit" {
				return err == nil && g.Ready == 60
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)

	status, page := e.get("/group?t=orders&g=audit")
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `class="current" aria-current="page" id="tab-ready"`)
	assert.Contains(t, page, uuids[0])
	assert.Contains(t, page, uuids[49])
	assert.NotContains(t, page, uuids[50])
	next := regexpFind(t, page, `id="next" href="([^"]+)"`)
	_, page = e.get(html.UnescapeString(next))
	assert.Contains(t, page, uuids[50])
	assert.Contains(t, page, uuids[59])
	assert.NotContains(t, page, `id="next"`)

	// A consumer that read one and died: pending, and a silent consumer.
	stream := store.Keys{Prefix: redisdelay.DefaultKeyPrefix}.Shard("orders", 0).Stream()
	require.NoError(t, e.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "audit", Consumer: "worker-9", Streams: []string{stream, ">"}, Count: 1, Block: -1}).Err())
	_, page = e.get("/group?t=orders&g=audit&view=pending")
	assert.Contains(t, page, "<code>worker-9</code>")
	assert.Contains(t, page, uuids[0])
	assert.Contains(t, page, "expires in ")
	_, page = e.get("/group?t=orders&g=audit&view=consumers")
	assert.Contains(t, page, "<code>worker-9</code>")
	assert.NotContains(t, page, `class="tag stuck"`, "its lease is new")
	// Stuck past twice the group's stored visibility timeout, shortened
	// here so that it passes within the test.
	require.NoError(t, e.client.HSet(ctx, store.Keys{Prefix: redisdelay.DefaultKeyPrefix}.Shard("orders", 0).Meta("audit"), "vis", 50).Err())
	require.Eventually(t, func() bool {
		_, page = e.get("/group?t=orders&g=audit&view=consumers")
		return strings.Contains(page, `<code>worker-9</code> <span class="tag stuck"`)
	}, 10*time.Second, 20*time.Millisecond)
	// The topic page and its JSON show the stuck consumer too.
	_, page = e.get("/topic?t=orders")
	assert.Contains(t, page, `<a class="tag stuck" href="/group?g=audit&amp;t=orders&amp;view=consumers" title="consumers holding messages with no lease renewal for twice the visibility timeout: worker-9">1 stuck</a>`)
	_, js := e.get("/api/topic?t=orders")
	assert.Contains(t, js, `"stuck":["worker-9"]`)
	_, page = e.get("/group?t=orders&g=audit&view=retrying")
	assert.Contains(t, page, "Nothing waits for a retry.")

	status, page = e.get("/group?t=orders&g=nope")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, page, "has no consumer group")
	status, _ = e.get("/group?t=orders&g=audit&view=bogus")
	assert.Equal(t, http.StatusBadRequest, status)
	status, _ = e.get("/group?t=orders&g=audit&cursor=garbage")
	assert.Equal(t, http.StatusBadRequest, status)

	// The topic page links each group's counts to its page.
	_, page = e.get("/topic?t=orders")
	assert.Contains(t, page, `href="/group?g=audit&amp;t=orders&amp;view=pending"`)
}

// TestMessage_RunNow: one message from its page, after a confirmation; matches of
// a search in bulk; refused when read-only.
func TestMessage_RunNow(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	msg := later(time.Hour, "x")
	e.publish("orders", msg)
	_, page := e.get("/message?t=orders&q=" + msg.UUID)
	assert.Contains(t, page, `id="run-now"`)
	form := url.Values{"csrf": {csrf(t, page)}, "t": {"orders"}, "uuid": {msg.UUID}}
	status, page := e.post("/runnow", form)
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "Please confirm")
	due, _ := e.due("orders", msg.UUID)
	assert.True(t, due.After(time.Now().Add(59*time.Minute)), "not run before the confirmation")
	form.Set("confirm", "yes")
	status, page = e.post("/runnow", form)
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "is due now")
	assert.Contains(t, page, "no scheduler holds this topic&#39;s lease", "no scheduler runs in this test")
	due, ok := e.due("orders", msg.UUID)
	require.True(t, ok, "still waiting: no scheduler")
	assert.WithinDuration(t, time.Now(), due, 5*time.Second)

	// In bulk, with a scheduler: the matches are delivered.
	acme, others := e.searchFixture()
	e.subscribe("orders", "billing")
	form = e.bulkForm(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}}, "runnow")
	status, page, _ = e.runBulk(form)
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "6 waiting messages of topic &#34;orders&#34; match")
	assert.Contains(t, page, "Run now them? Each becomes due at once")
	status, page, _ = e.runBulk(formOf(t, page, ""))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "Made due now 6 waiting messages of topic &#34;orders&#34;")
	assert.NotContains(t, page, "no scheduler holds")
	require.Eventually(t, func() bool {
		for _, id := range acme {
			if e.waitingNow("orders", id) {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
	for _, id := range others {
		assert.True(t, e.waitingNow("orders", id))
	}

	status, page = e.post("/runnow", url.Values{"csrf": {form.Get("csrf")}, "t": {"orders"}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, page, "no message UUID or business key given to run now")
	status, page = e.post("/runnow", url.Values{"csrf": {form.Get("csrf")}, "t": {"orders"}, "key": {"nope"}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, "Nothing changed: the message holding business key &#34;nope&#34; is no longer waiting")

	ro := newEnv(t, dashboard.Options{ReadOnly: true})
	ro.publish("orders", msg)
	_, page = ro.get("/message?t=orders&q=" + msg.UUID)
	assert.NotContains(t, page, `id="run-now"`)
	status, _ = ro.post("/runnow", url.Values{"t": {"orders"}, "uuid": {msg.UUID}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusForbidden, status)
}

// TestCharts_ServerAndCharts: the topics page shows the server; the topic page's
// charts are a line each until two samples exist.
func TestCharts_ServerAndCharts(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: time.Hour})
	e.publish("orders", later(time.Hour, "x"))
	_, page := e.get("/")
	assert.Regexp(t, `<p class="server" id="server">(redis|valkey) \d+\.\d+\.\d+ \(standalone\) · up \S+ · memory [\d.]+ [KMG]?B used, no maxmemory · maxmemory-policy <b id="policy">noeviction</b></p>`, page)
	assert.NotContains(t, page, `id="policy-alert"`)
	require.NoError(t, e.client.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru").Err())
	_, page = e.get("/")
	assert.Contains(t, page, `id="policy-alert"`)
	assert.Contains(t, page, "lost without an error")

	_, page = e.get("/topic?t=orders")
	assert.Contains(t, page, `<figure class="chart collecting" id="chart-throughput">`)
	assert.Contains(t, page, `<p class="collect-note">Collecting: a sample every 1h0m0s`)
	_, css := e.get("/static/app.css")
	assert.Contains(t, css, ".chart.collecting svg, .chart.collecting .legend { display: none; }")
}

func regexpFind(t *testing.T, s, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	require.NotNil(t, m, "no %s in the page", re)
	return m[1]
}

// TestSchedules_OverdueAndLastTick: the schedules page warns of a next
// tick no scheduler published, and shows the tick published last.
func TestSchedules_OverdueAndLastTick(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	e.schedule(redisdelay.Schedule{ID: "report", Spec: "@every 1h", Topic: "reports"})
	_, page := e.get("/schedules")
	assert.NotContains(t, page, `id="ticks-alert"`)
	assert.Contains(t, page, "none recorded")

	next := store.Keys{Prefix: redisdelay.DefaultKeyPrefix}.Schedules().Next()
	require.NoError(t, e.client.ZAdd(context.Background(), next, redis.Z{Score: float64(time.Now().Add(-5 * time.Minute).UnixMilli()), Member: "report"}).Err())
	require.NoError(t, e.insp.TriggerSchedule(context.Background(), "report"))
	_, page = e.get("/schedules")
	assert.Contains(t, page, `id="ticks-alert"`)
	assert.Contains(t, page, "The next tick of 1 schedule(s) is overdue")
	assert.Contains(t, page, `<span class="tag overdue" title="not published: no scheduler runs">overdue by 5m0s</span>`)
	assert.NotContains(t, page, "none recorded", "the trigger is the last tick")
	assert.Regexp(t, `<td class="last nowrap">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC<br><span class="muted">\d+s ago</span></td>`, page)
}
