package dashboard

// Search by filter (metadata, business-key prefix, due or death time) and
// bulk actions on what a filter selects: Inspector.SearchWaiting,
// SearchDeadLetters, CancelWhere, RescheduleWhere, RequeueDeadLettersWhere
// and DeleteDeadLettersWhere.
//
// Both stay bounded per request. A search page calls the Inspector at most
// searchCalls times (each reads at most 10,000 stored messages) and links
// the next page with the Inspector's cursor. A bulk action runs in chunks:
// each POST works for at most Options.BulkStep, between two batches of 1,000
// stored messages, and answers a page that carries the Inspector's
// resumable cursor in a form, which the page's script submits again at
// once (a Continue button without it). The dashboard keeps no state: a
// run survives a restart of the dashboard and works behind several
// replicas, every chunk passes the token, Origin, Host, read-only and
// Authorize checks again, and stopping is leaving the page.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// Bounds of a search page; variables for the tests.
var (
	searchPage  = 100 // matches a search page shows at most
	searchCalls = 5   // Inspector searches per page at most
)

// searchRead is how many stored messages one Inspector search reads at
// most (SearchWaiting, SearchDeadLetters).
const searchRead = 10_000

// filterForm is a search as its form gives it, carried unchanged from page
// to page: the topic, what is searched, the criteria as typed.
type filterForm struct {
	Topic  string
	Target string   // "waiting", or "dead:" and a consumer group
	Meta   []string // key=value, blank ones dropped
	Key    string   // business-key prefix
	From   string
	To     string
	All    bool // act on every message when the filter is empty
}

func readFilterForm(v url.Values) filterForm {
	f := filterForm{Topic: v.Get("t"), Target: strings.TrimSpace(v.Get("target")), Key: strings.TrimSpace(v.Get("key")),
		From: strings.TrimSpace(v.Get("from")), To: strings.TrimSpace(v.Get("to")), All: v.Get("all") == "yes"}
	for _, m := range v["meta"] {
		if m = strings.TrimSpace(m); m != "" {
			f.Meta = append(f.Meta, m)
		}
	}
	if f.Target == "" {
		f.Target = "waiting"
	}
	return f
}

// group is the consumer group of a dead-letter target, "" for waiting
// messages.
func (f filterForm) group() (string, error) {
	if f.Target == "waiting" {
		return "", nil
	}
	if g, ok := strings.CutPrefix(f.Target, "dead:"); ok && g != "" {
		return g, nil
	}
	return "", fmt.Errorf("cannot search %q: search \"waiting\" messages, or the dead letters of a consumer group as \"dead:<group>\"", f.Target)
}

// filter reads the criteria; its errors say what to type.
func (f filterForm) filter() (redisdelay.Filter, error) {
	var out redisdelay.Filter
	for _, m := range f.Meta {
		k, v, ok := strings.Cut(m, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return out, fmt.Errorf("metadata criterion %q has no '=': write key=value, such as tenant=acme", m)
		case k == "":
			return out, fmt.Errorf("metadata criterion %q has no key before '=': write key=value, such as tenant=acme", m)
		}
		if was, dup := out.Metadata[k]; dup && was != v {
			return out, fmt.Errorf("metadata key %q is given twice, as %q and %q: a message holds one value per key", k, was, v)
		}
		if out.Metadata == nil {
			out.Metadata = map[string]string{}
		}
		out.Metadata[k] = v
	}
	out.BusinessKeyPrefix = f.Key
	var err error
	if out.From, err = parseAt("from", f.From); err != nil {
		return out, err
	}
	if out.To, err = parseAt("to", f.To); err != nil {
		return out, err
	}
	if !out.From.IsZero() && !out.To.IsZero() && !out.To.After(out.From) {
		return out, fmt.Errorf("\"to\" (%s) is not after \"from\" (%s): give an increasing range, or leave one side empty",
			out.To.UTC().Format(timeUTC), out.From.UTC().Format(timeUTC))
	}
	return out, nil
}

const timeUTC = "2006-01-02 15:04:05.000 UTC"

// parseAt reads a time field: UTC without a zone, or RFC 3339 with one;
// empty is the zero time (that side of the range open).
func parseAt(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range atLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q (%s) is not a time: use UTC such as 2030-01-02 15:04 or 2030-01-02 15:04:05, or RFC 3339 with a zone such as 2030-01-02T15:04:05+02:00", s, field)
}

// criteria says what a filter selects, one line a criterion.
func criteria(f redisdelay.Filter, group string) []string {
	var out []string
	keys := make([]string, 0, len(f.Metadata))
	for k := range f.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, fmt.Sprintf("metadata %q is %q", k, f.Metadata[k]))
	}
	if f.BusinessKeyPrefix != "" {
		out = append(out, fmt.Sprintf("business key starts with %q", f.BusinessKeyPrefix))
	}
	when := "due"
	if group != "" {
		when = "died"
	}
	if !f.From.IsZero() {
		out = append(out, fmt.Sprintf("%s at or after %s", when, f.From.UTC().Format(timeUTC)))
	}
	if !f.To.IsZero() {
		out = append(out, fmt.Sprintf("%s before %s", when, f.To.UTC().Format(timeUTC)))
	}
	if len(out) == 0 {
		what := "every waiting message of the topic"
		if group != "" {
			what = fmt.Sprintf("every dead letter of group %q", group)
		}
		out = append(out, "no criterion: "+what)
	}
	return out
}

func emptyFilter(f redisdelay.Filter) bool {
	return len(f.Metadata) == 0 && f.BusinessKeyPrefix == "" && f.From.IsZero() && f.To.IsZero()
}

// fields are the form's values as hidden fields, for the bulk forms.
func (f filterForm) fields() [][2]string {
	out := [][2]string{{"t", f.Topic}, {"target", f.Target}}
	for _, m := range f.Meta {
		out = append(out, [2]string{"meta", m})
	}
	for _, kv := range [][2]string{{"key", f.Key}, {"from", f.From}, {"to", f.To}} {
		if kv[1] != "" {
			out = append(out, kv)
		}
	}
	if f.All {
		out = append(out, [2]string{"all", "yes"})
	}
	return out
}

// searchURL is the search page of the form, from cursor on ("": the
// first page); read counts the stored messages read since the last match.
func (h *handler) searchURL(f filterForm, cursor string, read int64) string {
	v := url.Values{"s": {"1"}}
	for _, kv := range f.fields() {
		if kv[0] != "all" {
			v.Add(kv[0], kv[1])
		}
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	if read > 0 {
		v.Set("read", strconv.FormatInt(read, 10))
	}
	return h.base + "/search?" + v.Encode()
}

// inspectorStatus is the status of an Inspector error: 502 when Redis
// failed or could not be reached, 400 when the Inspector refused the
// request's input (a cursor it did not give, a due time out of range).
func inspectorStatus(err error) int {
	var (
		rerr redis.Error
		nerr net.Error
	)
	switch {
	case errors.Is(err, redisdelay.ErrInvalidDelay), errors.Is(err, redisdelay.ErrEmptyFilter):
		return http.StatusBadRequest
	case errors.As(err, &rerr), errors.As(err, &nerr), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout):
		return http.StatusBadGateway
	}
	return http.StatusBadRequest
}

// searchTarget checks the topic and the target's group, and reads the
// topic's groups for the form.
func (h *handler) searchTarget(ctx context.Context, f filterForm) (group string, groups []groupJSON, status int, err error) {
	if status, err := h.knownTopic(ctx, f.Topic); err != nil {
		return "", nil, status, err
	}
	if group, err = f.group(); err != nil {
		return "", nil, http.StatusBadRequest, err
	}
	st, err := h.insp.Stats(ctx, f.Topic)
	if err != nil {
		return "", nil, http.StatusBadGateway, err
	}
	groups = toTopicJSON(st, 0).Groups
	if group != "" && !slices.ContainsFunc(groups, func(g groupJSON) bool { return g.Group == group }) {
		return "", nil, http.StatusNotFound, fmt.Errorf("topic %q has no consumer group %q: pick one in the search form", f.Topic, group)
	}
	return group, groups, 0, nil
}

// Search.

type targetOption struct {
	Value, Label string
	Selected     bool
}

type searchRow struct {
	waitingRow
	Metadata [][2]string
}

type searchData struct {
	Form     filterForm
	Group    string // of a dead-letter search
	Targets  []targetOption
	MetaRows []string // the metadata inputs: those given and blank ones
	Ran      bool
	Criteria []string
	Empty    bool // the filter selects everything
	Waiting  []searchRow
	Dead     []deadRow
	Count    int
	First    string // the first page, when this is not it
	Next     string // the next page, "" at the end
	// NoMatchRead counts the stored messages read since the last match,
	// for a page without one that did not reach the end.
	NoMatchRead int64
	PageRead    int64 // stored messages a page reads at most
	PageMax     int   // matches a page shows at most
	Fields      [][2]string
}

func (h *handler) search(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	f := readFilterForm(q)
	group, groups, status, err := h.searchTarget(ctx, f)
	if err != nil {
		h.fail(w, r, status, err)
		return
	}
	d := searchData{Form: f, Group: group, MetaRows: append(slices.Clone(f.Meta), "", ""), PageRead: int64(searchCalls) * searchRead, PageMax: searchPage,
		Targets: []targetOption{{"waiting", "waiting messages", group == ""}}}
	for len(d.MetaRows) < 3 {
		d.MetaRows = append(d.MetaRows, "")
	}
	for _, g := range groups {
		d.Targets = append(d.Targets, targetOption{"dead:" + g.Group, fmt.Sprintf("dead letters of group %s (%d)", visible(g.Group), g.Dead), g.Group == group})
	}
	title := "Search " + f.Topic
	if q.Get("s") == "" { // the form alone: nothing read yet
		h.render(w, r, http.StatusOK, "search", title, f.Topic, d)
		return
	}
	filter, err := f.filter()
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	d.Ran, d.Criteria, d.Empty, d.Fields = true, criteria(filter, group), emptyFilter(filter), f.fields()
	cursor := q.Get("cursor")
	if cursor != "" {
		d.First = h.searchURL(f, "", 0)
	}
	calls := 0
	for calls < searchCalls {
		calls++
		want := searchPage - d.Count
		var next string
		if group == "" {
			var page []redisdelay.WaitingMessage
			page, next, err = h.insp.SearchWaiting(ctx, f.Topic, filter, cursor, want)
			for _, m := range page {
				d.Waiting = append(d.Waiting, searchRow{waitingRow{
					UUID: m.Message.UUID, Key: m.Message.Metadata.Get(redisdelay.BusinessKey), Corrupt: m.Corrupt,
					Preview: preview(m.Message.Payload), Due: m.Due, Size: len(m.Message.Payload),
				}, listedMetadata(m.Message.Metadata)})
			}
			d.Count += len(page)
		} else {
			var page []redisdelay.DeadLetter
			page, next, err = h.insp.SearchDeadLetters(ctx, f.Topic, group, filter, cursor, want)
			for _, l := range page {
				d.Dead = append(d.Dead, toDeadRow(l))
			}
			d.Count += len(page)
		}
		if err != nil {
			h.fail(w, r, inspectorStatus(err), err)
			return
		}
		cursor = next
		if cursor == "" || d.Count >= searchPage {
			break
		}
	}
	if cursor != "" {
		var read int64
		if d.Count == 0 {
			// Every call read its whole budget without a match.
			prev, _ := strconv.ParseInt(q.Get("read"), 10, 64)
			d.NoMatchRead = max(prev, 0) + int64(calls)*searchRead
			read = d.NoMatchRead
		}
		d.Next = h.searchURL(f, cursor, read)
	}
	h.render(w, r, http.StatusOK, "search", title, f.Topic, d)
}

// listedMetadata is a waiting message's metadata for the list, without
// the delay's own keys (_watermill_delayed_until and _for), which keep the values the
// message was published with: the Due column is the truth.
func listedMetadata(m message.Metadata) [][2]string {
	all := sortedMetadata(m)
	return slices.DeleteFunc(all, func(kv [2]string) bool { return kv[0] == delay.DelayedUntilKey || kv[0] == delay.DelayedForKey })
}

// Bulk actions.

// bulkVerbs are the bulk actions: what the confirmation asks, and what the
// progress and the result say.
var bulkVerbs = map[string]struct{ ask, doing, done string }{
	"cancel":     {"Cancel", "Cancelling", "Cancelled"},
	"reschedule": {"Reschedule", "Rescheduling", "Rescheduled"},
	"requeue":    {"Requeue", "Requeuing", "Requeued"},
	"delete":     {"Delete", "Deleting", "Deleted"},
	"runnow":     {"Run now", "Running now", "Made due now"},
}

// errChunkDone stops a bulk request between two batches once it has
// worked for Options.BulkStep.
var errChunkDone = errors.New("the request's share of the work is done")

// bulkCounts are a run's counts over its requests, carried in the form.
type bulkCounts struct {
	Scanned, Matched, Done int64
}

func readCounts(v url.Values) bulkCounts {
	n := func(name string) int64 {
		x, _ := strconv.ParseInt(v.Get(name), 10, 64)
		return max(x, 0)
	}
	return bulkCounts{n("scanned"), n("matched"), n("done")}
}

type bulkData struct {
	Title    string
	Criteria []string
	Status   string
	Percent  int64 // of the expected matches acted on; -1: unknown
	Action   string
	Fields   [][2]string
	Back     string
	Chunk    time.Duration
}

func (h *handler) bulk(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	v := r.PostForm
	f := readFilterForm(v)
	action, phase, cursor := v.Get("action"), v.Get("phase"), v.Get("cursor")
	verb, ok := bulkVerbs[action]
	if !ok {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown bulk action %q: use cancel, reschedule or runnow (waiting messages), requeue or delete (dead letters)", action))
		return
	}
	group, _, status, err := h.searchTarget(ctx, f)
	if err != nil {
		h.fail(w, r, status, err)
		return
	}
	switch {
	case group == "" && (action == "requeue" || action == "delete"):
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%s acts on dead letters: search the dead letters of a consumer group (target dead:<group>), not waiting messages", action))
		return
	case group != "" && (action == "cancel" || action == "reschedule" || action == "runnow"):
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%s acts on waiting messages: search them (target waiting), not dead letters", action))
		return
	}
	filter, err := f.filter()
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	what := fmt.Sprintf("waiting messages of topic %q", f.Topic)
	if group != "" {
		what = fmt.Sprintf("dead letters of group %q in topic %q", group, f.Topic)
	}
	if emptyFilter(filter) && !f.All {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("the filter is empty: it selects every one of the %s. Give a criterion, or tick \"all messages\" to %s all of them",
			what, strings.ToLower(verb.ask)))
		return
	}
	if phase == "" {
		phase = "count"
		if v.Get("confirm") == "yes" {
			phase = "run"
		}
	}
	if phase != "count" && phase != "run" {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown phase %q: start again from the search page", phase))
		return
	}
	back := h.searchURL(f, "", 0)
	fields := append(f.fields(), [2]string{"action", action})

	// The due time of a reschedule: "in" counts from the confirmation, and
	// the run carries the instant it gave from request to request.
	var due time.Time
	when := ""
	if action == "reschedule" {
		if s := v.Get("due"); s != "" && phase == "run" {
			if due, err = time.Parse(time.RFC3339Nano, s); err != nil {
				h.fail(w, r, http.StatusBadRequest, fmt.Errorf("due %q is not an RFC 3339 time: start again from the search page", s))
				return
			}
			when = "at " + due.UTC().Format(timeUTC)
		} else if due, when, err = parseDue(v.Get("in"), v.Get("at"), time.Now()); err != nil {
			h.fail(w, r, http.StatusBadRequest, err)
			return
		}
		if phase == "run" {
			fields = append(fields, [2]string{"due", due.Format(time.RFC3339Nano)})
		} else {
			fields = append(fields, [2]string{"in", v.Get("in")}, [2]string{"at", v.Get("at")})
		}
	}
	do := func(ctx context.Context, o redisdelay.BulkOptions) (redisdelay.BulkProgress, error) {
		switch action {
		case "cancel":
			return h.insp.CancelWhere(ctx, f.Topic, filter, o)
		case "reschedule":
			return h.insp.RescheduleWhere(ctx, f.Topic, filter, due, o)
		case "requeue":
			return h.insp.RequeueDeadLettersWhere(ctx, f.Topic, group, filter, o)
		case "runnow":
			return h.insp.RunNowWhere(ctx, f.Topic, filter, o)
		}
		return h.insp.DeleteDeadLettersWhere(ctx, f.Topic, group, filter, o)
	}
	total := readCounts(v)
	p, err := h.runChunk(ctx, do, redisdelay.BulkOptions{All: f.All, DryRun: phase == "count", Cursor: cursor})
	total.Scanned += p.Scanned
	total.Matched += p.Matched
	total.Done += p.Done
	if err != nil {
		if phase == "run" && total.Done > 0 {
			err = fmt.Errorf("%s %s %s, then: %w. What is done stays done: run the action again from the search page to go on", verb.done, thousands(total.Done), what, err)
		}
		h.fail(w, r, inspectorStatus(err), err)
		return
	}
	expect, _ := strconv.ParseInt(v.Get("expect"), 10, 64)
	crit := criteria(filter, group)

	if p.Cursor != "" { // more to do: a page that continues
		fields = append(fields, [2]string{"phase", phase}, [2]string{"cursor", p.Cursor},
			[2]string{"scanned", strconv.FormatInt(total.Scanned, 10)}, [2]string{"matched", strconv.FormatInt(total.Matched, 10)},
			[2]string{"done", strconv.FormatInt(total.Done, 10)})
		d := bulkData{Criteria: crit, Action: h.link("/bulk"), Back: back, Chunk: h.opts.BulkStep, Percent: -1}
		if phase == "count" {
			d.Title = "Counting the matches"
			d.Status = fmt.Sprintf("Counting the %s to %s: %s match so far, %s stored messages read.",
				what, strings.ToLower(verb.ask), thousands(total.Matched), thousands(total.Scanned))
		} else {
			fields = append(fields, [2]string{"expect", strconv.FormatInt(expect, 10)})
			d.Title = verb.doing + " the matches"
			d.Status = fmt.Sprintf("%s %s so far, of the %s the count found (%s matched now, %s stored messages read).",
				verb.done, thousands(total.Done), thousands(expect), thousands(total.Matched), thousands(total.Scanned))
			if expect > 0 {
				d.Percent = min(total.Matched*100/expect, 100)
			}
		}
		d.Fields = fields
		h.render(w, r, http.StatusOK, "bulk", d.Title, f.Topic, d)
		return
	}

	if phase == "count" {
		if total.Matched == 0 {
			text := fmt.Sprintf("Nothing to %s: none of the %s matches (%s stored messages read).", strings.ToLower(verb.ask), what, thousands(total.Scanned))
			h.render(w, r, http.StatusOK, "result", "Nothing matches", f.Topic, resultData{text, back})
			return
		}
		prompt := fmt.Sprintf("%s %s match (%s stored messages read). %s them", thousands(total.Matched), what, thousands(total.Scanned), verb.ask)
		switch action {
		case "cancel":
			prompt += "? They will never be delivered."
		case "reschedule":
			prompt += fmt.Sprintf(" to be due %s?", when)
		case "requeue":
			prompt += fmt.Sprintf(" to group %q as a new first attempt?", group)
		case "delete":
			prompt += " for good?"
		case "runnow":
			prompt += "? Each becomes due at once: a scheduler moves it to the consumer groups, which act on it."
		}
		prompt += " The action reads them again: what matches then is acted on, whatever this count."
		fields = append(fields, [2]string{"expect", strconv.FormatInt(total.Matched, 10)})
		h.confirm(w, r, f.Topic, confirmData{Action: h.link("/bulk"), Fields: fields, Items: crit, Prompt: prompt, Back: back,
			Danger: action == "cancel" || action == "delete"})
		return
	}
	text := fmt.Sprintf("%s %s %s", verb.done, thousands(total.Done), what)
	if action == "reschedule" {
		text += " to be due " + when
	}
	text += fmt.Sprintf(" (%s matched, %s stored messages read).", thousands(total.Matched), thousands(total.Scanned))
	if left := total.Matched - total.Done; left > 0 {
		text += fmt.Sprintf(" %s matched but had changed before their turn (fell due, or cancelled or replaced elsewhere): left alone.", thousands(left))
	}
	if action == "runnow" || action == "reschedule" {
		text += h.schedulerMissing(ctx, f.Topic)
	}
	h.render(w, r, http.StatusOK, "result", verb.done, f.Topic, resultData{text, back})
}

// runChunk runs a bulk action until it is complete or has worked for
// Options.BulkStep, stopping between two batches: the progress it returns then
// carries the cursor to go on from.
func (h *handler) runChunk(ctx context.Context, do func(context.Context, redisdelay.BulkOptions) (redisdelay.BulkProgress, error), o redisdelay.BulkOptions) (redisdelay.BulkProgress, error) {
	budget := h.opts.BulkStep
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	o.Progress = func(p redisdelay.BulkProgress) {
		if p.Cursor != "" && time.Since(start) >= budget {
			cancel(errChunkDone)
		}
	}
	p, err := do(cctx, o)
	if err != nil && errors.Is(context.Cause(cctx), errChunkDone) && ctx.Err() == nil && p.Cursor != "" {
		return p, nil
	}
	return p, err
}

// thousands writes n with commas: 50,000.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
