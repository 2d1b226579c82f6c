package dashboard_test

// The search by filter.

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
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
	keys, err := e.client.Keys(context.Background(), "*:fb:*").Result()
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

func TestSearchPageAndLinks(t *testing.T) {
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

// TestSearchByMetadata: near and far messages are found by metadata, and
// by several pairs, a key prefix and a due range; values with markup are
// text.
func TestSearchByMetadata(t *testing.T) {
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

// TestSearchPaging: the pages follow one another with the cursor, no
// match twice; a page that reads its bound without a match says so and
// offers to go on.
func TestSearchPaging(t *testing.T) {
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

// deadMessages makes dead letters of msgs in group g of topic, as
// deadLetters does.
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

func TestSearchDeadLetters(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	acme, globex := e.deadTenants(6)
	status, body := e.search(url.Values{"t": {"orders"}, "target": {"dead:billing"}, "meta": {"tenant=acme"}})
	require.Equal(t, http.StatusOK, status, body)
	assert.ElementsMatch(t, acme, found(body))
	assert.Contains(t, body, "Dead letters of group <code>billing</code> where")
	assert.Contains(t, body, "dead for acme")

	// Died in a range: all of them died in the last minute, none before.
	_, body = e.search(url.Values{"t": {"orders"}, "target": {"dead:billing"}, "from": {time.Now().Add(-time.Minute).UTC().Format("2006-01-02 15:04:05")}})
	assert.ElementsMatch(t, append(append([]string{}, acme...), globex...), found(body))
	assert.Contains(t, body, "<li>died at or after ")
	_, body = e.search(url.Values{"t": {"orders"}, "target": {"dead:billing"}, "to": {time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)}})
	assert.Empty(t, found(body))
}

// TestSearchBadInput: what cannot be read answers 400 saying what to
// type.
func TestSearchBadInput(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	e.searchFixture()
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
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := cloneValues(c.form)
			v.Set("t", "orders")
			status, body := e.search(v)
			assert.Equal(t, http.StatusBadRequest, status)
			assert.Contains(t, body, c.want)
		})
	}

	e.redis.Stop()
	status, body := e.search(url.Values{"t": {"orders"}, "meta": {"tenant=acme"}})
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, "connection refused")
}
