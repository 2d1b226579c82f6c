package dashboard_test

// The search by filter and the bulk actions on its matches, read back
// with the Inspector.

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/dashboard"
)

// tenantMsg is a message of a tenant due in d.
func tenantMsg(tenant string, d time.Duration) *message.Message {
	m := later(d, "for "+tenant)
	m.Metadata.Set("tenant", tenant)
	return m
}

// searchFixture publishes to orders, which no scheduler serves (nothing
// moves): tenant acme's messages due in 10 s (the waiting set) and in
// hours (the far tier), and others'. It returns acme's UUIDs, near
// first, and the others'.
func (e *env) searchFixture() (acme, others []string) {
	e.t.Helper()
	var msgs []*message.Message
	for i := range 3 {
		near, far := tenantMsg("acme", 10*time.Second), tenantMsg("acme", time.Hour+time.Duration(i)*time.Minute)
		msgs = append(msgs, near, far)
		acme = append(acme, near.UUID, far.UUID)
		other := tenantMsg("globex", time.Duration(i+1)*time.Hour)
		msgs = append(msgs, other)
		others = append(others, other.UUID)
	}
	e.publish("orders", msgs...)
	keys, err := e.client.Keys(context.Background(), "*:fc:*").Result()
	require.NoError(e.t, err)
	require.NotEmpty(e.t, keys, "the far messages are in the far tier")
	return acme, others
}

// search opens the search page of a filter.
func (e *env) search(v url.Values) (int, string) {
	e.t.Helper()
	v = cloneValues(v)
	v.Set("s", "1")
	return e.get("/search?" + v.Encode())
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

var uuidRE = regexp.MustCompile(`<code class="uuid">([^<]+)</code>`)

// found lists the UUIDs on a search page.
func found(page string) []string {
	var out []string
	for _, m := range uuidRE.FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

func (e *env) waitingNow(topic, uuid string) bool {
	e.t.Helper()
	_, ok, err := e.insp.FindWaiting(context.Background(), topic, uuid)
	require.NoError(e.t, err)
	return ok
}

func TestSearch_PageAndLinks(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.searchFixture()
	e.deadLetters("orders", "billing", 1)

	status, body := e.get("/search?t=orders")
	require.Equal(t, http.StatusOK, status, body)
	for _, want := range []string{`id="filter"`, `name="meta"`, `id="f-key"`, `id="f-from"`, `id="f-to"`,
		`<option value="waiting" selected>waiting messages</option>`, `<option value="dead:billing">dead letters of group billing (1)</option>`,
		"UTC (2030-01-02 15:04:05), or RFC 3339", "One page reads at most 50,000 stored messages and shows up to 100 matches."} {
		assert.Contains(t, body, want)
	}
	assert.NotContains(t, body, `id="search-results"`, "nothing read before the form is sent")
	assert.Contains(t, body, `href="/search?t=orders" id="nav-search"`)

	_, body = e.get("/topic?t=orders")
	assert.Contains(t, body, `href="/search?t=orders" id="search-filter"`)
	_, body = e.get("/dead?t=orders&g=billing")
	assert.Contains(t, body, `href="/search?t=orders&amp;target=dead%3Abilling" id="search-dead"`)
	status, body = e.get("/search?t=orders&target=dead:billing")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `<option value="dead:billing" selected>`)

	status, body = e.get("/search?t=nope")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, "is not known")
	status, body = e.get("/search?t=orders&target=dead:nope&s=1")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, `topic &#34;orders&#34; has no consumer group &#34;nope&#34;`)
	status, body = e.get("/search?t=orders&target=ready&s=1")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, `search &#34;waiting&#34; messages, or the dead letters of a consumer group as &#34;dead:&lt;group&gt;&#34;`)
}

// TestSearch_ByMetadata: near and far messages are found by metadata, and
// by several pairs, a key prefix and a due range; values with markup are
// text.
func TestSearch_ByMetadata(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	start := time.Now()
	acme, others := e.searchFixture()
	keyed := tenantMsg("acme", 2*time.Hour)
	keyed.Metadata.Set(redisdelay.BusinessKey, "order-77")
	keyed.Metadata.Set("region", `<b>eu</b>`)
	e.publish("orders", keyed)

	status, body := e.search(url.Values{"t": {"orders"}, "meta": {"tenant=acme", ""}})
	require.Equal(t, http.StatusOK, status, body)
	assert.ElementsMatch(t, append(append([]string{}, acme...), keyed.UUID), found(body), "near and far")
	assert.Contains(t, body, `<li>metadata &#34;tenant&#34; is &#34;acme&#34;</li>`)
	assert.Contains(t, body, "7 matches on this page; the search reached the end.")
	assert.NotContains(t, body, `id="search-next"`)
	assert.Contains(t, body, `href="/message?q=`+acme[1]+`&amp;t=orders"`, "each links to its message")
	assert.Contains(t, body, `value="tenant=acme"`, "the form keeps what was typed")
	assert.NotContains(t, body, "_watermill_delayed_for=", "the delay's own keys are left out: the Due column is the truth")

	// Two pairs, both must hold; markup in a value is text.
	_, body = e.search(url.Values{"t": {"orders"}, "meta": {"tenant = acme", "region=<b>eu</b>"}})
	assert.Equal(t, []string{keyed.UUID}, found(body))
	assert.Contains(t, body, `region=&lt;b&gt;eu&lt;/b&gt;`)
	assert.NotContains(t, body, "<b>eu")

	_, body = e.search(url.Values{"t": {"orders"}, "key": {"order-"}})
	assert.Equal(t, []string{keyed.UUID}, found(body))
	_, body = e.search(url.Values{"t": {"orders"}, "meta": {"tenant=initech"}})
	assert.Empty(t, found(body))
	assert.Contains(t, body, "No message matches.")

	// Due in the next minute (UTC without a zone), from 90 minutes on (RFC 3339).
	_, body = e.search(url.Values{"t": {"orders"}, "to": {start.Add(time.Minute).UTC().Format("2006-01-02 15:04:05")}})
	assert.ElementsMatch(t, []string{acme[0], acme[2], acme[4]}, found(body))
	_, body = e.search(url.Values{"t": {"orders"}, "from": {start.Add(90 * time.Minute).In(time.FixedZone("X", 2*3600)).Format(time.RFC3339)}})
	assert.ElementsMatch(t, []string{keyed.UUID, others[1], others[2]}, found(body))
	assert.Contains(t, body, "<li>due at or after "+start.Add(90*time.Minute).UTC().Truncate(time.Second).Format("2006-01-02 15:04:05.000 UTC")+"</li>")

	// The empty filter lists everything.
	_, body = e.search(url.Values{"t": {"orders"}})
	assert.Len(t, found(body), 10)
	assert.Contains(t, body, "no criterion: every waiting message of the topic")
}

// TestSearch_Paging: the pages follow one another with the cursor, no
// match twice; a page that reads its bound without a match says so and
// offers to go on.
func TestSearch_Paging(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	acme, _ := e.searchFixture()
	defer dashboard.SetSearchBounds(4, 5)()

	var got []string
	next := "/search?" + url.Values{"t": {"orders"}, "meta": {"tenant=acme"}, "s": {"1"}}.Encode()
	nextRE := regexp.MustCompile(`id="search-next" href="([^"]+)">Next page →`)
	for pages := 1; ; pages++ {
		status, body := e.get(next)
		require.Equal(t, http.StatusOK, status, body)
		got = append(got, found(body)...)
		m := nextRE.FindStringSubmatch(body)
		if m == nil {
			assert.Equal(t, 2, pages, "4 + 2 matches")
			assert.Contains(t, body, "2 matches on this page; the search reached the end.")
			assert.Contains(t, body, `id="search-first" href="/search?meta=tenant%3Dacme&amp;s=1&amp;t=orders&amp;target=waiting"`)
			break
		}
		assert.Contains(t, body, "4 matches on this page; more may follow.")
		assert.Contains(t, m[1], "cursor=")
		next = html.UnescapeString(m[1])
	}
	assert.ElementsMatch(t, acme, got, "each once")

	// 10,000 messages of another tenant due first: one Inspector call a
	// page reads them without a match, and the next page finds acme's.
	var filler []*message.Message
	for range 10_000 {
		filler = append(filler, tenantMsg("globex", 5*time.Second))
	}
	e.publish("crowded", filler...)
	match := tenantMsg("acme", time.Hour)
	e.publish("crowded", match)
	defer dashboard.SetSearchBounds(100, 1)()
	status, body := e.search(url.Values{"t": {"crowded"}, "meta": {"tenant=acme"}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Empty(t, found(body))
	assert.Contains(t, body, "No matches in the 10,000 messages read so far: the search stops after 10,000 per page, and has not reached the end.")
	m := regexp.MustCompile(`id="search-next" href="([^"]+)">Search on →`).FindStringSubmatch(body)
	require.NotNil(t, m, body)
	assert.Contains(t, m[1], "read=10000")
	status, body = e.get(html.UnescapeString(m[1]))
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, []string{match.UUID}, found(body))

	status, body = e.search(url.Values{"t": {"orders"}, "cursor": {"bogus"}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "is not one a search or bulk action returned")
}

// deadMessages makes dead letters of msgs in group g of topic: each is
// nacked once by a subscriber allowed one attempt.
func (e *env) deadMessages(topic, group string, msgs ...*message.Message) {
	e.t.Helper()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: e.client, ConsumerGroup: group, MaxAttempts: 1}, watermill.NopLogger{})
	require.NoError(e.t, err)
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(e.t, err)
	before := e.deadCount(topic, group)
	e.publish(topic, msgs...)
	for range msgs {
		select {
		case m := <-ch:
			m.Nack()
		case <-time.After(5 * time.Second):
			e.t.Fatal("no delivery within 5 s")
		}
	}
	require.Eventually(e.t, func() bool { return e.deadCount(topic, group) == before+int64(len(msgs)) }, 5*time.Second, 20*time.Millisecond)
}

func (e *env) deadCount(topic, group string) int64 {
	e.t.Helper()
	st, err := e.insp.Stats(context.Background(), topic)
	if err != nil {
		return 0
	}
	for _, g := range st.Groups {
		if g.Group == group {
			return g.Dead
		}
	}
	return 0
}

// deadTenants makes dead letters of acme and globex in group billing of
// topic orders, and returns their UUIDs.
func (e *env) deadTenants(n int) (acme, globex []string) {
	e.t.Helper()
	var msgs []*message.Message
	for i := range n {
		tenant := []string{"acme", "globex"}[i%2]
		m := message.NewMessage(watermill.NewUUID(), []byte("dead for "+tenant))
		m.Metadata.Set("tenant", tenant)
		msgs = append(msgs, m)
		if tenant == "acme" {
			acme = append(acme, m.UUID)
		} else {
			globex = append(globex, m.UUID)
		}
	}
	e.deadMessages("orders", "billing", msgs...)
	return acme, globex
}

func TestSearch_DeadLetters(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	acme, globex := e.deadTenants(6)
	status, body := e.search(url.Values{"t": {"orders"}, "target": {"dead:billing"}, "meta": {"tenant=acme"}})
	require.Equal(t, http.StatusOK, status, body)
	assert.ElementsMatch(t, acme, found(body))
	assert.Contains(t, body, "Dead letters of group <code>billing</code> where")
	assert.Contains(t, body, "dead for acme")
	assert.Contains(t, body, `id="bulk-requeue"`)
	assert.NotContains(t, body, `id="bulk-cancel"`)

	// Died in a range: all of them died in the last minute, none before.
	_, body = e.search(url.Values{"t": {"orders"}, "target": {"dead:billing"}, "from": {time.Now().Add(-time.Minute).UTC().Format("2006-01-02 15:04:05")}})
	assert.ElementsMatch(t, append(append([]string{}, acme...), globex...), found(body))
	assert.Contains(t, body, "<li>died at or after ")
	_, body = e.search(url.Values{"t": {"orders"}, "target": {"dead:billing"}, "to": {time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)}})
	assert.Empty(t, found(body))
}

// hiddenRE reads the hidden fields of a form.
var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// formOf reads the hidden fields of the form with id (the first form of
// the page without one).
func formOf(t *testing.T, page, id string) url.Values {
	t.Helper()
	start := strings.Index(page, `<form method="post"`)
	if id != "" {
		start = strings.Index(page, `id="`+id+`"`)
	}
	require.GreaterOrEqual(t, start, 0, "no form %q in\n%s", id, page)
	end := strings.Index(page[start:], "</form>")
	v := url.Values{}
	for _, m := range hiddenRE.FindAllStringSubmatch(page[start:start+end], -1) {
		v.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return v
}

// bulkForm is the bulk form of a search page, with its action.
func (e *env) bulkForm(search url.Values, action string, extra ...string) url.Values {
	e.t.Helper()
	status, page := e.search(search)
	require.Equal(e.t, http.StatusOK, status, page)
	v := formOf(e.t, page, "bulk-form")
	v.Set("action", action)
	for n := 0; n+1 < len(extra); n += 2 {
		v.Set(extra[n], extra[n+1])
	}
	return v
}

// runBulk posts a bulk form and follows its pages, as the page's script
// does, until one does not continue; it returns that page and how many
// requests it took.
func (e *env) runBulk(form url.Values) (status int, page string, steps int) {
	e.t.Helper()
	status, page = e.post("/bulk", form)
	for steps = 1; status == http.StatusOK && strings.Contains(page, `id="bulk-continue-form"`); steps++ {
		require.Less(e.t, steps, 100, "the bulk action does not end")
		status, page = e.post("/bulk", formOf(e.t, page, "bulk-continue-form"))
	}
	return status, page, steps
}

func TestBulk_Cancel(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	acme, others := e.searchFixture()
	form := e.bulkForm(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}}, "cancel")

	// The dry run: a count on a confirmation page, nothing cancelled.
	status, page, _ := e.runBulk(form)
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "Please confirm")
	assert.Contains(t, page, `6 waiting messages of topic &#34;orders&#34; match (9 stored messages read). Cancel them? They will never be delivered.`)
	assert.Contains(t, page, `<li><code>metadata &#34;tenant&#34; is &#34;acme&#34;</code></li>`)
	assert.Contains(t, page, `class="danger"`)
	assert.Contains(t, page, `href="/search?meta=tenant%3Dacme&amp;s=1&amp;t=orders&amp;target=waiting" id="abort"`)
	for _, id := range acme {
		assert.True(t, e.waitingNow("orders", id), "cancelled by the dry run")
	}

	status, page, _ = e.runBulk(formOf(t, page, ""))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `Cancelled 6 waiting messages of topic &#34;orders&#34; (6 matched, 9 stored messages read).`)
	for _, id := range acme {
		assert.False(t, e.waitingNow("orders", id), "still waiting after the cancel")
	}
	for _, id := range others {
		assert.True(t, e.waitingNow("orders", id), "another tenant's message cancelled")
	}
	_, body := e.search(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}})
	assert.Contains(t, body, "No message matches.")

	// Nothing left to cancel: said so, no confirmation.
	status, page, _ = e.runBulk(form)
	require.Equal(t, http.StatusOK, status, page)
	// (Cancelled far messages leave blank places in their far bucket, read
	// until it is unpacked: the count of what was read may include them.)
	assert.Regexp(t, `Nothing to cancel: none of the waiting messages of topic &#34;orders&#34; matches \(\d stored messages read\)\.`, page)
	assert.NotContains(t, page, "Please confirm")
}

func TestBulk_Reschedule(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	acme, others := e.searchFixture()
	at := time.Now().Add(5 * time.Hour).UTC().Truncate(time.Second)
	form := e.bulkForm(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}}, "reschedule", "at", at.Format("2006-01-02 15:04:05"))
	status, page, _ := e.runBulk(form)
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `6 waiting messages of topic &#34;orders&#34; match (9 stored messages read). Reschedule them to be due at `+at.Format("2006-01-02 15:04:05.000 UTC")+`?`)
	assert.Contains(t, page, `class="primary"`)
	before, _ := e.due("orders", acme[0])

	status, page, _ = e.runBulk(formOf(t, page, ""))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `Rescheduled 6 waiting messages of topic &#34;orders&#34; to be due at `+at.Format("2006-01-02 15:04:05.000 UTC"))
	for _, id := range acme {
		got, ok := e.due("orders", id)
		require.True(t, ok)
		assert.True(t, got.Equal(at), "%s due at %s, want %s", id, got, at)
	}
	for _, id := range others {
		got, _ := e.due("orders", id)
		assert.False(t, got.Equal(at), "another tenant's message moved")
	}
	assert.NotEqual(t, before, at)

	// "in": counted from the confirmation.
	form = e.bulkForm(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}}, "reschedule", "in", "30m")
	status, page, _ = e.runBulk(form)
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "to be due in 30m0s from when you confirm")
	start := time.Now()
	status, page, _ = e.runBulk(formOf(t, page, ""))
	require.Equal(t, http.StatusOK, status, page)
	got, _ := e.due("orders", acme[0])
	assert.WithinRange(t, got, start.Add(30*time.Minute-time.Second), time.Now().Add(30*time.Minute+time.Second))
}

func TestBulk_RequeueAndDeleteDeadLetters(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.deadTenants(6)
	search := url.Values{"t": {"orders"}, "target": {"dead:billing"}, "meta": {"tenant=acme"}}

	status, page, _ := e.runBulk(e.bulkForm(search, "requeue"))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `3 dead letters of group &#34;billing&#34; in topic &#34;orders&#34; match (6 stored messages read). Requeue them to group &#34;billing&#34; as a new first attempt?`)
	assert.EqualValues(t, 6, e.deadCount("orders", "billing"), "requeued by the dry run")
	status, page, _ = e.runBulk(formOf(t, page, ""))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `Requeued 3 dead letters of group &#34;billing&#34; in topic &#34;orders&#34; (3 matched, 6 stored messages read).`)
	assert.EqualValues(t, 3, e.deadCount("orders", "billing"))
	_, body := e.search(search)
	assert.Empty(t, found(body))

	search.Set("meta", "tenant=globex")
	status, page, _ = e.runBulk(e.bulkForm(search, "delete"))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `3 dead letters of group &#34;billing&#34; in topic &#34;orders&#34; match (3 stored messages read). Delete them for good?`)
	assert.Contains(t, page, `class="danger"`)
	status, page, _ = e.runBulk(formOf(t, page, ""))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `Deleted 3 dead letters`)
	assert.EqualValues(t, 0, e.deadCount("orders", "billing"))
}

// TestBulk_InSteps: a bulk request works for a bounded time (here one
// batch of about 1,000 stored messages) and answers a page that continues from
// the cursor; followed to the end, the count and the action cover every
// match once.
func TestBulk_InSteps(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1, BulkStep: time.Nanosecond})
	var msgs []*message.Message
	for i := range 2500 {
		msgs = append(msgs, tenantMsg([]string{"acme", "acme", "acme", "globex"}[i%4], time.Duration(10+i%50)*time.Second))
	}
	e.publish("orders", msgs...)
	form := e.bulkForm(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}}, "cancel")

	status, page := e.post("/bulk", form)
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "<h1>Counting the matches</h1>")
	// One batch: the waiting set's ZSCAN takes about 1,000.
	assert.Regexp(t, `Counting the waiting messages of topic &#34;orders&#34; to cancel: [5-9]\d\d match so far, (9\d\d|1,0\d\d) stored messages read\.`, page)
	next := formOf(t, page, "bulk-continue-form")
	assert.NotEmpty(t, next.Get("cursor"))
	assert.Equal(t, "count", next.Get("phase"))
	assert.Contains(t, page, `id="bulk-continue"`)
	assert.Contains(t, page, `id="bulk-stop" hidden`)

	status, page, steps := e.runBulk(next)
	require.Equal(t, http.StatusOK, status, page)
	assert.GreaterOrEqual(t, steps, 2)
	assert.Contains(t, page, "1,875 waiting messages of topic &#34;orders&#34; match (2,500 stored messages read).")

	// The action, step by step, with a progress bar.
	status, page = e.post("/bulk", formOf(t, page, ""))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "<h1>Cancelling the matches</h1>")
	assert.Regexp(t, `Cancelled ([5-9]\d\d) so far, of the 1,875 the count found \(([5-9]\d\d) matched now, (9\d\d|1,0\d\d) stored messages read\)\.`, page)
	assert.Regexp(t, `<div class="progress" id="bulk-progress"><span class="fill w(3\d|4\d)"></span></div>`, page)
	status, page, _ = e.runBulk(formOf(t, page, "bulk-continue-form"))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "Cancelled 1,875 waiting messages of topic &#34;orders&#34;")
	left, err := e.insp.Stats(context.Background(), "orders")
	require.NoError(t, err)
	assert.EqualValues(t, 625, left.Waiting, "globex's")
}

// TestBulk_AllGuard: an empty filter acts on nothing unless "all" is
// ticked; ticked, it acts on every message.
func TestBulk_AllGuard(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.searchFixture()
	_, page := e.search(url.Values{"t": {"orders"}})
	assert.Contains(t, page, `<input type="checkbox" name="all" value="yes" id="bulk-all">`)
	_, page = e.search(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}})
	assert.NotContains(t, page, `id="bulk-all"`, "a criterion needs no guard")

	form := e.bulkForm(url.Values{"t": {"orders"}}, "cancel")
	for _, confirm := range []string{"", "yes"} {
		form.Set("confirm", confirm)
		status, body := e.post("/bulk", form)
		assert.Equal(t, http.StatusBadRequest, status)
		assert.Contains(t, body, `the filter is empty: it selects every one of the waiting messages of topic &#34;orders&#34;. Give a criterion, or tick &#34;all messages&#34; to cancel all of them`)
	}
	st, _ := e.insp.Stats(context.Background(), "orders")
	assert.EqualValues(t, 9, st.Waiting)

	form.Del("confirm")
	form.Set("all", "yes")
	status, page, _ := e.runBulk(form)
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "9 waiting messages of topic &#34;orders&#34; match")
	assert.Contains(t, page, `<input type="hidden" name="all" value="yes">`)
	status, page, _ = e.runBulk(formOf(t, page, ""))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, "Cancelled 9 waiting messages")
	st, _ = e.insp.Stats(context.Background(), "orders")
	assert.EqualValues(t, 0, st.Waiting)
}

// TestBulk_Refused: read-only hides the bulk forms and refuses them; a
// missing or wrong token or another site's Origin is refused; nothing
// changes.
func TestBulk_Refused(t *testing.T) {
	ro := newEnv(t, dashboard.Options{ReadOnly: true, SampleEvery: -1})
	acme, _ := ro.searchFixture()
	status, page := ro.search(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}})
	require.Equal(t, http.StatusOK, status, page)
	assert.Len(t, found(page), 6, "searching is reading: allowed")
	assert.NotContains(t, page, `id="bulk-form"`)
	assert.NotContains(t, page, `name="csrf"`)
	for _, confirm := range []string{"", "yes"} {
		status, body := ro.post("/bulk", url.Values{"t": {"orders"}, "meta": {"tenant=acme"}, "action": {"cancel"}, "confirm": {confirm}})
		assert.Equal(t, http.StatusForbidden, status)
		assert.Contains(t, body, "read-only")
	}
	for _, id := range acme {
		assert.True(t, ro.waitingNow("orders", id))
	}

	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	acme, _ = e.searchFixture()
	form := e.bulkForm(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}}, "cancel", "confirm", "yes")
	tok := form.Get("csrf")
	form.Del("csrf")
	status, body := e.post("/bulk", form)
	assert.Equal(t, http.StatusForbidden, status, "no token")
	assert.Contains(t, body, "token is missing or stale")
	form.Set("csrf", strings.Repeat("0", 32))
	status, _ = e.post("/bulk", form)
	assert.Equal(t, http.StatusForbidden, status, "wrong token")
	form.Set("csrf", tok)
	status, body = e.post("/bulk", form, "Origin", "https://evil.example")
	assert.Equal(t, http.StatusForbidden, status, "another site")
	assert.Contains(t, body, "does not come from this dashboard")
	resp, _ := e.do(http.MethodGet, "/bulk?"+form.Encode(), "", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "actions are POSTs")
	for _, id := range acme {
		assert.True(t, e.waitingNow("orders", id))
	}
}

// TestSearch_BadInput: what cannot be read answers 400 saying what to
// type, on the search page and for a bulk action, which changes nothing.
func TestSearch_BadInput(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	acme, _ := e.searchFixture()
	e.deadLetters("orders", "billing", 1)
	cases := []struct {
		name string
		form url.Values
		want string
	}{
		{"bad from", url.Values{"from": {"tomorrow"}}, `&#34;tomorrow&#34; (from) is not a time: use UTC such as 2030-01-02 15:04 or 2030-01-02 15:04:05, or RFC 3339 with a zone`},
		{"bad to", url.Values{"to": {"2030-13-01"}}, `&#34;2030-13-01&#34; (to) is not a time`},
		{"no =", url.Values{"meta": {"tenant"}}, `metadata criterion &#34;tenant&#34; has no &#39;=&#39;: write key=value, such as tenant=acme`},
		{"no key", url.Values{"meta": {"=acme"}}, `metadata criterion &#34;=acme&#34; has no key before &#39;=&#39;`},
		{"key twice", url.Values{"meta": {"tenant=a", "tenant=b"}}, `metadata key &#34;tenant&#34; is given twice, as &#34;a&#34; and &#34;b&#34;`},
		{"to before from", url.Values{"from": {"2030-01-02 00:00"}, "to": {"2030-01-01 00:00"}}, `&#34;to&#34; (2030-01-01 00:00:00.000 UTC) is not after &#34;from&#34; (2030-01-02 00:00:00.000 UTC)`},
	}
	_, page := e.search(url.Values{"t": {"orders"}})
	tok := csrf(t, page)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := cloneValues(c.form)
			v.Set("t", "orders")
			status, body := e.search(v)
			assert.Equal(t, http.StatusBadRequest, status)
			assert.Contains(t, body, c.want)
			v.Set("action", "cancel")
			v.Set("csrf", tok)
			for _, confirm := range []string{"", "yes"} {
				v.Set("confirm", confirm)
				status, body = e.post("/bulk", v)
				assert.Equal(t, http.StatusBadRequest, status)
				assert.Contains(t, body, c.want)
			}
		})
	}

	form := e.bulkForm(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}}, "cancel")
	for _, c := range []struct {
		name   string
		change []string
		code   int
		want   string
	}{
		{"unknown action", []string{"action", "explode"}, 400, "unknown bulk action &#34;explode&#34;: use cancel, reschedule or runnow (waiting messages), requeue or delete (dead letters)"},
		{"requeue waiting", []string{"action", "requeue"}, 400, "requeue acts on dead letters"},
		{"cancel dead letters", []string{"target", "dead:billing"}, 400, "cancel acts on waiting messages"},
		{"unknown group", []string{"target", "dead:nope", "action", "delete"}, 404, "has no consumer group &#34;nope&#34;"},
		{"reschedule without a time", []string{"action", "reschedule"}, 400, "no new due time given"},
		{"reschedule at a bad time", []string{"action", "reschedule", "at", "noon"}, 400, "&#34;noon&#34; is not a time"},
		{"reschedule beyond 100 years", []string{"action", "reschedule", "at", "2200-01-01 00:00:00"}, 400, "beyond the limit of 100 years"},
		{"unknown phase", []string{"phase", "later"}, 400, "unknown phase"},
		{"bad cursor", []string{"phase", "run", "cursor", "bogus"}, 400, "is not one a search or bulk action returned"},
		{"unknown topic", []string{"t", "nope"}, 404, "is not known"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := cloneValues(form)
			for n := 0; n+1 < len(c.change); n += 2 {
				v.Set(c.change[n], c.change[n+1])
			}
			status, body := e.post("/bulk", v)
			assert.Equal(t, c.code, status)
			assert.Contains(t, body, c.want)
		})
	}
	for _, id := range acme {
		assert.True(t, e.waitingNow("orders", id))
	}
	assert.EqualValues(t, 1, e.deadCount("orders", "billing"))

	e.stopRedis()
	status, body := e.search(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}})
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, "connection refused")
	status, _ = e.post("/bulk", form)
	assert.Equal(t, http.StatusBadGateway, status)
}
