// What bounds the work others can make the dashboard do: the pages that
// read messages are refused to other sites and run a few at a time, and
// failed logins are logged and slowed down.

package dashboard

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Bounds of the expensive reads; variables for the tests.
var (
	// maxHeavy is how many pages that read messages run at once: each may
	// read thousands of messages, bodies included, for up to
	// Options.Timeout, so a burst of them (tabs, a script, <img> tags of
	// another site) would hold memory and Redis for all of them.
	maxHeavy = 4
	// heavyWait is how long a page waits for one of them to end before
	// it is refused with 503: long enough for a burst of refreshes.
	heavyWait = 2 * time.Second
)

// sameSite wraps the handler of a GET that is not free: it refuses a
// request the browser says another site (or another origin of this
// site: another port of this host) sent. An <img>, <script> or <iframe> of
// any page can make the operator's browser send a GET with the
// operator's login; Sec-Fetch-Site tells them apart where the browser
// sends it (all current ones do). A link typed or bookmarked comes with
// "none", a link of the dashboard with "same-origin".
func (h *handler) sameSite(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
			// Plain text: nothing of the dashboard for whoever embedded it.
			http.Error(w, fmt.Sprintf("forbidden: the browser says this request comes from %s (Sec-Fetch-Site: %s): this page reads "+
				"messages from Redis, so the dashboard serves it only to its own pages, lest another page make the browser read "+
				"it again and again. Open it from the dashboard, or paste its address in the address bar.", siteWord(site), site),
				http.StatusForbidden)
			return
		}
		next(w, r)
	}
}

// heavy wraps the handler of a page that reads messages: sameSite, and at
// most maxHeavy at once; past heavyWait in line, 503 with Retry-After.
func (h *handler) heavy(next http.HandlerFunc) http.HandlerFunc {
	return h.sameSite(func(w http.ResponseWriter, r *http.Request) {
		select {
		case h.slots <- struct{}{}:
		default:
			t := time.NewTimer(heavyWait)
			defer t.Stop()
			select {
			case h.slots <- struct{}{}:
			case <-t.C:
				w.Header().Set("Retry-After", "5")
				h.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("the dashboard is busy: %d pages that read messages are running "+
					"(the most it runs at once), and none ended within %s. Try again in a few seconds", cap(h.slots), heavyWait))
				return
			case <-r.Context().Done():
				return
			}
		}
		defer func() { <-h.slots }()
		next(w, r)
	})
}

// Failed logins: logged, at most one line per address every logEvery,
// and slowed down past freeFailures in failWindow.
const (
	failWindow   = 10 * time.Minute
	logEvery     = 10 * time.Second
	freeFailures = 5
	maxFailDelay = 3 * time.Second
	maxFailAddrs = 10_000 // addresses remembered at most
)

// failDelay is the wait added per failure past freeFailures, up to
// maxFailDelay; a variable for the tests.
var failDelay = 250 * time.Millisecond

type failedLogins struct {
	log *slog.Logger
	mu  sync.Mutex
	by  map[string]*failures
}

type failures struct {
	start    time.Time // of the window
	n        int       // failures in the window
	unlogged int       // failures since the last line
	logged   time.Time // when the last line was written
}

func newFailedLogins(log *slog.Logger) *failedLogins {
	return &failedLogins{log: log, by: map[string]*failures{}}
}

// record counts a failure from addr and returns how long its answer waits,
// and the count to log (0: not now).
func (f *failedLogins) record(addr string, now time.Time) (wait time.Duration, logCount, total int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.by[addr]
	if e == nil || now.Sub(e.start) > failWindow {
		if len(f.by) >= maxFailAddrs {
			f.prune(now)
		}
		e = &failures{start: now}
		f.by[addr] = e
	}
	e.n++
	e.unlogged++
	if now.Sub(e.logged) >= logEvery {
		logCount, e.unlogged, e.logged = e.unlogged, 0, now
	}
	if past := e.n - freeFailures; past > 0 {
		wait = min(time.Duration(past)*failDelay, maxFailDelay)
	}
	return wait, logCount, e.n
}

// prune forgets the addresses whose window ended; all of them if that is
// not enough, rather than grow without bound under a spray of addresses.
func (f *failedLogins) prune(now time.Time) {
	for a, e := range f.by {
		if now.Sub(e.start) > failWindow {
			delete(f.by, a)
		}
	}
	if len(f.by) >= maxFailAddrs {
		clear(f.by)
	}
}

// loginFailed answers a request without valid credentials. One that
// carries none (a browser's first request) is only challenged; one with
// wrong ones is logged and, past a few from its address, answered late:
// guessing is slowed, and the operator learns of it. The address is the
// connection's: behind a proxy, the proxy's (its own log has the client).
func (h *handler) loginFailed(w http.ResponseWriter, r *http.Request) {
	if auth := r.Header.Get("Authorization"); auth != "" {
		addr, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			addr = r.RemoteAddr
		}
		scheme, _, _ := strings.Cut(auth, " ")
		wait, logCount, total := h.logins.record(addr, time.Now())
		if logCount > 0 {
			h.opts.Logger.Warn("redisdelay dashboard: failed login", "remote", addr, "scheme", visible(strings.ToLower(scheme)),
				"failures", logCount, "in_window", total, "path", visible(r.URL.Path), "delay", wait)
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.Context().Done():
			}
			t.Stop()
		}
	}
	h.challenge(w)
}
