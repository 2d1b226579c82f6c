package dashboard

// Search by filter (metadata, business-key prefix, due or death time):
// Inspector.SearchWaiting and SearchDeadLetters.
//
// A search page stays bounded: it calls the Inspector at most searchCalls
// times (each reads at most 10,000 stored messages) and links the next
// page with the Inspector's cursor.

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
}

func readFilterForm(v url.Values) filterForm {
	f := filterForm{Topic: v.Get("t"), Target: strings.TrimSpace(v.Get("target")), Key: strings.TrimSpace(v.Get("key")),
		From: strings.TrimSpace(v.Get("from")), To: strings.TrimSpace(v.Get("to"))}
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

// fields are the form's values, as pairs.
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
	return out
}

// searchURL is the search page of the form, from cursor on ("": the
// first page); read counts the stored messages read since the last match.
func (h *handler) searchURL(f filterForm, cursor string, read int64) string {
	v := url.Values{"s": {"1"}}
	for _, kv := range f.fields() {
		v.Add(kv[0], kv[1])
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
		d.Targets = append(d.Targets, targetOption{"dead:" + g.Group, fmt.Sprintf("dead letters of group %s (%d)", g.Group, g.Dead), g.Group == group})
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
	d.Ran, d.Criteria = true, criteria(filter, group)
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
