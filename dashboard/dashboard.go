// Package dashboard is a web page for operators of watermill-redisdelay:
// the Redis server; topics and consumer groups with their depths and
// throughput, refreshing live, paused and resumed; when the waiting
// messages fall due; waiting messages paged, searched by UUID or business
// key, shown, run now, rescheduled and cancelled; a group's ready, pending
// and retrying messages and its consumers; dead letters shown, found by
// UUID, requeued and deleted, one or in bulk, after a confirmation;
// waiting messages and dead letters searched by metadata, business-key
// prefix and due (or death) time, and what such a search selects run now,
// cancelled, rescheduled, requeued or deleted after a counted
// confirmation; recurring schedules listed, paused, resumed, triggered and
// removed.
//
// It is an http.Handler built on the public Inspector API only, with
// everything embedded (no CDN: it works offline). Mount it in a service:
//
//	insp, _ := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: rdb})
//	mux.Handle("/delay/", dashboard.New(insp, dashboard.Options{
//		BasePath:     "/delay",
//		Authorize:    requireOperator,             // the service's own authentication
//		AllowedHosts: []string{"ops.example.com"}, // the name it is opened with
//	}))
//
// or run it with the CLI: redisdelay ui --addr-listen 127.0.0.1:8080.
//
// It answers only to loopback Hosts and those of Options.AllowedHosts
// (against DNS rebinding), and with Options.BasicAuth or BearerTokens only
// to requests that log in (failures logged and slowed down). Mutating
// actions are POST requests carrying a signed token from a cookie of the
// page (double-submit), refused unless the browser's Sec-Fetch-Site says
// same-origin where it is sent, and their Origin, or without one their
// Referer, names the dashboard's origin, port included; ReadOnly refuses
// them all and hides their buttons. The pages that read messages are
// refused to other sites and run a few at a time.
package dashboard

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/present"
)

// Options configure the dashboard. The zero value serves everything at the
// root path, actions allowed, to anyone who can reach it under a loopback
// name or address: bind it to loopback or set Authorize.
type Options struct {
	// ReadOnly hides the actions (cancel, reschedule, requeue, delete,
	// pause, resume, and a schedule's trigger and remove) and refuses their
	// requests with 403.
	ReadOnly bool

	// Authorize is called on every request, after the Host check and the
	// built-in authentication (BasicAuth, BearerTokens); an error answers
	// 403 with the error's text. Use it to plug in the host service's
	// authentication (session cookie, header set by a proxy...), and to
	// refuse actions to some users: mutating requests are POSTs.
	Authorize func(*http.Request) error

	// BasicAuth, when not empty, requires every request to carry HTTP basic
	// credentials of one of these users (name -> password), or a bearer
	// token of BearerTokens; others get 401, and a browser asks for a
	// login. BearerTokens, when not empty, accept requests with
	// "Authorization: Bearer <token>" (scripts reading /api/topics). Names
	// must be non-empty without ':', passwords and tokens at least 12
	// characters (see Validate). Compared in constant time. Serve over
	// https (or behind a TLS-terminating proxy) beyond loopback: basic
	// credentials and tokens travel in the clear over http.
	BasicAuth    map[string]string
	BearerTokens []string

	// BasePath is the path the handler is mounted at, e.g. "/delay" for
	// mux.Handle("/delay/", ...): the handler strips it from requests and
	// puts it in front of its links. Empty means the root.
	BasePath string

	// Timeout bounds the Redis work of one request (default 15 s).
	Timeout time.Duration

	// BulkStep bounds the work of one request of a bulk action (cancel,
	// reschedule, requeue or delete what a search selects): past it, the
	// request stops between two batches of 1,000 stored messages and
	// answers a page that goes on from there by itself. Default 5 s, and
	// at most a third of Timeout; lower it behind a proxy with a short
	// read timeout.
	BulkStep time.Duration

	// AllowedHosts are the names the dashboard answers to besides loopback,
	// against DNS rebinding: a page of another site whose name its owner
	// points at the dashboard's address is same-origin with it for the
	// browser, so it could read the pages and the token and act, unless
	// the dashboard refuses requests whose Host header names a host it
	// does not know. Requests to localhost, 127.0.0.0/8 and ::1 are always
	// served, on any port; any other Host is refused with 403 unless
	// listed here, as "host" (any port) or "host:port" (only with that
	// port; browsers leave out :80 and :443, so list those as "host").
	// Names are compared without case and without a trailing dot.
	//
	// The check runs before Authorize and whatever it does: rebinding
	// carries no cookie of the real name, but it defeats authorization by
	// network location (the operator's browser is inside) and by
	// credentials a browser sends to any name (client certificates,
	// Kerberos). "*" turns the check off, for a deployment whose proxy
	// already refuses unknown Hosts (a virtual host of its own, not a
	// catch-all) and forwards only those; prefer listing the public name.
	//
	// The hosts listed are also trusted as the Origin or Referer of an
	// action: behind a proxy that rewrites Host to its upstream, list the
	// public name the browser uses.
	AllowedHosts []string

	// SecureCookie marks the token's cookie Secure on every response, so
	// the browser never sends it over plain http. Without it the cookie is
	// Secure when the request came over TLS or a TLS-terminating proxy says
	// so (X-Forwarded-Proto: https, or Forwarded: proto=https). Those
	// headers are believed without a list of trusted proxies because they
	// can only add Secure, never remove it: a client that forges them gets
	// a cookie its browser refuses over http, and a page of another site
	// cannot set them on the operator's requests. Set SecureCookie when
	// the dashboard is reached only over https through a proxy that sends
	// neither header; leave it unset when it is also opened over plain
	// http (loopback), where a Secure cookie would be dropped.
	SecureCookie bool

	// CSRFKey signs the tokens of the dashboard's forms (HMAC-SHA256), at
	// least 32 bytes when set. Empty: a random key made by New, so a
	// token lasts as long as the process (a page opened before a restart
	// gets a new token when reloaded). Give replicas behind a load
	// balancer the same key, so that a form of one is accepted by another.
	CSRFKey []byte

	// Logger receives the failed logins (BasicAuth, BearerTokens), at most
	// one line per remote address every 10 s, with the count since the
	// last. Nil: slog.Default().
	Logger *slog.Logger

	// SampleEvery is how often the throughput and lateness of a topic are
	// sampled for its charts (default 5 s; negative: no charts, no
	// sampling). The dashboard keeps the last 720 samples per topic (an
	// hour at 5 s), and samples a topic only within 60 intervals of a
	// request for its page: an idle dashboard sends Redis nothing.
	SampleEvery time.Duration
}

// maxOffset is the deepest offset of the topic page's list of waiting
// messages (200 pages): Inspector.Waiting reads every message before the
// page, bodies included (about 370 bytes each in the review's measure,
// so 3.7 MB at the cap rather than 111 MB at 300,000). A variable for the
// tests.
var maxOffset = 10_000

// Page sizes.
const (
	waitingPage = 50
	deadPage    = 50
	maxPayload  = 64 << 10 // bytes of a payload shown on a page
	previewLen  = 80       // characters of a payload in a list
)

const csrfCookie = "redisdelay_csrf"

// maxBody bounds the body of a request.
const maxBody = 1 << 20

//go:embed templates/*.html static/*
var files embed.FS

type handler struct {
	insp   *redisdelay.Inspector
	opts   Options
	base   string
	pages  map[string]*template.Template
	mux    *http.ServeMux
	hist   *history
	hosts  allowedHosts
	key    []byte        // signs the CSRF tokens
	slots  chan struct{} // the expensive reads running (heavy)
	logins *failedLogins
}

// minSecret is the shortest password or token Validate accepts: the
// dashboard may be reachable by anyone on a network, which can try
// passwords as fast as it answers.
const minSecret = 12

// Validate reports the first setting that cannot work: a BasicAuth user
// with an empty name, a ':' in it (basic authentication splits there), or
// a password shorter than 12 characters; a bearer token shorter than that.
func (o Options) Validate() error {
	for user, pw := range o.BasicAuth {
		switch {
		case user == "" || strings.Contains(user, ":"):
			return fmt.Errorf("dashboard: BasicAuth user %q: give a name that is not empty and has no ':'", user)
		case len(pw) < minSecret:
			return fmt.Errorf("dashboard: BasicAuth password of user %q has %d characters: use at least %d (a long random one: anyone who reaches the dashboard may try passwords)", user, len(pw), minSecret)
		}
	}
	for n, tok := range o.BearerTokens {
		if len(tok) < minSecret {
			return fmt.Errorf("dashboard: BearerTokens[%d] has %d characters: use at least %d (a long random one)", n, len(tok), minSecret)
		}
	}
	if len(o.CSRFKey) > 0 && len(o.CSRFKey) < 32 {
		return fmt.Errorf("dashboard: CSRFKey has %d bytes: use at least 32 random bytes, or none for a random key per process", len(o.CSRFKey))
	}
	return nil
}

// New returns the dashboard on insp. It panics when opts.Validate fails:
// a dashboard meant to require a login must not start without one; call
// Validate first to handle the error.
func New(insp *redisdelay.Inspector, opts Options) http.Handler {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 15 * time.Second
	}
	if opts.BulkStep <= 0 {
		opts.BulkStep = 5 * time.Second
	}
	opts.BulkStep = min(opts.BulkStep, opts.Timeout/3)
	if opts.SampleEvery == 0 {
		opts.SampleEvery = 5 * time.Second
	}
	h := &handler{insp: insp, opts: opts, base: strings.TrimRight(opts.BasePath, "/")}
	h.hist = newHistory(insp, opts.SampleEvery, opts.Timeout)
	h.hosts = parseAllowedHosts(opts.AllowedHosts)
	h.key = opts.CSRFKey
	if len(h.key) == 0 {
		h.key = make([]byte, 32)
		_, _ = rand.Read(h.key)
	}
	h.slots = make(chan struct{}, maxHeavy)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
		h.opts.Logger = opts.Logger
	}
	h.logins = newFailedLogins(opts.Logger)
	if h.base != "" && !strings.HasPrefix(h.base, "/") {
		h.base = "/" + h.base
	}
	funcs := template.FuncMap{
		"link":    h.link,
		"since":   since,
		"percent": percent,
		"add":     func(a, b int) int { return a + b },
		"count":   thousands,
		"vis":     visible,
		"human":   present.Duration,
		"bytes":   present.Bytes,
	}
	h.pages = map[string]*template.Template{}
	for _, name := range []string{"topics", "topic", "group", "message", "dead", "schedules", "search", "bulk", "confirm", "result", "error"} {
		h.pages[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html"))
	}
	static, _ := fs.Sub(files, "static")
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", h.topics)
	mux.HandleFunc("GET /api/topics", h.apiTopics)
	// The pages that read messages (bodies included) from Redis: refused
	// to other sites, and a few at a time.
	mux.HandleFunc("GET /topic", h.heavy(h.topic))
	mux.HandleFunc("GET /api/topic", h.sameSite(h.apiTopic))
	mux.HandleFunc("GET /group", h.heavy(h.group))
	mux.HandleFunc("GET /message", h.heavy(h.message))
	mux.HandleFunc("GET /dead", h.heavy(h.dead))
	mux.HandleFunc("GET /schedules", h.sameSite(h.schedules))
	mux.HandleFunc("GET /search", h.heavy(h.search))
	mux.HandleFunc("POST /cancel", h.action(h.cancel))
	mux.HandleFunc("POST /dead/action", h.action(h.deadAction))
	mux.HandleFunc("POST /reschedule", h.action(h.reschedule))
	mux.HandleFunc("POST /runnow", h.action(h.runNow))
	mux.HandleFunc("POST /group", h.action(h.groupAction))
	mux.HandleFunc("POST /schedule", h.action(h.scheduleAction))
	mux.HandleFunc("POST /bulk", h.action(h.bulk))
	h.mux = mux
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !h.hosts.any && !h.hosts.allows(r.Host) {
		// Plain text, no cookie, no token: nothing for a rebound page.
		http.Error(w, fmt.Sprintf("forbidden: the dashboard refuses requests to Host %q: it answers only to localhost, loopback addresses "+
			"and the hosts listed in its AllowedHosts option (redisdelay ui --allowed-host), so that another site's name pointed at "+
			"its address (DNS rebinding) cannot use it. If this is the name you open the dashboard with, add %q to AllowedHosts.",
			r.Host, hostOnly(r.Host)), http.StatusForbidden)
		return
	}
	// No form of the dashboard comes near this; a bigger body is not
	// read past it, whoever sends it.
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if !h.authenticated(r) {
		h.loginFailed(w, r)
		return
	}
	if h.opts.Authorize != nil {
		if err := h.opts.Authorize(r); err != nil {
			http.Error(w, "forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
	}
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	// Nothing but the embedded script and style runs: a payload that slips
	// through escaping still cannot execute.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	path := r.URL.Path
	if h.base != "" {
		rest, ok := strings.CutPrefix(path, h.base)
		if !ok {
			http.NotFound(w, r)
			return
		}
		if rest == "" {
			http.Redirect(w, r, h.base+"/", http.StatusFound)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = rest, ""
		r = r2
	}
	h.mux.ServeHTTP(w, r)
}

// link is the path of a dashboard page with its query (pairs of name and
// value), under BasePath.
func (h *handler) link(path string, pairs ...any) string {
	q := url.Values{}
	for n := 0; n+1 < len(pairs); n += 2 {
		q.Set(fmt.Sprint(pairs[n]), fmt.Sprint(pairs[n+1]))
	}
	if len(q) == 0 {
		return h.base + path
	}
	return h.base + path + "?" + q.Encode()
}

// page is what every template gets.
type page struct {
	Base     string
	Title    string
	ReadOnly bool
	CSRF     string
	Topic    string
	Data     any
}

func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, title, topic string, data any) {
	p := page{Base: h.base, Title: visible(title), ReadOnly: h.opts.ReadOnly, CSRF: h.csrfToken(w, r), Topic: topic, Data: data}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = h.pages[name].Execute(w, p)
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	h.render(w, r, status, "error", http.StatusText(status), "", err.Error())
}

// errForbidden marks errors answered with 403.
var errForbidden = errors.New("forbidden")

func (h *handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.opts.Timeout)
}

// knownTopic fails unless the topic is registered: a typo in a link would
// otherwise show an empty topic.
func (h *handler) knownTopic(ctx context.Context, topic string) (int, error) {
	if topic == "" {
		return http.StatusBadRequest, errors.New("no topic given: pick one on the topics page")
	}
	all, err := h.insp.Topics(ctx)
	if err != nil {
		return http.StatusBadGateway, err
	}
	if !slices.Contains(all, topic) {
		return http.StatusNotFound, fmt.Errorf("topic %q is not known (no Publisher or Subscriber with this key prefix has used it)", topic)
	}
	return 0, nil
}

// Topics.

// overdueAlert is how late the earliest waiting message must be for the
// topic page to say so when a scheduler holds a lease: a scheduler moves
// due messages within milliseconds, and a standby takes over a stopped
// one's lease within 1.5 check intervals (3 s by default).
const overdueAlert = 10 * time.Second

// One topic: groups, due histogram, waiting messages.

// histogramSpans are the edges of the due histogram after now.
var histogramSpans = []struct {
	d     time.Duration
	label string
}{
	{time.Minute, "< 1 min"}, {5 * time.Minute, "1–5 min"}, {15 * time.Minute, "5–15 min"},
	{time.Hour, "15–60 min"}, {6 * time.Hour, "1–6 h"}, {24 * time.Hour, "6–24 h"},
	{7 * 24 * time.Hour, "1–7 days"}, {30 * 24 * time.Hour, "7–30 days"},
}

// A waiting message.

// deadScan is the scan budget of a message search that finds no waiting
// message (see handler.locate): entries read at most of each structure
// Redis indexes by time only (a stream, a group's dead letters); a
// variable for the tests.
var deadScan = redisdelay.LocateScan

// Dead letters.

// Reschedule.

// atLayouts are the forms of the "at" field: RFC 3339 carries its zone;
// the others, without one, are UTC, as the form says.
var atLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04", "2006-01-02T15:04"}

// Run now.

// schedulerWait is how long an action that made messages due waits for a
// scheduler to hold the topic's lease before saying that none does: the
// action woke the schedulers, and one whose loop retired takes the lease
// within milliseconds, a standby within 1.5 CheckInterval (3 s).
var schedulerWait = 3 * time.Second

// Pause and resume a consumer group.
