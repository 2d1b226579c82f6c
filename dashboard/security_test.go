package dashboard_test

// The defences of the handler against other sites: the Host header (DNS
// rebinding), the Origin and Referer of actions, and the cookie's Secure
// flag behind a TLS-terminating proxy.

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/dashboard"
)

// do sends a request to the dashboard with the given Host header and
// headers (pairs of name and value), through the env's cookie jar.
func (e *env) do(method, path, host string, form url.Values, header ...string) (*http.Response, string) {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	require.NoError(e.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if host != "" {
		req.Host = host
	}
	for n := 0; n+1 < len(header); n += 2 {
		req.Header.Set(header[n], header[n+1])
	}
	resp, err := e.http.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (e *env) port() string {
	u, _ := url.Parse(e.srv.URL)
	return u.Port()
}

// TestSecurity_HostRebinding: a page of another name that resolves to the
// dashboard's address (DNS rebinding) gets neither the pages, nor the
// token, nor the actions; loopback names and addresses are served.
func TestSecurity_HostRebinding(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	msg := later(time.Hour, "secret payload")
	e.publish("orders", msg)
	e.subscribe("orders", "billing")
	_, page := e.get("/topic?t=orders")
	tok := csrf(t, page)

	evil := "rebind.attacker.example:" + e.port()
	for _, path := range []string{"/", "/topic?t=orders", "/api/topics", "/message?t=orders&q=" + msg.UUID, "/static/app.js"} {
		resp, body := e.do(http.MethodGet, path, evil, nil)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, path)
		assert.NotContains(t, body, "secret payload", path)
		assert.NotContains(t, body, `name="csrf"`, path)
		assert.Empty(t, resp.Header.Values("Set-Cookie"), path)
		assert.Contains(t, body, `Host "rebind.attacker.example:`+e.port()+`"`, path)
		assert.Contains(t, body, "AllowedHosts", path)
	}
	form := url.Values{"csrf": {tok}, "t": {"orders"}, "g": {"billing"}, "action": {"pause"}, "confirm": {"yes"}}
	resp, _ := e.do(http.MethodPost, "/group", evil, form, "Origin", "http://"+evil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	paused, err := e.insp.Paused(context.Background(), "orders", "billing")
	require.NoError(t, err)
	assert.False(t, paused, "paused through a rebound name")

	for _, host := range []string{"localhost:" + e.port(), "LOCALHOST", "127.0.0.1:" + e.port(), "127.1.2.3", "[::1]:" + e.port(), "localhost.:" + e.port()} {
		resp, body := e.do(http.MethodGet, "/topic?t=orders", host, nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode, host)
		assert.Contains(t, body, msg.UUID, host)
	}
	for _, host := range []string{"localhost.attacker.example", "127.0.0.1.attacker.example", "10.0.0.1:" + e.port(), "[::2]"} {
		resp, _ := e.do(http.MethodGet, "/", host, nil)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, host)
	}
}

// TestSecurity_HostRebindingBehindAuthorize: Authorize does not lift the Host check,
// and is not consulted for a refused Host.
func TestSecurity_HostRebindingBehindAuthorize(t *testing.T) {
	calls := 0
	e := newEnv(t, dashboard.Options{Authorize: func(*http.Request) error { calls++; return nil }})
	resp, body := e.do(http.MethodGet, "/", "rebind.attacker.example", nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, body, `Host "rebind.attacker.example"`)
	assert.Equal(t, 0, calls)
	resp, _ = e.do(http.MethodGet, "/", "", nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 1, calls)
}

// TestSecurity_AllowedHosts: the names listed are served, with any port or the one
// given; "*" turns the check off.
func TestSecurity_AllowedHosts(t *testing.T) {
	e := newEnv(t, dashboard.Options{AllowedHosts: []string{"ops.example.com", "Intranet.Example:8443", "2001:db8::1", "https://public.example"}})
	for host, want := range map[string]int{
		"ops.example.com":         http.StatusOK,
		"OPS.example.com.:9000":   http.StatusOK,
		"intranet.example:8443":   http.StatusOK,
		"intranet.example":        http.StatusForbidden,
		"intranet.example:8080":   http.StatusForbidden,
		"[2001:db8::1]:8080":      http.StatusOK,
		"public.example":          http.StatusOK,
		"ops.example.com.evil":    http.StatusForbidden,
		"evil.ops.example.com":    http.StatusForbidden,
		"localhost:" + e.port():   http.StatusOK,
		"":                        http.StatusOK, // 127.0.0.1:port
		"[2001:db8::2]:8080":      http.StatusForbidden,
		"rebind.attacker.example": http.StatusForbidden,
	} {
		resp, body := e.do(http.MethodGet, "/", host, nil)
		assert.Equal(t, want, resp.StatusCode, "%s: %s", host, body)
	}
	resp, body := e.do(http.MethodGet, "/", "[2001:db8::2]:8080", nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, body, `add "[2001:db8::2]" to AllowedHosts`)

	e = newEnv(t, dashboard.Options{AllowedHosts: []string{"*"}})
	resp, _ = e.do(http.MethodGet, "/", "rebind.attacker.example", nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode, `"*"`)
}

// TestSecurity_OriginNull: "Origin: null" (a sandboxed frame, a data: URL, a
// redirect from another site) proves nothing: the Referer decides, and
// without a matching one the action is refused, token or not.
func TestSecurity_OriginNull(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	e.publish("orders", later(time.Hour, "x"))
	e.subscribe("orders", "billing")
	_, page := e.get("/topic?t=orders")
	tok := csrf(t, page)
	paused := func() bool {
		ok, err := e.insp.Paused(context.Background(), "orders", "billing")
		require.NoError(t, err)
		return ok
	}
	form := url.Values{"csrf": {tok}, "t": {"orders"}, "g": {"billing"}, "action": {"pause"}, "confirm": {"yes"}}

	resp, body := e.do(http.MethodPost, "/group", "", form, "Origin", "null")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, body)
	assert.Contains(t, body, "no Origin or Referer")
	assert.False(t, paused(), "paused with Origin: null and no Referer")

	resp, body = e.do(http.MethodPost, "/group", "", form, "Origin", "null", "Referer", "https://evil.example/page")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, body)
	assert.Contains(t, body, `Referer header`)
	assert.False(t, paused(), "paused with Origin: null and another site's Referer")

	resp, body = e.do(http.MethodPost, "/group", "", form)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, body)
	assert.Contains(t, body, "no Origin or Referer")
	assert.False(t, paused(), "paused with neither Origin nor Referer")

	resp, body = e.do(http.MethodPost, "/group", "", form, "Origin", "null", "Referer", e.srv.URL+"/topic?t=orders")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.True(t, paused(), "a matching Referer after Origin: null")

	// The token is still required with a matching Origin.
	form.Set("action", "resume")
	form.Set("csrf", "0123456789abcdef0123456789abcdef")
	resp, body = e.do(http.MethodPost, "/group", "", form, "Origin", e.srv.URL)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, body)
	assert.Contains(t, body, "token is missing or stale")
	assert.True(t, paused())
}

// TestSecurity_OriginRewrittenHost: behind a proxy that rewrites Host to its
// upstream (nginx's default), the refusal says what it compared and how to
// fix it.
func TestSecurity_OriginRewrittenHost(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	msg := later(time.Hour, "x")
	e.publish("orders", msg)
	_, page := e.get("/message?t=orders&q=" + msg.UUID)
	tok := csrf(t, page)
	upstream := "127.0.0.1:" + e.port()
	form := url.Values{"csrf": {tok}, "t": {"orders"}, "uuid": {"u"}}
	resp, body := e.do(http.MethodPost, "/cancel", upstream, form, "Origin", "https://ops.example.com")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	body = html.UnescapeString(body)
	assert.Contains(t, body, `Origin header names host "ops.example.com"`)
	assert.Contains(t, body, `the request's Host is "`+upstream+`"`)
	assert.Contains(t, body, "proxy_set_header Host $host")
	assert.Contains(t, body, "AllowedHosts")
	// The Origin names whoever sent the form: maybe another site, which
	// the advice must not talk the operator into trusting.
	assert.NotContains(t, body, "--allowed-host ops.example.com")
	assert.Contains(t, body, "--allowed-host NAME")
	assert.Contains(t, body, "nothing was done")
}

// TestSecurity_OriginAllowedHost: the public name listed in AllowedHosts is trusted
// as the Origin of a form behind a proxy that rewrites Host; "*" and
// loopback are not.
func TestSecurity_OriginAllowedHost(t *testing.T) {
	for _, c := range []struct {
		allowed []string
		origin  string
		want    int
	}{
		{[]string{"ops.example.com"}, "https://ops.example.com", http.StatusOK},
		{[]string{"ops.example.com:8443"}, "https://ops.example.com:8443", http.StatusOK},
		{[]string{"ops.example.com:8443"}, "https://ops.example.com", http.StatusForbidden},
		{[]string{"*"}, "https://ops.example.com", http.StatusForbidden},
		{nil, "http://localhost:8080", http.StatusForbidden},
		{[]string{"ops.example.com"}, "https://evil.example", http.StatusForbidden},
	} {
		e := newEnv(t, dashboard.Options{AllowedHosts: c.allowed})
		msg := later(time.Hour, "x")
		e.publish("orders", msg)
		_, page := e.get("/message?t=orders&q=" + msg.UUID)
		form := url.Values{"csrf": {csrf(t, page)}, "t": {"orders"}, "uuid": {msg.UUID}}
		resp, body := e.do(http.MethodPost, "/cancel", "127.0.0.1:8080", form, "Origin", c.origin)
		assert.Equal(t, c.want, resp.StatusCode, "%v %s: %s", c.allowed, c.origin, body)
	}
}

// TestSecurity_CookieSecureBehindTLSProxy: the token's cookie is Secure when a
// TLS-terminating proxy says the browser used https.
func TestSecurity_CookieSecureBehindTLSProxy(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	cookie := func(header ...string) *http.Cookie {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
		for n := 0; n+1 < len(header); n += 2 {
			req.Header.Set(header[n], header[n+1])
		}
		resp, err := http.DefaultClient.Do(req) // no jar: a new cookie each time
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		for _, c := range resp.Cookies() {
			if c.Name == "redisdelay_csrf" {
				return c
			}
		}
		t.Fatal("no cookie set")
		return nil
	}
	assert.False(t, cookie().Secure, "plain http")
	assert.True(t, cookie("X-Forwarded-Proto", "https").Secure, "X-Forwarded-Proto: https")
	assert.True(t, cookie("X-Forwarded-Proto", "HTTPS, http").Secure, "X-Forwarded-Proto: HTTPS, http")
	assert.True(t, cookie("Forwarded", `for=192.0.2.60;proto=https;by=203.0.113.43`).Secure, "Forwarded: proto=https")
	assert.False(t, cookie("X-Forwarded-Proto", "http").Secure, "X-Forwarded-Proto: http")
	assert.False(t, cookie("Forwarded", `for=192.0.2.60;proto=http`).Secure, "Forwarded: proto=http")

	e = newEnv(t, dashboard.Options{SecureCookie: true})
	assert.True(t, cookie().Secure, "Options.SecureCookie")
}
