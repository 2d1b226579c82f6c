// What guards the dashboard's actions: the CSRF token, the Origin check, and
// the wrapper every action runs in (see also host.go and the login in
// dashboard.go's New).

package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
)

// csrfToken returns the browser's token, setting the cookie on first use.
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 32 {
		return c.Value
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	path := h.base
	if path == "" {
		path = "/"
	}
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: path, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: h.opts.SecureCookie || viaHTTPS(r)})
	return tok
}

// checkAction refuses a mutating request: read-only mode, a request from
// another site, or a missing or wrong token.
func (h *handler) checkAction(r *http.Request) error {
	if h.opts.ReadOnly {
		return fmt.Errorf("%w: the dashboard is read-only (Options.ReadOnly, or redisdelay ui --read-only)", errForbidden)
	}
	if err := h.checkOrigin(r); err != nil {
		return err
	}
	c, err := r.Cookie(csrfCookie)
	form := r.PostFormValue("csrf")
	if err != nil || form == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) != 1 {
		return fmt.Errorf("%w: the form's token is missing or stale (cookies disabled, or a form from another site): reload the page and try again", errForbidden)
	}
	return nil
}

// checkOrigin refuses a mutating request unless it comes from a page of
// the dashboard: its Origin header, or without one its Referer, must name
// the request's Host or a host of AllowedHosts. "Origin: null" (a
// sandboxed frame, a data: URL, a redirect from another site) proves
// nothing and leaves the decision to Referer; with neither, the request is
// refused: browsers send them with the dashboard's forms (its pages ask
// for same-origin referrers), and a script can send Origin.
func (h *handler) checkOrigin(r *http.Request) error {
	for _, header := range []string{"Origin", "Referer"} {
		v := r.Header.Get(header)
		if v == "" || v == "null" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || u.Host == "" {
			return fmt.Errorf("%w: the %s header %q is not a URL of a page: reload the dashboard and try again", errForbidden, header, v)
		}
		if sameHost(u.Host, r.Host) || h.hosts.listed(u.Host) {
			return nil
		}
		// The host named is whoever sent the form, maybe another site: the
		// advice names none, so it cannot talk the operator into trusting
		// the sender.
		return fmt.Errorf("%w: the %s header names host %q but the request's Host is %q, so the form does not come from this dashboard, "+
			"and nothing was done. Another site may have sent it. If you opened the dashboard through a reverse proxy that rewrites Host "+
			"(nginx's proxy_pass does by default), pass the browser's Host on (nginx: proxy_set_header Host $host;), or list the name "+
			"you open the dashboard with in its AllowedHosts (redisdelay ui --allowed-host NAME)", errForbidden, header, u.Host, r.Host)
	}
	return fmt.Errorf("%w: the request carries no Origin or Referer header naming this dashboard (Origin %q, Referer %q): "+
		"browsers send them with the dashboard's forms; a script must send Origin: http://%s",
		errForbidden, r.Header.Get("Origin"), r.Header.Get("Referer"), r.Host)
}

// action wraps the handler of a mutating request.
func (h *handler) action(next func(ctx context.Context, w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("cannot read the form: %v", err))
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
