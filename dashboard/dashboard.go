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
// to requests that log in. Mutating actions are POST requests carrying a
// token from a cookie of the page (double-submit), refused unless their
// Origin, or without one their Referer, names the dashboard; ReadOnly
// refuses them all and hides their buttons.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
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

	// SampleEvery is how often the throughput and lateness of a topic are
	// sampled for its charts (default 5 s; negative: no charts, no
	// sampling). The dashboard keeps the last 720 samples per topic (an
	// hour at 5 s), and samples a topic only within 60 intervals of a
	// request for its page: an idle dashboard sends Redis nothing.
	SampleEvery time.Duration
}

// Page sizes.
const (
	waitingPage = 50
	deadPage    = 50
	maxPayload  = 64 << 10 // bytes of a payload shown on a page
	previewLen  = 80       // characters of a payload in a list
)

const csrfCookie = "redisdelay_csrf"

//go:embed templates/*.html static/*
var files embed.FS

type handler struct {
	insp  *redisdelay.Inspector
	opts  Options
	base  string
	pages map[string]*template.Template
	mux   *http.ServeMux
	hist  *history
	hosts allowedHosts
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
	mux.HandleFunc("GET /topic", h.topic)
	mux.HandleFunc("GET /api/topic", h.apiTopic)
	mux.HandleFunc("GET /group", h.group)
	mux.HandleFunc("GET /message", h.message)
	mux.HandleFunc("GET /dead", h.dead)
	mux.HandleFunc("GET /schedules", h.schedules)
	mux.HandleFunc("GET /search", h.search)
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
	if !h.authenticated(r) {
		h.challenge(w)
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
	p := page{Base: h.base, Title: title, ReadOnly: h.opts.ReadOnly, CSRF: h.csrfToken(w, r), Topic: topic, Data: data}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = h.pages[name].Execute(w, p)
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	h.render(w, r, status, "error", http.StatusText(status), "", err.Error())
}

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

// errForbidden marks errors answered with 403.
var errForbidden = errors.New("forbidden")

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
func (h *handler) action(next func(w http.ResponseWriter, r *http.Request, ctx context.Context)) http.HandlerFunc {
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
		next(w, r, ctx)
	}
}

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

type groupJSON struct {
	Group     string `json:"group"`
	Ready     int64  `json:"ready"`
	Pending   int64  `json:"pending"`
	Retry     int64  `json:"retry"`
	Dead      int64  `json:"dead"`
	Consumers int64  `json:"consumers"`
	Paused    bool   `json:"paused"`
	// Grouped counts grouped messages (redisdelay.GroupKey) queued in their
	// groups, not yet taken (not in Ready); ActiveGroups the groups holding
	// queued or unsettled messages.
	Grouped      int64 `json:"grouped"`
	ActiveGroups int64 `json:"active_groups"`
	// Delivered and DeadLettered are the group's rates over the topic
	// page's last sampling interval ("12.5/s"), "–" until two samples.
	Delivered    string `json:"delivered_rate"`
	DeadLettered string `json:"dead_rate"`
}

type topicJSON struct {
	Topic      string      `json:"topic"`
	Partitions int         `json:"partitions"`
	Waiting    int64       `json:"waiting"`
	Stream     int64       `json:"stream"`
	Leased     int         `json:"leased"`
	Alert      string      `json:"alert"` // see schedulingAlert; "" when all is well
	Groups     []groupJSON `json:"groups"`
}

// toTopicJSON is a topic's stats as the pages show them; overdue is
// Inspector.Overdue's (0 when not read).
func toTopicJSON(st redisdelay.TopicStats, overdue time.Duration) topicJSON {
	out := topicJSON{Topic: st.Topic, Partitions: st.Partitions, Waiting: st.Waiting, Stream: st.Stream, Leased: st.Leased,
		Alert: schedulingAlert(st, overdue), Groups: []groupJSON{}}
	for _, g := range st.Groups {
		out.Groups = append(out.Groups, groupJSON{g.Group, g.Ready, g.Pending, g.Retry, g.Dead, g.Consumers, g.Paused, g.Grouped, g.ActiveGroups, "–", "–"})
	}
	slices.SortFunc(out.Groups, func(a, b groupJSON) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// overdueAlert is how late the earliest waiting message must be for the
// topic page to say so when a scheduler holds a lease: a scheduler moves
// due messages within milliseconds, and a standby takes over a stopped
// one's lease within 1.5 check intervals (3 s by default).
const overdueAlert = 10 * time.Second

// schedulingAlert says why a topic's due messages are not delivered, or ""
// when nothing says so. A topic with nothing waiting gets none, whatever
// its leases: a scheduler lets the lease of a partition with nothing to
// schedule lapse (its loop retires, the partition goes dormant), so a
// missing lease there is no fault, and no message is late for it. With
// messages waiting, a running scheduler holds the lease of their
// partitions: none held means that none runs (or one is taking over,
// for a few seconds). Messages overdue by overdueAlert despite a lease
// mean a partition nobody schedules or a scheduler that cannot keep up.
func schedulingAlert(st redisdelay.TopicStats, overdue time.Duration) string {
	// Grouped messages waiting for the topic's first consumer group need
	// no scheduler until then: a partition holding only them has no lease.
	waiting := st.Waiting - st.WaitingForGroup
	if waiting <= 0 {
		return ""
	}
	late := ""
	if overdue >= time.Second {
		late = fmt.Sprintf(", and the earliest is overdue by %s", present.Duration(overdue))
	}
	if st.Leased == 0 {
		return fmt.Sprintf("No scheduler holds this topic's lease: its %d waiting message(s) are not moved to the consumer groups when due%s. "+
			"Run a redisdelay Manager, or a subscriber without DisableScheduler, for this topic.", waiting, late)
	}
	if overdue >= overdueAlert {
		return fmt.Sprintf("Waiting messages are late: the earliest is overdue by %s, although a scheduler holds the lease of %d of %d partition(s). "+
			"A partition without one is not scheduled, or the scheduler cannot keep up: see its logs.", present.Duration(overdue), st.Leased, st.Partitions)
	}
	return ""
}

func (h *handler) allStats(ctx context.Context) ([]topicJSON, error) {
	topics, err := h.insp.Topics(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(topics)
	out := make([]topicJSON, 0, len(topics))
	for _, t := range topics {
		st, err := h.insp.Stats(ctx, t)
		if err != nil {
			return nil, err
		}
		out = append(out, toTopicJSON(st, 0)) // Overdue left out: a round trip per topic
	}
	return out, nil
}

type topicsData struct {
	Topics  []topicJSON
	Servers []redisdelay.RedisServer
}

func (h *handler) topics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	all, err := h.allStats(ctx)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	// The server's version, memory and maxmemory policy: one INFO per
	// server, read with the page (not refreshed live).
	servers, err := h.insp.Servers(ctx)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	h.render(w, r, http.StatusOK, "topics", "Topics", "", topicsData{all, servers})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *handler) apiTopics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	all, err := h.allStats(ctx)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"topics": all})
}

// One topic: groups, due histogram, waiting messages.

// bucket is a bar of the due histogram.
type bucket struct {
	Label string `json:"label"`
	Count int64  `json:"count"`
}

// histogramSpans are the edges of the due histogram after now.
var histogramSpans = []struct {
	d     time.Duration
	label string
}{
	{time.Minute, "< 1 min"}, {5 * time.Minute, "1–5 min"}, {15 * time.Minute, "5–15 min"},
	{time.Hour, "15–60 min"}, {6 * time.Hour, "1–6 h"}, {24 * time.Hour, "6–24 h"},
	{7 * 24 * time.Hour, "1–7 days"}, {30 * 24 * time.Hour, "7–30 days"},
}

func (h *handler) histogram(ctx context.Context, topic string, now time.Time) ([]bucket, error) {
	edges := []time.Time{now}
	for _, s := range histogramSpans {
		edges = append(edges, now.Add(s.d))
	}
	counts, err := h.insp.DueHistogram(ctx, topic, edges)
	if err != nil {
		return nil, err
	}
	out := []bucket{{"overdue", counts[0]}}
	for n, s := range histogramSpans {
		out = append(out, bucket{s.label, counts[n+1]})
	}
	return append(out, bucket{"> 30 days", counts[len(counts)-1]}), nil
}

type waitingRow struct {
	UUID, Key, Preview, Corrupt string
	Due                         time.Time
	Size                        int
}

type topicData struct {
	Stats     topicJSON
	Histogram []bucket
	Max       int64
	Waiting   []waitingRow
	Offset    int
	Prev      int
	Next      int // 0: no next page
	Now       time.Time
	Charts    []chart
}

func (h *handler) topic(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	topic := r.URL.Query().Get("t")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	h.hist.watch(topic)
	offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
	offset = max(offset, 0)
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	overdue, err := h.overdue(ctx, st)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	now := time.Now()
	d := topicData{Stats: h.withRates(toTopicJSON(st, overdue)), Offset: offset, Prev: max(offset-waitingPage, 0), Now: now, Charts: h.hist.charts(topic)}
	if d.Histogram, err = h.histogram(ctx, topic, now); err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	for _, b := range d.Histogram {
		d.Max = max(d.Max, b.Count)
	}
	msgs, err := h.insp.Waiting(ctx, topic, offset, waitingPage)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	for _, m := range msgs {
		d.Waiting = append(d.Waiting, waitingRow{
			UUID: m.Message.UUID, Key: m.Message.Metadata.Get(redisdelay.BusinessKey), Corrupt: m.Corrupt,
			Preview: preview(m.Message.Payload), Due: m.Due, Size: len(m.Message.Payload),
		})
	}
	if len(msgs) == waitingPage {
		d.Next = offset + waitingPage
	}
	h.render(w, r, http.StatusOK, "topic", "Topic "+topic, topic, d)
}

func (h *handler) apiTopic(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	topic := r.URL.Query().Get("t")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	h.hist.watch(topic)
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	overdue, err := h.overdue(ctx, st)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	hist, err := h.histogram(ctx, topic, time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"stats": h.withRates(toTopicJSON(st, overdue)), "histogram": hist, "charts": h.hist.charts(topic)})
}

// withRates adds the consumer groups' throughput the sampler measured.
func (h *handler) withRates(t topicJSON) topicJSON {
	rates := h.hist.groupRates(t.Topic)
	for n := range t.Groups {
		if r, ok := rates[t.Groups[n].Group]; ok {
			t.Groups[n].Delivered, t.Groups[n].DeadLettered = rateText(r.delivered), rateText(r.dead)
		}
	}
	return t
}

// rateText is a rate per second, "?" when unknown.
func rateText(r float64) string {
	if r < 0 {
		return "?"
	}
	return formatValue(r) + "/s"
}

// overdue is how late the topic's earliest waiting message is, read only
// when some wait.
func (h *handler) overdue(ctx context.Context, st redisdelay.TopicStats) (time.Duration, error) {
	if st.Waiting == 0 {
		return 0, nil
	}
	return h.insp.Overdue(ctx, st.Topic)
}

// A waiting message.

type messageData struct {
	Topic    string
	Found    bool
	By, Q    string
	Message  waitingRow
	Metadata [][2]string
	Payload  payloadView
	// Dead are the dead letters with the UUID searched, looked for when no
	// message with it waits; Unsearched says which dead letters were not
	// read (see findDead).
	Dead       []deadFound
	Unsearched []string
	DeadScan   int
}

// deadFound is a dead letter found by UUID, and its group.
type deadFound struct {
	Group string
	deadRow
}

// Bounds of the search of dead letters by UUID (findDead); variables for
// the tests.
var (
	deadScan     = 10_000 // dead letters read per group at most
	deadScanPage = 1_000
)

// findDead looks for the dead letters of a message UUID in every group of
// the topic, as "redisdelay show" does, but reads at most the oldest
// deadScan of each group (a dead letter is found by reading it: Redis
// indexes them by time only), which bounds a search to a few seconds of
// Redis work and some MB of transfer per group however many are kept
// (MaxDeadLetters, 100,000 by default). It returns what it found, and for
// each group holding more, how many it left unread.
func (h *handler) findDead(ctx context.Context, topic, uuid string) (found []deadFound, unsearched []string, err error) {
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	groups := toTopicJSON(st, 0).Groups // by name
	for _, g := range groups {
		read := 0
		for after := ""; read < deadScan; {
			page, err := h.insp.DeadLetters(ctx, topic, g.Group, after, deadScanPage)
			if err != nil {
				return nil, nil, err
			}
			for _, l := range page {
				if l.Message != nil && l.Message.UUID == uuid {
					found = append(found, deadFound{g.Group, toDeadRow(l)})
				}
			}
			read += len(page)
			if len(page) < deadScanPage {
				break
			}
			after = page[len(page)-1].ID
		}
		if read >= deadScan && g.Dead > int64(read) {
			unsearched = append(unsearched, fmt.Sprintf("group %q: the newest %d of its %d dead letters", g.Group, g.Dead-int64(read), g.Dead))
		}
	}
	return found, unsearched, nil
}

func (h *handler) message(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	topic, by, value := q.Get("t"), q.Get("by"), strings.TrimSpace(q.Get("q"))
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	if value == "" {
		h.fail(w, r, http.StatusBadRequest, errors.New("nothing to search for: give a message UUID or a business key"))
		return
	}
	var (
		m   redisdelay.WaitingMessage
		ok  bool
		err error
	)
	switch by {
	case "", "uuid":
		by = "uuid"
		m, ok, err = h.insp.FindWaiting(ctx, topic, value)
	case "key":
		m, ok, err = h.insp.FindWaitingKey(ctx, topic, value)
	default:
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("search by %q: use uuid or key", by))
		return
	}
	d := messageData{Topic: topic, Found: ok, By: by, Q: value, DeadScan: deadScan}
	if err == nil && !ok && by == "uuid" {
		d.Dead, d.Unsearched, err = h.findDead(ctx, topic, value)
	}
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if ok {
		d.Message = waitingRow{UUID: m.Message.UUID, Key: m.Message.Metadata.Get(redisdelay.BusinessKey), Corrupt: m.Corrupt, Due: m.Due, Size: len(m.Message.Payload)}
		d.Metadata = sortedMetadata(m.Message.Metadata)
		d.Payload = viewPayload(m.Message.Payload)
	}
	status := http.StatusOK
	if !ok && len(d.Dead) == 0 {
		status = http.StatusNotFound
	}
	h.render(w, r, status, "message", "Message", topic, d)
}

// confirmData is the confirmation step of an action: the same form again,
// with confirm=yes.
type confirmData struct {
	Action string // the form's path
	Fields [][2]string
	Items  []string
	More   int
	Prompt string
	Back   string
	Danger bool
}

type resultData struct {
	Text string
	Back string
}

func (h *handler) confirm(w http.ResponseWriter, r *http.Request, topic string, d confirmData) {
	d.Fields = append(d.Fields, [2]string{"confirm", "yes"})
	if len(d.Items) > 100 {
		d.More, d.Items = len(d.Items)-100, d.Items[:100]
	}
	h.render(w, r, http.StatusOK, "confirm", "Confirm", topic, d)
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request, ctx context.Context) {
	topic, uuid := r.PostFormValue("t"), r.PostFormValue("uuid")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	if uuid == "" {
		h.fail(w, r, http.StatusBadRequest, errors.New("no message UUID given to cancel"))
		return
	}
	back := h.link("/topic", "t", topic)
	if r.PostFormValue("confirm") != "yes" {
		h.confirm(w, r, topic, confirmData{
			Action: h.link("/cancel"), Fields: [][2]string{{"t", topic}, {"uuid", uuid}},
			Items: []string{uuid}, Danger: true, Back: h.link("/message", "t", topic, "q", uuid),
			Prompt: fmt.Sprintf("Cancel this waiting message of topic %q? It will never be delivered.", topic),
		})
		return
	}
	ok, err := h.insp.Cancel(ctx, topic, uuid)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	text := fmt.Sprintf("Message %s cancelled.", uuid)
	if !ok {
		text = fmt.Sprintf("Message %s was not waiting any more (already due, or cancelled): nothing changed.", uuid)
	}
	h.render(w, r, http.StatusOK, "result", "Cancel", topic, resultData{text, back})
}

// Dead letters.

type deadRow struct {
	ID, UUID, Reason string
	Attempts         int
	Time             time.Time
	Metadata         [][2]string
	Payload          payloadView
}

func toDeadRow(l redisdelay.DeadLetter) deadRow {
	row := deadRow{ID: l.ID, Reason: l.Reason, Attempts: l.Attempts, Time: l.Time}
	if l.Message != nil {
		row.UUID, row.Metadata, row.Payload = l.Message.UUID, sortedMetadata(l.Message.Metadata), viewPayload(l.Message.Payload)
	} else {
		row.Payload = viewPayload(l.Body)
	}
	return row
}

type deadData struct {
	Topic  string
	Groups []groupJSON
	Group  string
	Count  int64
	Rows   []deadRow
	After  string
	Next   string
}

func (h *handler) dead(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	topic, group, after := q.Get("t"), q.Get("g"), q.Get("after")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	d := deadData{Topic: topic, Groups: toTopicJSON(st, 0).Groups, Group: group, After: after}
	if group == "" && len(d.Groups) > 0 {
		d.Group = d.Groups[0].Group
	}
	known := false
	for _, g := range d.Groups {
		if g.Group == d.Group {
			known, d.Count = true, g.Dead
		}
	}
	if d.Group != "" && !known {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("topic %q has no consumer group %q", topic, d.Group))
		return
	}
	if known {
		letters, err := h.insp.DeadLetters(ctx, topic, d.Group, after, deadPage)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err)
			return
		}
		for _, l := range letters {
			d.Rows = append(d.Rows, toDeadRow(l))
		}
		if len(letters) == deadPage {
			d.Next = letters[len(letters)-1].ID
		}
	}
	h.render(w, r, http.StatusOK, "dead", "Dead letters of "+topic, topic, d)
}

func (h *handler) deadAction(w http.ResponseWriter, r *http.Request, ctx context.Context) {
	topic, group, action := r.PostFormValue("t"), r.PostFormValue("g"), r.PostFormValue("action")
	ids := r.PostForm["id"]
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	back := h.link("/dead", "t", topic, "g", group)
	var prompt string
	switch action {
	case "requeue", "delete":
		if len(ids) == 0 {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("no dead letter selected to %s: tick some first", action))
			return
		}
		prompt = fmt.Sprintf("%s %d dead letter(s) of group %q in topic %q?", map[string]string{"requeue": "Requeue", "delete": "Delete for good"}[action], len(ids), group, topic)
	case "requeue-all":
		prompt = fmt.Sprintf("Requeue EVERY dead letter of group %q in topic %q?", group, topic)
	case "purge":
		prompt = fmt.Sprintf("Delete EVERY dead letter of group %q in topic %q for good?", group, topic)
	default:
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown action %q: use requeue, delete, requeue-all or purge", action))
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		fields := [][2]string{{"t", topic}, {"g", group}, {"action", action}}
		for _, id := range ids {
			fields = append(fields, [2]string{"id", id})
		}
		h.confirm(w, r, topic, confirmData{Action: h.link("/dead/action"), Fields: fields, Items: ids, Prompt: prompt, Back: back,
			Danger: action == "delete" || action == "purge"})
		return
	}
	var (
		done int
		err  error
	)
	switch action {
	case "requeue", "delete":
		for _, id := range ids {
			var ok bool
			if action == "requeue" {
				ok, err = h.insp.RequeueDeadLetter(ctx, topic, group, id)
			} else {
				ok, err = h.insp.DeleteDeadLetter(ctx, topic, group, id)
			}
			if err != nil {
				break
			}
			if ok {
				done++
			}
		}
	case "requeue-all":
		done, err = h.insp.RequeueDeadLetters(ctx, topic, group)
	case "purge":
		var n int64
		n, err = h.insp.PurgeDeadLetters(ctx, topic, group)
		done = int(n)
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("after %d done: %w", done, err))
		return
	}
	verb := map[string]string{"requeue": "Requeued", "requeue-all": "Requeued", "delete": "Deleted", "purge": "Deleted"}[action]
	text := fmt.Sprintf("%s %d dead letter(s) of group %q.", verb, done, group)
	if (action == "requeue" || action == "delete") && done < len(ids) {
		text += fmt.Sprintf(" %d were gone already.", len(ids)-done)
	}
	h.render(w, r, http.StatusOK, "result", "Dead letters", topic, resultData{text, back})
}

// Reschedule.

// atLayouts are the forms of the "at" field: RFC 3339 carries its zone;
// the others, without one, are UTC, as the form says.
var atLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04", "2006-01-02T15:04"}

// parseDue reads the new due time of a reschedule form: in (a duration
// from now, as time.ParseDuration reads it) or at (a UTC time). It returns
// the due time and how the prompt says it.
func parseDue(in, at string, now time.Time) (time.Time, string, error) {
	in, at = strings.TrimSpace(in), strings.TrimSpace(at)
	switch {
	case in != "" && at != "":
		return time.Time{}, "", errors.New(`give either "deliver in" or "at", not both`)
	case in != "":
		d, err := time.ParseDuration(in)
		if err != nil {
			return time.Time{}, "", fmt.Errorf("%q is not a duration: use a number with a unit, such as 90s, 10m or 2h30m (units ns, us, ms, s, m, h)", in)
		}
		if d < 0 {
			return time.Time{}, "", fmt.Errorf("%q is negative: give how long from now, such as 10m (0s delivers at once)", in)
		}
		return now.Add(d), fmt.Sprintf("in %s from when you confirm (about %s)", present.Duration(d), now.Add(d).UTC().Format("2006-01-02 15:04:05 UTC")), nil
	case at != "":
		for _, layout := range atLayouts {
			if t, err := time.Parse(layout, at); err == nil {
				what := "at " + t.UTC().Format("2006-01-02 15:04:05.000 UTC")
				if !t.After(now) {
					what += ", which has passed: it will be due at once"
				}
				return t, what, nil
			}
		}
		return time.Time{}, "", fmt.Errorf("%q is not a time: use UTC such as 2030-01-02 15:04:05, or RFC 3339 with a zone such as 2030-01-02T15:04:05+02:00", at)
	}
	return time.Time{}, "", errors.New(`no new due time given: fill "deliver in" (such as 10m) or "at" (a UTC time)`)
}

// messageRef reads the waiting message a form names, by UUID or business
// key, for an action (verb), and answers the request itself when it names
// none or an unknown topic (ok false).
func (h *handler) messageRef(w http.ResponseWriter, r *http.Request, ctx context.Context, verb string) (topic, by, value, what string, ok bool) {
	topic, uuid, key := r.PostFormValue("t"), strings.TrimSpace(r.PostFormValue("uuid")), strings.TrimSpace(r.PostFormValue("key"))
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return "", "", "", "", false
	}
	switch {
	case uuid == "" && key == "":
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("no message UUID or business key given to %s", verb))
		return "", "", "", "", false
	case uuid == "":
		return topic, "key", key, fmt.Sprintf("the message holding business key %q", key), true
	}
	return topic, "uuid", uuid, "message " + uuid, true
}

func (h *handler) reschedule(w http.ResponseWriter, r *http.Request, ctx context.Context) {
	topic, by, value, what, ok := h.messageRef(w, r, ctx, "reschedule")
	if !ok {
		return
	}
	in, at := r.PostFormValue("in"), r.PostFormValue("at")
	// The duration counts from the confirmation, not from the first step:
	// the confirmation page carries what the operator typed.
	due, when, err := parseDue(in, at, time.Now())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	msgLink := h.link("/message", "t", topic, "by", by, "q", value)
	if by == "uuid" {
		msgLink = h.link("/message", "t", topic, "q", value)
	}
	if r.PostFormValue("confirm") != "yes" {
		h.confirm(w, r, topic, confirmData{
			Action: h.link("/reschedule"), Fields: [][2]string{{"t", topic}, {by, value}, {"in", in}, {"at", at}},
			Items: []string{value}, Back: msgLink,
			Prompt: fmt.Sprintf("Reschedule %s of topic %q to be due %s?", what, topic, when),
		})
		return
	}
	var moved bool
	if by == "uuid" {
		moved, err = h.insp.Reschedule(ctx, topic, value, due)
	} else {
		moved, err = h.insp.RescheduleKey(ctx, topic, value, due)
	}
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, redisdelay.ErrInvalidDelay) || errors.Is(err, redisdelay.ErrInvalidMessage) {
			status = http.StatusBadRequest
		}
		h.fail(w, r, status, err)
		return
	}
	if !moved {
		text := fmt.Sprintf("Nothing changed: %s is no longer waiting in topic %q (already due and on its way to subscribers, delivered, or cancelled).", what, topic)
		h.render(w, r, http.StatusOK, "result", "Reschedule", topic, resultData{text, h.link("/topic", "t", topic)})
		return
	}
	// Read the due time back: Redis counted the delay from its own now.
	var m redisdelay.WaitingMessage
	var still bool
	if by == "uuid" {
		m, still, err = h.insp.FindWaiting(ctx, topic, value)
	} else {
		m, still, err = h.insp.FindWaitingKey(ctx, topic, value)
	}
	if err == nil && still {
		due = m.Due
	}
	text := fmt.Sprintf("Moved: %s rescheduled, now due at %s (%s).", what, due.UTC().Format("2006-01-02 15:04:05.000 UTC"), since(due)) + h.schedulerMissing(ctx, topic)
	h.render(w, r, http.StatusOK, "result", "Reschedule", topic, resultData{text, msgLink})
}

// Run now.

// runNow makes one waiting message due now (Inspector.RunNow, RunNowKey),
// after a confirmation.
func (h *handler) runNow(w http.ResponseWriter, r *http.Request, ctx context.Context) {
	topic, by, value, what, ok := h.messageRef(w, r, ctx, "run now")
	if !ok {
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		h.confirm(w, r, topic, confirmData{
			Action: h.link("/runnow"), Fields: [][2]string{{"t", topic}, {by, value}}, Items: []string{value},
			Back:   h.link("/message", "t", topic, "by", by, "q", value),
			Prompt: fmt.Sprintf("Run %s of topic %q now? It becomes due at once: a scheduler moves it to the consumer groups, which act on it.", what, topic),
		})
		return
	}
	var ran bool
	var err error
	if by == "uuid" {
		ran, err = h.insp.RunNow(ctx, topic, value)
	} else {
		ran, err = h.insp.RunNowKey(ctx, topic, value)
	}
	if err != nil {
		h.fail(w, r, inspectorStatus(err), err)
		return
	}
	text := fmt.Sprintf("Nothing changed: %s is no longer waiting in topic %q (already due and on its way to subscribers, delivered, or cancelled).", what, topic)
	if ran {
		text = fmt.Sprintf("Run now: %s is due now; a scheduler moves it to the consumer groups.", what) + h.schedulerMissing(ctx, topic)
	}
	h.render(w, r, http.StatusOK, "result", "Run now", topic, resultData{text, h.link("/topic", "t", topic)})
}

// schedulerWait is how long an action that made messages due waits for a
// scheduler to hold the topic's lease before saying that none does: the
// action woke the schedulers, and one whose loop retired takes the lease
// within milliseconds, a standby within 1.5 CheckInterval (3 s).
var schedulerWait = 3 * time.Second

// schedulerMissing says, after an action that made messages due, that no
// scheduler holds the topic's lease and so nothing delivers them; "" when
// one took it within schedulerWait.
func (h *handler) schedulerMissing(ctx context.Context, topic string) string {
	if missing, _ := present.SchedulerMissing(ctx, h.insp, topic, schedulerWait); !missing {
		return ""
	}
	return " But no scheduler holds this topic's lease: nothing moves due messages to the consumer groups. " +
		"Run a redisdelay Manager, or a subscriber without DisableScheduler, for this topic."
}

// Pause and resume a consumer group.

func (h *handler) groupAction(w http.ResponseWriter, r *http.Request, ctx context.Context) {
	topic, group, action := r.PostFormValue("t"), r.PostFormValue("g"), r.PostFormValue("action")
	if status, err := h.knownTopic(ctx, topic); err != nil {
		h.fail(w, r, status, err)
		return
	}
	if action != "pause" && action != "resume" {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown action %q on a consumer group: use pause or resume", action))
		return
	}
	// Only a listed group: the Inspector would pause a group that does not
	// exist yet, and a typo would then pause nothing visible.
	st, err := h.insp.Stats(ctx, topic)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if !slices.ContainsFunc(st.Groups, func(g redisdelay.GroupStats) bool { return g.Group == group }) {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("topic %q has no consumer group %q: pick one on the topic's page", topic, group))
		return
	}
	back := h.link("/topic", "t", topic)
	// Resume only undoes a pause: no confirmation.
	if action == "pause" && r.PostFormValue("confirm") != "yes" {
		h.confirm(w, r, topic, confirmData{
			Action: h.link("/group"), Fields: [][2]string{{"t", topic}, {"g", group}, {"action", action}}, Back: back,
			Prompt: fmt.Sprintf("Pause consumer group %q of topic %q? Its subscribers, in every process, stop fetching new messages until it is resumed; due messages accumulate as ready.", group, topic),
		})
		return
	}
	var text string
	if action == "pause" {
		if err = h.insp.Pause(ctx, topic, group); err == nil {
			text = fmt.Sprintf("Paused consumer group %q of topic %q: its subscribers fetch no new messages until it is resumed.", group, topic)
		}
	} else {
		var was bool
		if was, err = h.insp.Resume(ctx, topic, group); err == nil {
			text = fmt.Sprintf("Resumed consumer group %q of topic %q: its subscribers fetch again at once.", group, topic)
			if !was {
				text = fmt.Sprintf("Consumer group %q of topic %q was not paused: nothing changed.", group, topic)
			}
		}
	}
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	h.render(w, r, http.StatusOK, "result", "Consumer group", topic, resultData{text, back})
}
