// What guards the dashboard's actions: the CSRF token, the Origin check, and
// the wrapper every action runs in (see also host.go and the login in
// dashboard.go's New).

package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// The CSRF token is a random nonce and an HMAC of it, under the handler's
// key, bound to the request's credentials (its Authorization header). A
// cookie is shared by every port of a host (cookies ignore ports), so a
// page on another port of the dashboard's host can plant one of its own
// choosing (Path=/cancel): an unsigned double-submit token would then pass
// with the value the attacker also puts in the form. A signed token can
// only come from the dashboard itself, and one bound to the credentials
// only from a page served with them.
const (
	tokenNonce = 16 // bytes of the nonce
	tokenMAC   = 16 // bytes of the HMAC kept
	tokenLen   = 2 * (tokenNonce + tokenMAC)
)

// sign returns the token of a nonce for a request's credentials.
func (h *handler) sign(nonce []byte, r *http.Request) string {
	m := hmac.New(sha256.New, h.key)
	m.Write(nonce)
	cred := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	m.Write(cred[:])
	return hex.EncodeToString(nonce) + hex.EncodeToString(m.Sum(nil)[:tokenMAC])
}

// validToken tells whether tok is a token this handler signed for the
// request's credentials.
func (h *handler) validToken(tok string, r *http.Request) bool {
	if len(tok) != tokenLen {
		return false
	}
	nonce, err := hex.DecodeString(tok[:2*tokenNonce])
	if err != nil {
		return false
	}
	return hmac.Equal([]byte(h.sign(nonce, r)), []byte(tok))
}

// csrfToken returns the browser's token, setting the cookie when it has
// none or one this handler did not sign (planted by another page, or
// signed before a restart with another key).
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if tok := h.cookieToken(r, ""); tok != "" {
		return tok
	}
	b := make([]byte, tokenNonce)
	_, _ = rand.Read(b)
	tok := h.sign(b, r)
	path := h.base
	if path == "" {
		path = "/"
	}
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: path, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: h.opts.SecureCookie || viaHTTPS(r)})
	return tok
}

// cookieToken returns the first token cookie of the request this handler
// signed for its credentials, and equal to form unless form is empty; ""
// for none. A page of another port may have planted a cookie of the same
// name with a longer Path, which the browser sends first: it is skipped,
// so that it does not lock the operator out of the actions either.
func (h *handler) cookieToken(r *http.Request, form string) string {
	for _, c := range r.CookiesNamed(csrfCookie) {
		if form != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) != 1 {
			continue
		}
		if h.validToken(c.Value, r) {
			return c.Value
		}
	}
	return ""
}

// checkAction refuses a mutating request: read-only mode, a request from
// another site or another port of this host, or a missing, wrong or
// unsigned token.
func (h *handler) checkAction(r *http.Request) error {
	if h.opts.ReadOnly {
		return fmt.Errorf("%w: the dashboard is read-only (Options.ReadOnly, or redisdelay ui --read-only)", errForbidden)
	}
	// The browser's own word, where it gives it, decides first: it
	// compares the full origins, scheme and port included, and no page
	// can forge it.
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return fmt.Errorf("%w: the browser says this form comes from %s (Sec-Fetch-Site: %s), not from a page of this dashboard, "+
			"and nothing was done. Another site, or another server on this host, may have sent it: open the dashboard and act from its pages",
			errForbidden, siteWord(site), site)
	}
	if err := h.checkOrigin(r); err != nil {
		return err
	}
	form := r.PostFormValue("csrf")
	if form == "" || h.cookieToken(r, form) == "" {
		return fmt.Errorf("%w: the form's token is missing or stale (cookies disabled, the dashboard restarted, or a form from another site): reload the page and try again", errForbidden)
	}
	return nil
}

// siteWord says what a Sec-Fetch-Site value means.
func siteWord(site string) string {
	switch site {
	case "same-site":
		return "another origin of the same site (another port or subdomain of this host)"
	case "cross-site":
		return "another site"
	case "none":
		return "no page (typed in the address bar, a bookmark, or another application)"
	}
	return "an unknown place"
}

// checkOrigin refuses a mutating request unless it comes from a page of
// the dashboard: its Origin header, or without one its Referer, must name
// the request's origin (host and port as the Host header gives them, and
// the scheme when the request says which: TLS, or a proxy's
// X-Forwarded-Proto or Forwarded) or an origin of AllowedHosts (an entry
// without a port: the scheme's default port only). The port counts: a
// page on another port of the same host is another origin, maybe another
// application. "Origin: null" (a sandboxed frame, a data: URL, a redirect
// from another site) proves nothing and leaves the decision to Referer;
// with neither, the request is refused: browsers send them with the
// dashboard's forms (its pages ask for same-origin referrers), and a
// script can send Origin.
func (h *handler) checkOrigin(r *http.Request) error {
	for _, header := range []string{"Origin", "Referer"} {
		v := r.Header.Get(header)
		if v == "" || v == "null" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("%w: the %s header %q is not a URL of a page: reload the dashboard and try again", errForbidden, header, v)
		}
		if sameOrigin(u, r) || h.hosts.trusts(u) {
			return nil
		}
		// The host named is whoever sent the form, maybe another site: the
		// advice names none, so it cannot talk the operator into trusting
		// the sender.
		return fmt.Errorf("%w: the %s header names host %q (origin %s://%s) but the request's Host is %q, so the form does not come from this dashboard, "+
			"and nothing was done. Another site, or another server on another port of this host, may have sent it. If you opened the dashboard through a reverse proxy that rewrites Host "+
			"(nginx's proxy_pass does by default), pass the browser's Host on (nginx: proxy_set_header Host $host;), or list the name "+
			"you open the dashboard with, and its port unless the default, in its AllowedHosts (redisdelay ui --allowed-host NAME[:PORT])",
			errForbidden, header, u.Host, u.Scheme, u.Host, r.Host)
	}
	return fmt.Errorf("%w: the request carries no Origin or Referer header naming this dashboard (Origin %q, Referer %q): "+
		"browsers send them with the dashboard's forms; a script must send Origin: http://%s",
		errForbidden, r.Header.Get("Origin"), r.Header.Get("Referer"), r.Host)
}

// action wraps the handler of a mutating request.
func (h *handler) action(next func(ctx context.Context, w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			status := http.StatusBadRequest
			if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
				status = http.StatusRequestEntityTooLarge
			}
			h.fail(w, r, status, fmt.Errorf("cannot read the form: %v", err))
			return
		}
		if err := h.checkAction(r); err != nil {
			h.fail(w, r, http.StatusForbidden, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
		defer cancel()
		next(ctx, w, r)
	}
}
