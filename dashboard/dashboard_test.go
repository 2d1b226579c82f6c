package dashboard_test

// The handler against a real redis-server of its own (internal/redistest),
// through net/http/httptest; the browser test is in browsertest/.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/dashboard"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

type env struct {
	t      *testing.T
	redis  *redistest.Server
	dialTo *atomic.Value // the address the client dials (see stopRedis)
	client *redis.Client
	insp   *redisdelay.Inspector
	pub    *redisdelay.Publisher
	srv    *httptest.Server
	http   *http.Client
}

func newEnv(t *testing.T, opts dashboard.Options) *env {
	t.Helper()
	s := redistest.ForTest(t, redistest.Options{KillWithParent: true})
	dialTo := &atomic.Value{}
	dialTo.Store(s.Addr)
	var dialer net.Dialer
	client := redis.NewClient(&redis.Options{Addr: s.Addr,
		MaxRetries: -1, // TestPages_Errors stops Redis: fail at once
		// stopRedis sends new connections to a port that refuses them.
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, dialTo.Load().(string))
		},
	})
	t.Cleanup(func() { _ = client.Close() })
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	require.NoError(t, err)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	mux := http.NewServeMux()
	h := dashboard.New(insp, opts)
	if opts.BasePath != "" {
		mux.Handle(opts.BasePath+"/", h)
	} else {
		mux.Handle("/", h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return &env{t: t, redis: s, dialTo: dialTo, client: client, insp: insp, pub: pub, srv: srv, http: &http.Client{Jar: jar}}
}

// stopRedis stops the server; the client's connections are then refused.
// Its port would not do: once free, a server of a test running beside this
// one may take it.
func (e *env) stopRedis() {
	e.dialTo.Store("127.0.0.1:" + strconv.Itoa(redistest.RefusedPort(e.t)))
	e.redis.Stop()
}

func (e *env) get(path string) (int, string) {
	e.t.Helper()
	resp, err := e.http.Get(e.srv.URL + path)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *env) post(path string, form url.Values, header ...string) (int, string) {
	e.t.Helper()
	// The Origin a browser sends with the dashboard's forms, unless the
	// test gives its own.
	resp, body := e.do(http.MethodPost, path, "", form, append([]string{"Origin", e.srv.URL}, header...)...)
	return resp.StatusCode, body
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf reads the form token from a page.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	require.NotNil(t, m, "no csrf field in the page")
	return m[1]
}

func (e *env) publish(topic string, msgs ...*message.Message) {
	e.t.Helper()
	require.NoError(e.t, e.pub.Publish(topic, msgs...))
}

func later(d time.Duration, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	delay.Message(msg, delay.For(d))
	return msg
}

// deadLetters makes n dead letters in group g of topic: each message is
// nacked once by a subscriber allowed one attempt.
func (e *env) deadLetters(topic, group string, n int) []string {
	e.t.Helper()
	var msgs []*message.Message
	var uuids []string
	for i := range n {
		msg := message.NewMessage(watermill.NewUUID(), []byte("dead "+string(rune('a'+i))))
		msgs = append(msgs, msg)
		uuids = append(uuids, msg.UUID)
	}
	e.deadMessages(topic, group, msgs...)
	return uuids
}

func TestTopics_PageAndAPI(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	e.publish("orders", later(time.Hour, "a"), later(2*time.Hour, "b"))
	e.deadLetters("orders", "billing", 1)

	status, body := e.get("/")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `href="/topic?t=orders"`)
	assert.Contains(t, body, "billing")
	assert.Contains(t, body, `/static/app.js`)
	// The storage level, and the releases of the processes live (the
	// publisher above: this release).
	assert.Regexp(t, `id="storage">Storage level <b>3</b> written · processes live: \d+ of `+redisdelay.Version, body)

	status, body = e.get("/api/topics")
	require.Equal(t, http.StatusOK, status, body)
	var got struct {
		Topics []struct {
			Topic   string
			Waiting int64
			Groups  []struct {
				Group string
				Dead  int64
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Len(t, got.Topics, 1)
	assert.Equal(t, "orders", got.Topics[0].Topic)
	assert.EqualValues(t, 2, got.Topics[0].Waiting)
	require.Len(t, got.Topics[0].Groups, 1)
	assert.EqualValues(t, 1, got.Topics[0].Groups[0].Dead)

	status, body = e.get("/static/app.css")
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, ".w100")
	status, _ = e.get("/nope")
	assert.Equal(t, http.StatusNotFound, status)
}

func TestTopic_HistogramAndPaging(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	var msgs []*message.Message
	for i := range 60 {
		msgs = append(msgs, later(time.Duration(i+1)*time.Hour, "m"))
	}
	msgs[0].Metadata.Set(redisdelay.BusinessKey, "order-42")
	e.publish("orders", msgs...)

	status, body := e.get("/topic?t=orders")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, msgs[0].UUID, "first page, due order")
	assert.NotContains(t, body, msgs[59].UUID)
	assert.Contains(t, body, "order-42")
	assert.Contains(t, body, "messages 1–50 of 60")
	assert.Contains(t, body, `id="next" href="/topic?offset=50&amp;t=orders"`)
	status, body = e.get("/topic?t=orders&offset=50")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, msgs[59].UUID)
	assert.Contains(t, body, "messages 51–60 of 60")

	status, body = e.get("/api/topic?t=orders")
	require.Equal(t, http.StatusOK, status, body)
	var got struct {
		Histogram []struct {
			Label string
			Count int64
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	counts := map[string]int64{}
	for _, b := range got.Histogram {
		counts[b.Label] = b.Count
	}
	// Due 1..60 hours after publishing, so a hair earlier after now: 1 h
	// lands in 15–60 min, 6 h in 1–6 h, 24 h in 6–24 h.
	assert.EqualValues(t, 1, counts["15–60 min"])
	assert.EqualValues(t, 5, counts["1–6 h"])
	assert.EqualValues(t, 18, counts["6–24 h"])
	assert.EqualValues(t, 36, counts["1–7 days"])
	assert.Len(t, got.Histogram, 10)

	// Grouped messages (SetGroup) a Manager queued in their groups for a
	// consumer group nobody consumes: the Grouped and Active groups columns
	// of the consumer group table, and the JSON the live refresh reads.
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: e.client, ConsumerGroup: "billing", DisableScheduler: true}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	require.NoError(t, sub.SubscribeInitialize("orders"))
	_, page := e.get("/topic?t=orders")
	assert.Regexp(t, `<th[^>]*>Grouped</th><th[^>]*>Active groups</th>`, page)
	assert.Regexp(t, `<td class="n grouped">0</td><td class="n active-groups">0</td>`, page)
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: e.client, Topics: []string{"orders"}}, watermill.NopLogger{})
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	for i, tenant := range []string{"tenant-1", "tenant-1", "tenant-2"} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint("job ", i)))
		redisdelay.SetGroup(msg, tenant)
		e.publish("orders", msg)
	}
	require.Eventually(t, func() bool {
		st, err := e.insp.Stats(context.Background(), "orders")
		return err == nil && st.Waiting == 60 && len(st.Groups) == 1 && st.Groups[0].Grouped == 3
	}, 10*time.Second, 20*time.Millisecond)
	status, page = e.get("/topic?t=orders")
	require.Equal(t, http.StatusOK, status, page)
	assert.Regexp(t, `<td><a class="group-link" href="/group\?g=billing&amp;t=orders">billing</a></td><td class="n"><a href="[^"]+">0</a></td>.*<td class="n grouped">3</td><td class="n active-groups">2</td>`, page)
	_, body = e.get("/api/topic?t=orders")
	assert.Contains(t, body, `"grouped":3,"active_groups":2`)

	status, body = e.get("/topic?t=nope")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, "topic &#34;nope&#34; is not known")
	status, _ = e.get("/topic")
	assert.Equal(t, http.StatusBadRequest, status)
	status, _ = e.get("/api/topic?t=nope")
	assert.Equal(t, http.StatusNotFound, status)
}

func TestMessage_SearchEscapesPayload(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	evil := later(time.Hour, `<script>alert("x")</script>`)
	evil.Metadata.Set(redisdelay.BusinessKey, `k<b>1</b>`)
	evil.Metadata.Set("note", `"><img src=x onerror=alert(1)>`)
	bin := later(time.Hour, "\x00\x01\xffbinary")
	e.publish("orders", evil, bin)

	status, body := e.get("/message?t=orders&q=" + evil.UUID)
	require.Equal(t, http.StatusOK, status, body)
	assert.NotContains(t, body, "<script>alert")
	assert.Contains(t, body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;")
	assert.NotContains(t, body, "<img src=x")
	assert.NotContains(t, body, "<b>1</b>")

	status, body = e.get("/message?t=orders&by=key&q=" + url.QueryEscape(`k<b>1</b>`))
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, evil.UUID)

	status, body = e.get("/message?t=orders&q=" + bin.UUID)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "hex dump")
	assert.Contains(t, body, "00 01 ff 62 69 6e 61 72  79")

	status, body = e.get("/message?t=orders&q=no-such")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, "is in topic <code>orders</code> in any state")
	status, body = e.get("/message?t=orders&q=")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "nothing to search for")
	status, body = e.get("/message?t=orders&by=color&q=x")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "use uuid or key")
}

func TestMessage_CancelConfirmAndToken(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	msg := later(time.Hour, "x")
	e.publish("orders", msg)
	_, page := e.get("/message?t=orders&q=" + msg.UUID)
	tok := csrf(t, page)
	assert.Contains(t, page, `id="cancel"`)

	form := url.Values{"t": {"orders"}, "uuid": {msg.UUID}}
	status, body := e.post("/cancel", form)
	assert.Equal(t, http.StatusForbidden, status, "no token")
	assert.Contains(t, body, "token is missing or stale")
	form.Set("csrf", "0123456789abcdef0123456789abcdef")
	status, _ = e.post("/cancel", form)
	assert.Equal(t, http.StatusForbidden, status, "wrong token")
	form.Set("csrf", tok)
	status, body = e.post("/cancel", form, "Origin", "https://evil.example")
	assert.Equal(t, http.StatusForbidden, status, "another site")
	assert.Contains(t, body, "does not come from this dashboard")

	status, body = e.post("/cancel", form, "Origin", e.srv.URL)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "Please confirm")
	assert.Contains(t, body, `name="confirm" value="yes"`)
	_, ok, err := e.insp.FindWaiting(context.Background(), "orders", msg.UUID)
	require.NoError(t, err)
	assert.True(t, ok, "still waiting before the confirmation")

	form.Set("confirm", "yes")
	status, body = e.post("/cancel", form, "Origin", e.srv.URL)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "cancelled")
	_, ok, err = e.insp.FindWaiting(context.Background(), "orders", msg.UUID)
	require.NoError(t, err)
	assert.False(t, ok, "cancelled")
	_, body = e.post("/cancel", form)
	assert.Contains(t, body, "was not waiting any more")

	form.Set("uuid", "")
	status, body = e.post("/cancel", form)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "no message UUID given")
}

func TestDead_RequeueDelete(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	e.deadLetters("orders", "billing", 4)
	status, page := e.get("/dead?t=orders&g=billing")
	require.Equal(t, http.StatusOK, status, page)
	ids := regexp.MustCompile(`name="id" value="([^"]+)"`).FindAllStringSubmatch(page, -1)
	require.Len(t, ids, 4)
	assert.Contains(t, page, "dead a")
	tok := csrf(t, page)

	dead := func() int64 {
		st, err := e.insp.Stats(context.Background(), "orders")
		require.NoError(t, err)
		return st.Groups[0].Dead
	}
	form := url.Values{"csrf": {tok}, "t": {"orders"}, "g": {"billing"}, "action": {"requeue"}, "id": {ids[0][1], ids[1][1]}}
	status, body := e.post("/dead/action", form)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "Requeue 2 dead letter(s)")
	assert.EqualValues(t, 4, dead(), "nothing before the confirmation")
	form.Set("confirm", "yes")
	_, body = e.post("/dead/action", form)
	assert.Contains(t, body, "Requeued 2 dead letter(s)")
	assert.EqualValues(t, 2, dead())

	form = url.Values{"csrf": {tok}, "t": {"orders"}, "g": {"billing"}, "action": {"delete"}, "id": {ids[2][1]}, "confirm": {"yes"}}
	_, body = e.post("/dead/action", form)
	assert.Contains(t, body, "Deleted 1 dead letter(s)")
	assert.EqualValues(t, 1, dead())
	form.Set("action", "purge")
	form.Del("id")
	_, body = e.post("/dead/action", form)
	assert.Contains(t, body, "Deleted 1 dead letter(s)")
	assert.EqualValues(t, 0, dead())

	form.Set("action", "delete")
	status, body = e.post("/dead/action", form)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "no dead letter selected")
	form.Set("action", "explode")
	status, body = e.post("/dead/action", form)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "unknown action")
	status, _ = e.get("/dead?t=orders&g=nope")
	assert.Equal(t, http.StatusNotFound, status)
}

func TestSecurity_ReadOnly(t *testing.T) {
	e := newEnv(t, dashboard.Options{ReadOnly: true})
	msg := later(time.Hour, "x")
	e.publish("orders", msg)
	e.deadLetters("orders", "billing", 1)
	_, page := e.get("/message?t=orders&q=" + msg.UUID)
	assert.Contains(t, page, `id="read-only"`)
	assert.NotContains(t, page, `id="cancel"`)
	_, page = e.get("/dead?t=orders&g=billing")
	assert.NotContains(t, page, `requeue-selected`)
	assert.NotContains(t, page, `name="id"`)

	status, body := e.post("/cancel", url.Values{"t": {"orders"}, "uuid": {msg.UUID}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, "read-only")
	status, _ = e.post("/dead/action", url.Values{"t": {"orders"}, "g": {"billing"}, "action": {"purge"}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusForbidden, status)
	_, ok, err := e.insp.FindWaiting(context.Background(), "orders", msg.UUID)
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestSecurity_AuthorizeAndBasePath(t *testing.T) {
	calls := 0
	e := newEnv(t, dashboard.Options{BasePath: "/ops/delay", Authorize: func(r *http.Request) error {
		calls++
		if r.Header.Get("X-Operator") == "" {
			return errors.New("operators only: log in first")
		}
		return nil
	}})
	e.publish("orders", later(time.Hour, "x"))
	status, body := e.get("/ops/delay/")
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, "operators only")
	status, _ = e.post("/ops/delay/cancel", url.Values{})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Equal(t, 2, calls)

	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/ops/delay/", nil)
	req.Header.Set("X-Operator", "ann")
	resp, err := e.http.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(b), `href="/ops/delay/topic?t=orders"`)
	assert.Contains(t, string(b), `src="/ops/delay/static/app.js"`)
	assert.Contains(t, string(b), `data-poll="/ops/delay/api/topics"`)
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		cookie = c
	}
	require.NotNil(t, cookie)
	assert.Equal(t, "/ops/delay", cookie.Path)
}

func TestPages_Errors(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	msg := later(time.Hour, "x")
	e.publish("orders", msg)
	_, page := e.get("/message?t=orders&q=" + msg.UUID)
	tok := csrf(t, page)

	big := url.Values{"csrf": {tok}, "t": {"orders"}, "uuid": {strings.Repeat("x", 2<<20)}}
	status, body := e.post("/cancel", big)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, "a body past 1 MiB is refused as too large (issue 47)")
	assert.Contains(t, body, "cannot read the form")

	e.stopRedis()
	status, body = e.get("/")
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, "connection refused")
	status, body = e.get("/api/topics")
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, `"error":`)
	status, _ = e.get("/topic?t=orders")
	assert.Equal(t, http.StatusBadGateway, status)
	status, _ = e.post("/cancel", url.Values{"csrf": {tok}, "t": {"orders"}, "uuid": {"u"}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusBadGateway, status)
	status, body = e.post("/reschedule", url.Values{"csrf": {tok}, "t": {"orders"}, "uuid": {"u"}, "in": {"1m"}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, "connection refused")
	status, _ = e.post("/group", url.Values{"csrf": {tok}, "t": {"orders"}, "g": {"billing"}, "action": {"resume"}})
	assert.Equal(t, http.StatusBadGateway, status)
}

// xinfoStreamCalls counts XINFO STREAM commands Redis has run: only the
// charts' sampler (Inspector.Counters) sends them.
func (e *env) xinfoStreamCalls() int64 {
	e.t.Helper()
	info, err := e.client.Info(context.Background(), "commandstats").Result()
	require.NoError(e.t, err)
	m := regexp.MustCompile(`cmdstat_xinfo\|stream:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	var n int64
	_, _ = fmt.Sscan(m[1], &n)
	return n
}

func (e *env) totalCommands() int64 {
	e.t.Helper()
	info, err := e.client.Info(context.Background(), "stats").Result()
	require.NoError(e.t, err)
	m := regexp.MustCompile(`total_commands_processed:(\d+)`).FindStringSubmatch(info)
	require.NotNil(e.t, m)
	var n int64
	_, _ = fmt.Sscan(m[1], &n)
	return n
}

type chartJSON struct {
	ID    string `json:"id"`
	YMax  string `json:"ymax"`
	Empty string `json:"empty"`
	Lines []struct {
		Name, Points, Last string
	} `json:"lines"`
}

func (e *env) charts(topic string) []chartJSON {
	e.t.Helper()
	status, body := e.get("/api/topic?t=" + url.QueryEscape(topic))
	require.Equal(e.t, http.StatusOK, status, body)
	var out struct{ Charts []chartJSON }
	require.NoError(e.t, json.Unmarshal([]byte(body), &out))
	return out.Charts
}

// TestCharts_SampleOnlyWhileWatched: nothing is sampled before a topic page
// is requested (an idle dashboard sends Redis nothing); once it is, the
// throughput and lateness charts fill with points at the sample interval
// and show the rate messages are made ready; 60 intervals after the last
// request the sampling stops again.
func TestCharts_SampleOnlyWhileWatched(t *testing.T) {
	const every = 50 * time.Millisecond
	e := newEnv(t, dashboard.Options{SampleEvery: every})
	const tp = "orders"
	e.publish(tp, later(time.Hour, "registers the topic"))

	before := e.xinfoStreamCalls()
	time.Sleep(10 * every)
	assert.Equal(t, before, e.xinfoStreamCalls(), "sampled before any page was requested")

	status, page := e.get("/topic?t=" + tp)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, `id="chart-throughput"`)
	assert.Contains(t, page, `id="chart-lateness"`)
	assert.Contains(t, page, "messages/s")
	assert.Contains(t, page, "seconds overdue")
	assert.Contains(t, page, "Collecting: a sample every 50ms")

	// Traffic while sampling: 20 messages made ready over ~0.5 s.
	for range 10 {
		e.publish(tp, message.NewMessage(watermill.NewUUID(), []byte("now")), message.NewMessage(watermill.NewUUID(), []byte("now")))
		time.Sleep(every)
	}
	var charts []chartJSON
	require.Eventually(t, func() bool {
		charts = e.charts(tp)
		return len(charts) == 2 && strings.Count(charts[0].Lines[0].Points, ",") >= 5
	}, 5*time.Second, every, "no points after the page was requested")
	thr := charts[0]
	assert.Equal(t, "chart-throughput", thr.ID)
	assert.Empty(t, thr.Empty)
	assert.Equal(t, "made ready", thr.Lines[0].Name)
	assert.NotEqual(t, "1", thr.YMax, "20 messages in ~0.5 s: the y axis goes above 1/s")
	assert.Regexp(t, `/s$`, thr.Lines[0].Last)
	assert.Equal(t, "chart-lateness", charts[1].ID)
	assert.Regexp(t, `^\d+(\.\d)? s$`, charts[1].Lines[0].Last)
	status, page = e.get("/topic?t=" + tp)
	require.Equal(t, http.StatusOK, status)
	assert.Regexp(t, `<polyline class="l-ready" points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+`, page, "the page draws the line itself")

	// Idle: no request for 60 intervals (3 s), then nothing is sampled.
	time.Sleep(60*every + 10*every)
	idle := e.xinfoStreamCalls()
	cmds := e.totalCommands()
	time.Sleep(20 * every)
	// The second INFO counts the first one.
	t.Logf("FIGURE Redis commands in %s of an idle dashboard, besides the test's INFO: %d", 20*every, e.totalCommands()-cmds-1)
	assert.Equal(t, idle, e.xinfoStreamCalls(), "still sampling 60 intervals after the last request")
}

// TestCharts_Off: a negative SampleEvery draws no lines and never samples.
func TestCharts_Off(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.publish("orders", later(time.Hour, "x"))
	status, page := e.get("/topic?t=orders")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, "Not sampled: Options.SampleEvery is negative.")
	time.Sleep(100 * time.Millisecond)
	assert.Zero(t, e.xinfoStreamCalls())
}

// due reads the due time of a waiting message.
func (e *env) due(topic, uuid string) (time.Time, bool) {
	e.t.Helper()
	m, ok, err := e.insp.FindWaiting(context.Background(), topic, uuid)
	require.NoError(e.t, err)
	return m.Due, ok
}

// TestMessage_RescheduleConfirmAndResult: the message page's form, "deliver in" or
// "at", goes through a confirmation page, then moves the message and shows
// its new due time; a message no longer waiting is reported as such.
func TestMessage_RescheduleConfirmAndResult(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	msg := later(time.Hour, "x")
	msg.Metadata.Set(redisdelay.BusinessKey, "order-7")
	e.publish("orders", msg)
	status, page := e.get("/message?t=orders&q=" + msg.UUID)
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `action="/reschedule"`)
	assert.Contains(t, page, `id="reschedule"`)
	assert.Contains(t, page, `id="due"`)
	tok := csrf(t, page)
	before, _ := e.due("orders", msg.UUID)

	form := url.Values{"csrf": {tok}, "t": {"orders"}, "uuid": {msg.UUID}, "in": {"10m"}}
	status, body := e.post("/reschedule", form)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "Please confirm")
	assert.Contains(t, body, "in 10m0s")
	assert.Contains(t, body, `name="in" value="10m"`)
	got, _ := e.due("orders", msg.UUID)
	assert.Equal(t, before, got, "moved before the confirmation")

	form.Set("confirm", "yes")
	start := time.Now()
	status, body = e.post("/reschedule", form)
	require.Equal(t, http.StatusOK, status, body)
	got, ok := e.due("orders", msg.UUID)
	require.True(t, ok)
	assert.WithinRange(t, got, start.Add(10*time.Minute-time.Second), time.Now().Add(10*time.Minute+time.Second))
	assert.Contains(t, body, "rescheduled")
	assert.Contains(t, body, got.UTC().Format("2006-01-02 15:04:05"), "the new due time")
	assert.Contains(t, body, `href="/message?q=`+msg.UUID+`&amp;t=orders"`, "back to the message")

	// At a UTC time; the zone-less forms are UTC.
	at := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	for _, s := range []string{at.Format("2006-01-02 15:04:05"), at.Format("2006-01-02T15:04:05"), at.Format(time.RFC3339)} {
		form = url.Values{"csrf": {tok}, "t": {"orders"}, "uuid": {msg.UUID}, "at": {s}, "confirm": {"yes"}}
		status, body = e.post("/reschedule", form)
		require.Equal(t, http.StatusOK, status, body)
		got, _ = e.due("orders", msg.UUID)
		// The delay is counted from Redis's now: never early, a hair late.
		assert.WithinRange(t, got, at, at.Add(100*time.Millisecond), s)
	}

	// By business key.
	form = url.Values{"csrf": {tok}, "t": {"orders"}, "key": {"order-7"}, "in": {"2h"}, "confirm": {"yes"}}
	status, body = e.post("/reschedule", form)
	require.Equal(t, http.StatusOK, status, body)
	got, _ = e.due("orders", msg.UUID)
	assert.WithinDuration(t, time.Now().Add(2*time.Hour), got, 2*time.Second)
	assert.Contains(t, body, "order-7")

	// No longer waiting.
	_, err := e.insp.Cancel(context.Background(), "orders", msg.UUID)
	require.NoError(t, err)
	form = url.Values{"csrf": {tok}, "t": {"orders"}, "uuid": {msg.UUID}, "in": {"5m"}, "confirm": {"yes"}}
	status, body = e.post("/reschedule", form)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "no longer waiting")
}

// TestMessage_RescheduleBadInput: what cannot be parsed answers 400 with what to
// type; a due time beyond the Inspector's limit shows its error.
func TestMessage_RescheduleBadInput(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	msg := later(time.Hour, "x")
	e.publish("orders", msg)
	_, page := e.get("/message?t=orders&q=" + msg.UUID)
	tok := csrf(t, page)
	before, _ := e.due("orders", msg.UUID)

	for _, c := range []struct {
		name  string
		form  url.Values
		code  int
		error string
	}{
		{"unparsable duration", url.Values{"in": {"ten minutes"}}, 400, `&#34;ten minutes&#34; is not a duration: use a number with a unit, such as 90s, 10m or 2h30m`},
		{"negative duration", url.Values{"in": {"-5m"}}, 400, "is negative"},
		{"unparsable time", url.Values{"at": {"tomorrow"}}, 400, `&#34;tomorrow&#34; is not a time: use UTC such as 2030-01-02 15:04:05, or RFC 3339 with a zone`},
		{"both", url.Values{"in": {"5m"}, "at": {"2030-01-02 15:04:05"}}, 400, "either"},
		{"neither", url.Values{}, 400, "no new due time"},
		{"no message", url.Values{"uuid": {""}, "in": {"5m"}}, 400, "no message UUID or business key given"},
		{"unknown topic", url.Values{"t": {"nope"}, "in": {"5m"}}, 404, "not known"},
		{"beyond 100 years (in)", url.Values{"in": {"1000000h"}}, 400, "beyond the limit of 100 years"},
		{"beyond 100 years (at)", url.Values{"at": {"2200-01-01 00:00:00"}}, 400, "beyond the limit of 100 years"},
	} {
		t.Run(c.name, func(t *testing.T) {
			form := url.Values{"csrf": {tok}, "t": {"orders"}, "uuid": {msg.UUID}, "confirm": {"yes"}}
			for k, v := range c.form {
				form[k] = v
			}
			status, body := e.post("/reschedule", form)
			assert.Equal(t, c.code, status, body)
			assert.Contains(t, body, c.error)
		})
	}
	got, ok := e.due("orders", msg.UUID)
	require.True(t, ok)
	assert.Equal(t, before, got, "a refused reschedule moved the message")
}

// subscribe makes group g of topic exist, with a subscriber closed at the
// end of the test.
func (e *env) subscribe(topic, group string) {
	e.t.Helper()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: e.client, ConsumerGroup: group}, watermill.NopLogger{})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = sub.Close() })
	_, err = sub.Subscribe(context.Background(), topic)
	require.NoError(e.t, err)
	require.Eventually(e.t, func() bool {
		st, err := e.insp.Stats(context.Background(), topic)
		return err == nil && len(st.Groups) == 1
	}, 5*time.Second, 20*time.Millisecond)
}

// TestGroup_PauseResume: pause after a confirmation, the badge on both pages and
// in both JSON endpoints, resume at once.
func TestGroup_PauseResume(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	e.publish("orders", later(time.Hour, "x"))
	e.subscribe("orders", "billing")
	paused := func() bool {
		ok, err := e.insp.Paused(context.Background(), "orders", "billing")
		require.NoError(t, err)
		return ok
	}
	badge := `class="tag paused"`
	status, page := e.get("/topic?t=orders")
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `data-group="billing"`)
	assert.Contains(t, page, `value="pause"`)
	assert.NotContains(t, page, badge)
	tok := csrf(t, page)

	form := url.Values{"csrf": {tok}, "t": {"orders"}, "g": {"billing"}, "action": {"pause"}}
	status, body := e.post("/group", form)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "Please confirm")
	assert.Contains(t, body, `Pause consumer group &#34;billing&#34;`)
	assert.False(t, paused(), "paused before the confirmation")
	form.Set("confirm", "yes")
	status, body = e.post("/group", form)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "Paused consumer group")
	assert.True(t, paused())

	_, page = e.get("/topic?t=orders")
	assert.Contains(t, page, badge)
	assert.Contains(t, page, `value="resume"`)
	_, page = e.get("/")
	assert.Contains(t, page, badge)
	for _, api := range []string{"/api/topic?t=orders", "/api/topics"} {
		_, body = e.get(api)
		assert.Contains(t, body, `"paused":true`, api)
	}

	// Resume needs no confirmation: it only undoes a pause.
	status, body = e.post("/group", url.Values{"csrf": {tok}, "t": {"orders"}, "g": {"billing"}, "action": {"resume"}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "Resumed consumer group")
	assert.False(t, paused())
	_, body = e.post("/group", url.Values{"csrf": {tok}, "t": {"orders"}, "g": {"billing"}, "action": {"resume"}})
	assert.Contains(t, body, "was not paused")
	_, body = e.get("/api/topic?t=orders")
	assert.Contains(t, body, `"paused":false`)

	status, body = e.post("/group", url.Values{"csrf": {tok}, "t": {"orders"}, "g": {"nope"}, "action": {"pause"}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, `has no consumer group &#34;nope&#34;`)
	status, body = e.post("/group", url.Values{"csrf": {tok}, "t": {"orders"}, "g": {"billing"}, "action": {"stop"}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "use pause or resume")
	assert.False(t, paused())
}

// TestSecurity_ReadOnlyRescheduleAndPause: read-only hides the new forms, refuses
// their requests with 403, and still shows the paused badge.
func TestSecurity_ReadOnlyRescheduleAndPause(t *testing.T) {
	e := newEnv(t, dashboard.Options{ReadOnly: true})
	msg := later(time.Hour, "x")
	e.publish("orders", msg)
	e.subscribe("orders", "billing")
	require.NoError(t, e.insp.Pause(context.Background(), "orders", "billing"))
	before, _ := e.due("orders", msg.UUID)

	_, page := e.get("/message?t=orders&q=" + msg.UUID)
	assert.NotContains(t, page, `id="reschedule"`)
	_, page = e.get("/topic?t=orders")
	assert.NotContains(t, page, `data-group=`)
	assert.Contains(t, page, `class="tag paused"`)

	status, body := e.post("/reschedule", url.Values{"t": {"orders"}, "uuid": {msg.UUID}, "in": {"1m"}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, "read-only")
	status, _ = e.post("/group", url.Values{"t": {"orders"}, "g": {"billing"}, "action": {"resume"}})
	assert.Equal(t, http.StatusForbidden, status)
	got, _ := e.due("orders", msg.UUID)
	assert.Equal(t, before, got)
	ok, err := e.insp.Paused(context.Background(), "orders", "billing")
	require.NoError(t, err)
	assert.True(t, ok, "resumed in read-only mode")
}
