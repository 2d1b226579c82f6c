package dashboard

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// allowedHosts is Options.AllowedHosts read: hosts allowed on any port,
// and host:port pairs, for the Host check; and the origins trusted as the
// Origin of an action.
type allowedHosts struct {
	any     bool                // "*": no Host check
	hosts   map[string]bool     // host, any port
	ports   map[string][]string // host: the ports allowed
	origins map[string][]origin // host: the origins trusted
}

// origin is an entry of AllowedHosts as the Origin check reads it: an
// empty scheme fits http and https; an empty port is the scheme's default.
type origin struct{ scheme, port string }

func parseAllowedHosts(list []string) allowedHosts {
	a := allowedHosts{hosts: map[string]bool{}, ports: map[string][]string{}, origins: map[string][]origin{}}
	for _, e := range list {
		e = strings.TrimSpace(e)
		if e == "*" {
			a.any = true
			continue
		}
		// Tolerate an origin ("https://ops.example.com"): its host counts,
		// and its scheme for the Origin check.
		scheme := ""
		if strings.Contains(e, "://") {
			if u, err := url.Parse(e); err == nil {
				scheme, e = strings.ToLower(u.Scheme), u.Host
			}
		}
		host, port := splitHost(e)
		switch {
		case host == "":
			continue
		case port == "":
			a.hosts[host] = true
		default:
			a.ports[host] = append(a.ports[host], port)
		}
		a.origins[host] = append(a.origins[host], origin{scheme, withoutDefaultPort(scheme, port)})
	}
	return a
}

// withoutDefaultPort is port, or "" when it is the scheme's default
// (browsers leave it out of Origin).
func withoutDefaultPort(scheme, port string) string {
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		return ""
	}
	return port
}

// trusts tells whether an Origin (or Referer) URL is an origin of
// AllowedHosts: its host, its port (none for an entry without one: the
// scheme's default), and its scheme when the entry gives one. Unlike the
// Host check, an entry without a port does not trust every port: another
// port of the host is another origin, maybe another application.
func (a allowedHosts) trusts(u *url.URL) bool {
	host, port := splitHost(u.Host)
	port = withoutDefaultPort(strings.ToLower(u.Scheme), port)
	for _, o := range a.origins[host] {
		if o.port == port && (o.scheme == "" || strings.EqualFold(o.scheme, u.Scheme)) {
			return true
		}
	}
	return false
}

// sameOrigin tells whether an Origin (or Referer) URL is the origin of the
// request: the same host and port as its Host header (which the browser
// writes from the URL it requests, so they compare as written), and the
// same scheme when the request tells it (TLS, or a proxy's
// X-Forwarded-Proto or Forwarded header). Without those, the scheme of a
// plain http request is unknown (a TLS-terminating proxy that says
// nothing), and is not compared.
func sameOrigin(u *url.URL, r *http.Request) bool {
	if !sameHost(u.Host, r.Host) {
		return false
	}
	if scheme, known := requestScheme(r); known {
		return strings.EqualFold(u.Scheme, scheme)
	}
	return true
}

// requestScheme is the scheme the browser used, when the request says.
func requestScheme(r *http.Request) (scheme string, known bool) {
	switch {
	case r.TLS != nil:
		return "https", true
	case r.Header.Get("X-Forwarded-Proto") != "" || r.Header.Get("Forwarded") != "" && strings.Contains(strings.ToLower(r.Header.Get("Forwarded")), "proto="):
		if viaHTTPS(r) {
			return "https", true
		}
		return "http", true
	}
	return "", false
}

// splitHost splits a Host header (or an entry of AllowedHosts) into its
// host, lower case, without brackets or a trailing dot, and its port
// ("" without one).
func splitHost(hostport string) (host, port string) {
	host = hostport
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
	return strings.ToLower(host), port
}

// hostOnly is the host of a Host header, as AllowedHosts takes it.
func hostOnly(hostport string) string {
	host, _ := splitHost(hostport)
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

// isLoopback tells whether a host names this machine whatever DNS says:
// localhost, or an address in 127.0.0.0/8 or ::1.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// allows tells whether the dashboard answers to a Host header.
func (a allowedHosts) allows(hostport string) bool {
	host, _ := splitHost(hostport)
	if host == "" {
		return false
	}
	return isLoopback(host) || a.listed(hostport)
}

// sameHost tells whether two Host headers name the same host and port.
func sameHost(a, b string) bool {
	ha, pa := splitHost(a)
	hb, pb := splitHost(b)
	return ha != "" && ha == hb && pa == pb
}

// listed tells whether a host:port is named in AllowedHosts ("*" and
// loopback aside): a name the dashboard is served under, trusted as the
// Origin of its forms.
func (a allowedHosts) listed(hostport string) bool {
	host, port := splitHost(hostport)
	if a.hosts[host] {
		return true
	}
	for _, p := range a.ports[host] {
		if p == port {
			return true
		}
	}
	return false
}

// viaHTTPS tells whether the browser reached the dashboard over https: a
// TLS connection, or a proxy's X-Forwarded-Proto or Forwarded header
// saying so (the first proxy's word: the value nearest the browser).
func viaHTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if v := r.Header.Get("X-Forwarded-Proto"); v != "" {
		first, _, _ := strings.Cut(v, ",")
		return strings.EqualFold(strings.TrimSpace(first), "https")
	}
	if v := r.Header.Get("Forwarded"); v != "" {
		first, _, _ := strings.Cut(v, ",")
		for _, pair := range strings.Split(first, ";") {
			name, value, _ := strings.Cut(strings.TrimSpace(pair), "=")
			if strings.EqualFold(name, "proto") {
				return strings.EqualFold(strings.Trim(value, `"`), "https")
			}
		}
	}
	return false
}

// authenticated tells whether a request carries credentials of
// Options.BasicAuth or a token of Options.BearerTokens; true when neither
// is set. Every candidate is compared, in constant time over SHA-256
// digests, so the time taken tells nothing of which part was wrong.
func (h *handler) authenticated(r *http.Request) bool {
	if len(h.opts.BasicAuth) == 0 && len(h.opts.BearerTokens) == 0 {
		return true
	}
	ok := 0
	if user, pw, has := r.BasicAuth(); has {
		for u, p := range h.opts.BasicAuth {
			ok |= sameSecret(u, user) & sameSecret(p, pw)
		}
	}
	// The scheme's name is case-insensitive (RFC 7235, section 2.1):
	// "bearer" and "BEARER" are Bearer.
	if scheme, tok, has := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " "); has && strings.EqualFold(scheme, "Bearer") {
		for _, t := range h.opts.BearerTokens {
			ok |= sameSecret(t, strings.TrimSpace(tok))
		}
	}
	return ok == 1
}

func sameSecret(a, b string) int {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:])
}

// challenge answers a request without valid credentials: 401, with the
// scheme to use (a browser asks for a login when it is Basic).
func (h *handler) challenge(w http.ResponseWriter) {
	scheme := `Bearer realm="redisdelay dashboard"`
	if len(h.opts.BasicAuth) > 0 {
		scheme = `Basic realm="redisdelay dashboard", charset="UTF-8"`
	}
	w.Header().Set("WWW-Authenticate", scheme)
	http.Error(w, "unauthorized: the dashboard needs a login (basic authentication) or a bearer token (Authorization: Bearer <token>)", http.StatusUnauthorized)
}
