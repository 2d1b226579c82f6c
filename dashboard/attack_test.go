package dashboard_test

// The attacks of issue 47's review: a form from another port of the
// dashboard's host, a planted token, deep paging and bursts of expensive
// reads, cross-site GETs, password guessing.

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/dashboard"

	"github.com/redisdelay/watermill-redisdelay/internal/testkit"
)

// cancelForm publishes a message and returns a cancel form for it with a
// token of the env's jar, and a function telling whether it still waits.
func (e *env) cancelForm() (url.Values, func() bool) {
	e.t.Helper()
	msg := later(time.Hour, "x")
	e.publish("orders", msg)
	_, page := e.get("/message?t=orders&q=" + msg.UUID)
	form := url.Values{"csrf": {csrf(e.t, page)}, "t": {"orders"}, "uuid": {msg.UUID}, "confirm": {"yes"}}
	return form, func() bool { return e.waitingNow("orders", msg.UUID) }
}

// publishOne publishes a message to orders and returns its UUID.
func (e *env) publishOne() string {
	msg := later(time.Hour, "x")
	e.publish("orders", msg)
	return msg.UUID
}

// TestSecurity_CrossPortOrigin: a form whose Origin is another port of the
// dashboard's host is refused, also when AllowedHosts names the host
// without a port (as redisdelay ui did with the address it listens on);
// the same port, or the one listed, is served.
func TestSecurity_CrossPortOrigin(t *testing.T) {
	e := newEnv(t, dashboard.Options{AllowedHosts: []string{"127.0.0.1", "ops.example.com", "intranet.example:8443"}})
	form, waiting := e.cancelForm()
	for _, origin := range []string{"http://127.0.0.1:49999", "https://127.0.0.1:8443", "http://ops.example.com:8080", "https://intranet.example"} {
		status, body := e.post("/cancel", form, "Origin", origin)
		assert.Equal(t, http.StatusForbidden, status, "%s: %s", origin, body)
		require.True(t, waiting(), "cancelled by a form of %s", origin)
	}
	// A Referer from another port, without Origin, neither.
	resp, _ := e.do(http.MethodPost, "/cancel", "", form, "Referer", "http://127.0.0.1:49999/page")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.True(t, waiting())
	// Over TLS the scheme counts: a proxy saying http, Origin https.
	resp, _ = e.do(http.MethodPost, "/cancel", "", form, "Origin", "https://127.0.0.1:"+e.port(), "X-Forwarded-Proto", "http")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.True(t, waiting())

	for _, origin := range []string{"https://ops.example.com", "http://ops.example.com:80", "https://intranet.example:8443", e.srv.URL} {
		form, waiting := e.cancelForm()
		status, body := e.post("/cancel", form, "Origin", origin)
		assert.Equal(t, http.StatusOK, status, "%s: %s", origin, body)
		assert.False(t, waiting(), "not cancelled from %s", origin)
	}
}

// TestSecurity_PlantedToken: a cookie planted by another page (cookies
// ignore ports) with the same value in the form does not pass: the token
// must be one the dashboard signed. One signed for other credentials
// neither.
func TestSecurity_PlantedToken(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	form, waiting := e.cancelForm()
	planted := "0123456789abcdef0123456789abcdef"
	for _, tok := range []string{planted, planted + planted, strings.Repeat("A", 64)} {
		form.Set("csrf", tok)
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/cancel", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", e.srv.URL)
		req.AddCookie(&http.Cookie{Name: "redisdelay_csrf", Value: tok})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, tok)
		require.True(t, waiting(), "cancelled with the planted token %s", tok)
	}

	// Planted beside the real one, sent first for its longer Path, it does
	// not lock the operator out either.
	form, waiting = e.cancelForm()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/cancel", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.srv.URL)
	req.Header.Set("Cookie", "redisdelay_csrf="+planted+planted+"; redisdelay_csrf="+form.Get("csrf"))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.False(t, waiting(), "a planted cookie beside the real one locked the operator out")

	// With a login, a token is bound to the credentials it was served with.
	users := map[string]string{"alice": "correct-horse-battery", "mallory": "another-long-password"}
	e = newEnv(t, dashboard.Options{BasicAuth: users})
	msg := later(time.Hour, "x")
	e.publish("orders", msg)
	req, _ = http.NewRequest(http.MethodGet, e.srv.URL+"/message?t=orders&q="+msg.UUID, nil)
	req.SetBasicAuth("mallory", users["mallory"])
	resp, err = e.http.Do(req)
	require.NoError(t, err)
	var page bytes.Buffer
	_, _ = page.ReadFrom(resp.Body)
	resp.Body.Close()
	form = url.Values{"csrf": {csrf(t, page.String())}, "t": {"orders"}, "uuid": {msg.UUID}, "confirm": {"yes"}}
	req, _ = http.NewRequest(http.MethodPost, e.srv.URL+"/cancel", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.srv.URL)
	req.SetBasicAuth("alice", users["alice"])
	resp, err = e.http.Do(req) // the jar holds mallory's cookie
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a token served to mallory, used with alice's login")
	assert.True(t, e.waitingNow("orders", msg.UUID))
}

// TestSecurity_SecFetchSite: the browser's Sec-Fetch-Site decides where it
// is sent: an action from anything but the same origin is refused, token
// and Origin right or not; the pages that read messages, and the topic's
// JSON, are refused to another site or another port of this host, served
// to a link typed or bookmarked.
func TestSecurity_SecFetchSite(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	e.subscribe("orders", "billing")
	form, waiting := e.cancelForm()
	for _, site := range []string{"same-site", "cross-site", "none"} {
		status, body := e.post("/cancel", form, "Sec-Fetch-Site", site)
		assert.Equal(t, http.StatusForbidden, status, "%s: %s", site, body)
		assert.Contains(t, body, "Sec-Fetch-Site: "+site)
		require.True(t, waiting(), "cancelled with Sec-Fetch-Site: %s", site)
	}
	status, body := e.post("/cancel", form, "Sec-Fetch-Site", "same-origin")
	assert.Equal(t, http.StatusOK, status, body)
	assert.False(t, waiting())

	for _, path := range []string{"/topic?t=orders", "/topic?t=orders&offset=50", "/api/topic?t=orders", "/search?t=orders&s=1",
		"/message?t=orders&q=" + e.publishOne(), "/dead?t=orders&g=billing", "/group?t=orders&g=billing", "/schedules"} {
		for _, site := range []string{"cross-site", "same-site"} {
			resp, body := e.do(http.MethodGet, path, "", nil, "Sec-Fetch-Site", site, "Sec-Fetch-Dest", "image")
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s", path, site)
			assert.Contains(t, body, "Sec-Fetch-Site: "+site, path)
			assert.Empty(t, resp.Header.Values("Set-Cookie"), "no token for another site")
		}
		for _, site := range []string{"", "none", "same-origin"} {
			resp, body := e.do(http.MethodGet, path, "", nil, "Sec-Fetch-Site", site)
			assert.Equal(t, http.StatusOK, resp.StatusCode, "%s %q: %s", path, site, body)
		}
	}
	// The topics list stays reachable from a link of another site.
	resp, _ := e.do(http.MethodGet, "/", "", nil, "Sec-Fetch-Site", "cross-site")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestSecurity_DeepOffset: the topic page lists waiting messages down to
// an offset cap, refusing deeper ones with a pointer to the search by due
// time, and links no next page past it.
func TestSecurity_DeepOffset(t *testing.T) {
	defer dashboard.SetMaxOffset(100)()
	e := newEnv(t, dashboard.Options{})
	for i := range 200 {
		e.publish("orders", later(time.Hour+time.Duration(i)*time.Second, "x"))
	}
	status, page := e.get("/topic?t=orders&offset=50")
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `id="next"`)
	status, page = e.get("/topic?t=orders&offset=100")
	require.Equal(t, http.StatusOK, status, page)
	assert.NotContains(t, page, `id="next"`, "no link past the cap")
	status, page = e.get("/topic?t=orders&offset=150")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, page, "offset 150 is past the deepest page the dashboard lists (offset 100)")
	assert.Contains(t, page, "search the topic by due time")

	defer dashboard.SetMaxOffset(10_000)()
	status, _ = e.get("/topic?t=orders&offset=300000")
	assert.Equal(t, http.StatusBadRequest, status, "the default cap")
}

// TestSecurity_HeavyReadsCapped: past the pages that read messages allowed
// at once, a page waits a little, then is refused with 503 and
// Retry-After rather than pile up on Redis. Redis paused (CLIENT PAUSE)
// holds the first.
func TestSecurity_HeavyReadsCapped(t *testing.T) {
	defer dashboard.SetHeavy(1, 200*time.Millisecond)()
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.publish("orders", later(time.Hour, "x"))
	status, page := e.get("/topic?t=orders")
	require.Equal(t, http.StatusOK, status, page)

	require.NoError(t, e.client.Do(context.Background(), "CLIENT", "PAUSE", "1500", "ALL").Err())
	type answer struct {
		status int
		retry  string
		body   string
	}
	answers := make(chan answer, 4)
	var wg sync.WaitGroup
	start := time.Now()
	for n := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if n > 0 {
				time.Sleep(50 * time.Millisecond) // the first holds the slot
			}
			resp, body := e.do(http.MethodGet, "/search?t=orders&s=1&key=x", "", nil)
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), body}
		}()
	}
	wg.Wait()
	close(answers)
	var ok, busy int
	for a := range answers {
		switch a.status {
		case http.StatusOK:
			ok++
		case http.StatusServiceUnavailable:
			busy++
			assert.Equal(t, "5", a.retry)
			assert.Contains(t, a.body, "the dashboard is busy: 1 pages that read messages are running")
		default:
			t.Errorf("status %d: %s", a.status, a.body)
		}
	}
	assert.Equal(t, 1, ok, "the first, once Redis answers")
	assert.Equal(t, 3, busy, "the others, after 200 ms in line")
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "Redis was paused")
	status, page = e.get("/topic?t=orders")
	assert.Equal(t, http.StatusOK, status, page)
}

// TestSecurity_FailedLogins: wrong credentials are logged, once per address
// every 10 s with the count, and past five in a row answered later and
// later; a right login is not slowed, a request without credentials is no
// failure. "bearer" is Bearer in any case (RFC 7235).
func TestSecurity_FailedLogins(t *testing.T) {
	var logs testkit.SyncBuffer
	e := newEnv(t, dashboard.Options{BasicAuth: map[string]string{"alice": "correct-horse-battery"}, BearerTokens: []string{"token-of-the-monitoring-script"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	get := func(set func(*http.Request)) (int, time.Duration) {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/api/topics", nil)
		set(req)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		status, _ := get(func(r *http.Request) { r.Header.Set("Authorization", scheme+" token-of-the-monitoring-script") })
		assert.Equal(t, http.StatusOK, status, scheme)
	}
	status, _ := get(func(*http.Request) {})
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Empty(t, logs.String(), "no credentials is no failed login")

	var took []time.Duration
	for range 7 {
		status, d := get(func(r *http.Request) { r.SetBasicAuth("alice", "wrong-password-12") })
		assert.Equal(t, http.StatusUnauthorized, status)
		took = append(took, d)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 1, "one line per address every 10 s: %s", logs.String())
	assert.Contains(t, lines[0], "failed login")
	assert.Contains(t, lines[0], "remote=127.0.0.1")
	assert.Contains(t, lines[0], "scheme=basic")
	assert.NotContains(t, logs.String(), "wrong-password-12")
	step := dashboard.FailDelay()
	assert.Less(t, took[4], step, "the fifth failure is not slowed: %v", took)
	assert.GreaterOrEqual(t, took[5], step, "the sixth waits one step: %v", took)
	assert.GreaterOrEqual(t, took[6], 2*step, "the seventh two: %v", took)
	status, d := get(func(r *http.Request) { r.SetBasicAuth("alice", "correct-horse-battery") })
	assert.Equal(t, http.StatusOK, status)
	assert.Less(t, d, step, "a right login is not slowed")
}

// TestSecurity_CSRFKeySharedByReplicas: replicas given the same CSRFKey
// accept each other's tokens; another key refuses them; a short key is
// invalid.
func TestSecurity_CSRFKeySharedByReplicas(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	e := newEnv(t, dashboard.Options{CSRFKey: key})
	form, waiting := e.cancelForm()
	post := func(h http.Handler) int {
		srv := httptest.NewServer(h)
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/cancel", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", srv.URL)
		req.AddCookie(&http.Cookie{Name: "redisdelay_csrf", Value: form.Get("csrf")})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusForbidden, post(dashboard.New(e.insp, dashboard.Options{CSRFKey: []byte(strings.Repeat("o", 32))})), "another key")
	assert.Equal(t, http.StatusForbidden, post(dashboard.New(e.insp, dashboard.Options{})), "a random key")
	require.True(t, waiting())
	assert.Equal(t, http.StatusOK, post(dashboard.New(e.insp, dashboard.Options{CSRFKey: key})), "the same key")
	assert.False(t, waiting())
	assert.ErrorContains(t, dashboard.Options{CSRFKey: []byte("short")}.Validate(), "CSRFKey has 5 bytes: use at least 32")
}
