package main

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

const tenantTopic = "orders.tenants" // 4 partitions

// tenants are the messages publishTenants stored, by UUID.
type tenants struct {
	all, acme, globex, keyed []string
}

// publishTenants publishes n delayed messages to tp, of parts partitions,
// message i due in i+1 minutes: tenant "acme" for even i, "globex" for
// odd, and business key "order-<i>" when i is a multiple of 3.
func (s sample) publishTenants(t *testing.T, tp string, parts, n int) tenants {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
		Client: s.client, KeyPrefix: s.prefix, TopicPartitions: map[string]int{tp: parts},
	}, nil)
	require.NoError(t, err)
	defer pub.Close()
	var out tenants
	for i := range n {
		msg := message.NewMessage(watermill.NewUUID(), []byte("close"))
		tenant := "acme"
		if i%2 == 1 {
			tenant = "globex"
		}
		msg.Metadata.Set("tenant", tenant)
		if i%3 == 0 {
			msg.Metadata.Set(redisdelay.BusinessKey, "order-"+strconv.Itoa(i))
			out.keyed = append(out.keyed, msg.UUID)
		}
		delay.Message(msg, delay.For(time.Duration(i+1)*time.Minute))
		require.NoError(t, pub.Publish(tp, msg))
		out.all = append(out.all, msg.UUID)
		if tenant == "acme" {
			out.acme = append(out.acme, msg.UUID)
		} else {
			out.globex = append(out.globex, msg.UUID)
		}
	}
	return out
}

// nextCursor returns the cursor of a search's paging hint, "" when none.
var nextCursor = regexp.MustCompile(`next page: --cursor (\S+)\)\n$`)

// Waiting messages by metadata, business key prefix and due time, in a
// topic of 4 partitions, as a table and as JSON, a page at a time.
func TestSearch_Waiting(t *testing.T) {
	s := setupSample(t)
	m := s.publishTenants(t, tenantTopic, 4, 10)

	out := decode[searchJSON[waitingJSON]](t, s.ok(t, "search", tenantTopic, "--meta", "tenant=acme", "--json"))
	assert.Equal(t, tenantTopic, out.Topic)
	assert.Empty(t, out.Group)
	assert.Empty(t, out.Cursor, "all read")
	assert.ElementsMatch(t, m.acme, uuidsOf(out.Matches))
	for _, w := range out.Matches {
		assert.Equal(t, "acme", w.Metadata["tenant"])
		assert.Nil(t, w.Payload, "no payload without --payload")
	}

	all := decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic))
	assert.ElementsMatch(t, m.all, uuidsOf(all.Matches), "no criterion: every message")
	keyed := decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic, "--key-prefix", "order-"))
	assert.ElementsMatch(t, m.keyed, uuidsOf(keyed.Matches))
	both := decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic, "--key-prefix", "order-", "--meta", "tenant=globex"))
	assert.ElementsMatch(t, []string{m.all[3], m.all[9]}, uuidsOf(both.Matches), "every criterion holds")

	// Due in 3 to 5 minutes: messages 2, 3 and 4 (due in 3, 4 and 5).
	window := decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic, "--from", "+150s", "--to", "+330s"))
	assert.ElementsMatch(t, m.all[2:5], uuidsOf(window.Matches))
	at := time.Now().Add(150 * time.Second).UTC().Format(time.RFC3339)
	window = decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic, "--from", at, "--to", "+330s"))
	assert.ElementsMatch(t, m.all[2:5], uuidsOf(window.Matches), "--from as an RFC 3339 time")

	// The table, with the paging hint on stderr; the pages hold every
	// match once.
	var paged []string
	cursor := ""
	for page := 0; ; page++ {
		require.Less(t, page, 10, "the cursor does not advance")
		args := []string{"search", tenantTopic, "--meta", "tenant=acme", "--limit", "2"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		r := s.cli(t, args...)
		require.Equal(t, 0, r.code, r.stderr)
		rs := rows(r.stdout)
		require.Equal(t, []string{"UUID", "DUE", "IN", "KEY", "SIZE", "METADATA"}, rs[0])
		for _, row := range rs[1:] {
			assert.NotContains(t, paged, row[0], "found twice")
			paged = append(paged, row[0])
			assert.Equal(t, "tenant=acme", row[len(row)-1])
		}
		if r.stderr == "" {
			break
		}
		c := nextCursor.FindStringSubmatch(r.stderr)
		require.NotNil(t, c, "the hint: %s", r.stderr)
		assert.Equal(t, fmt.Sprintf("(2 shown; next page: --cursor %s)\n", c[1]), r.stderr)
		cursor = c[1]
	}
	assert.ElementsMatch(t, m.acme, paged)

	// The JSON of a page holds the cursor of the next.
	first := decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic, "--limit", "3"))
	require.Len(t, first.Matches, 3)
	require.NotEmpty(t, first.Cursor)
	rest := decode[searchJSON[waitingJSON]](t, s.ok(t, "--json", "search", tenantTopic, "--cursor", first.Cursor, "--limit", "100"))
	assert.ElementsMatch(t, m.all, append(uuidsOf(first.Matches), uuidsOf(rest.Matches)...))
	assert.Empty(t, rest.Cursor)

	// --payload prints each match in full.
	full := s.ok(t, "search", tenantTopic, "--key-prefix", "order-0", "--payload")
	assert.Contains(t, full, "uuid:     "+m.all[0]+"\n")
	assert.Contains(t, full, "  tenant=acme\n")
	assert.Contains(t, full, "close")

	assert.Equal(t, fmt.Sprintf("no waiting message of topic %q matches\n", tenantTopic), s.ok(t, "search", tenantTopic, "--meta", "tenant=initech"))
	none := decode[searchJSON[waitingJSON]](t, s.ok(t, "search", tenantTopic, "--meta", "tenant=initech", "--json"))
	assert.Equal(t, searchJSON[waitingJSON]{Topic: tenantTopic, Matches: []waitingJSON{}}, none)

	// An unknown topic or group is an error, as elsewhere.
	r := s.cli(t, "search", "orders.typo")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `topic "orders.typo" is not known`)
	r = s.cli(t, "search", topic, "--group", "biling")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `has no consumer group "biling" (its groups: billing)`)
}

// With --group, the group's dead letters, by metadata and by the time they
// died.
func TestSearch_DeadLetters(t *testing.T) {
	s := setupSample(t)
	ids := s.deadIDs(t)
	require.Len(t, ids, 2)

	out := decode[searchJSON[deadJSON]](t, s.ok(t, "search", topic, "--group", group, "--meta", "fail=yes", "--json"))
	assert.Equal(t, topic, out.Topic)
	assert.Equal(t, group, out.Group)
	assert.Empty(t, out.Cursor)
	require.Len(t, out.Matches, 2)
	for i, d := range out.Matches {
		assert.Equal(t, ids[i], d.ID)
		assert.Equal(t, s.failed[i], d.UUID)
		assert.Equal(t, "card declined", d.Reason)
	}

	table := rows(s.ok(t, "search", topic, "--group", group, "--from", "-1h"))
	require.Len(t, table, 3)
	assert.Equal(t, []string{"ID", "TIME", "ATTEMPTS", "UUID", "REASON", "METADATA"}, table[0])
	assert.Equal(t, ids[0], table[1][0])
	assert.Equal(t, fmt.Sprintf("no dead letter of group %q in topic %q matches\n", group, topic),
		s.ok(t, "search", topic, "--group", group, "--to", "-1h"))
	assert.Equal(t, fmt.Sprintf("no dead letter of group %q in topic %q matches\n", group, topic),
		s.ok(t, "search", topic, "--group", group, "--meta", "fail=no"))

	// A page of one: the cursor is the last dead letter's ID.
	r := s.cli(t, "search", topic, "--group", group, "--limit", "1")
	require.Equal(t, 0, r.code)
	assert.Equal(t, "(1 shown; next page: --cursor "+ids[0]+")\n", r.stderr)
	next := decode[searchJSON[deadJSON]](t, s.ok(t, "search", topic, "--group", group, "--cursor", ids[0], "--json"))
	require.Len(t, next.Matches, 1)
	assert.Equal(t, ids[1], next.Matches[0].ID)
	assert.Empty(t, next.Cursor)
	assert.Equal(t, fmt.Sprintf("no dead letter of group %q in topic %q matches after the cursor\n", group, topic),
		s.ok(t, "search", topic, "--group", group, "--cursor", ids[1]))
}

// One search reads on until it has --limit matches, so a match far down
// is found at once; but it reads at most searchCalls Inspector calls'
// worth, and then hands back the cursor to go on.
func TestSearch_ReadBound(t *testing.T) {
	s := setupSample(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: s.client, KeyPrefix: s.prefix}, nil)
	require.NoError(t, err)
	defer pub.Close()
	const n = 25000
	var needle string
	for b := 0; b < n; b += 1000 {
		msgs := make([]*message.Message, 0, 1000)
		for i := b; i < b+1000; i++ {
			msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
			if i == n-1 {
				msg.Metadata.Set("needle", "1")
				needle = msg.UUID
			}
			delay.Message(msg, delay.For(time.Hour+time.Duration(i)*time.Millisecond))
			msgs = append(msgs, msg)
		}
		require.NoError(t, pub.Publish("orders.many", msgs...))
	}

	// 3 calls: not 2 empty pages and then the match.
	out := decode[searchJSON[waitingJSON]](t, s.ok(t, "search", "orders.many", "--meta", "needle=1", "--json"))
	assert.Equal(t, []string{needle}, uuidsOf(out.Matches))
	assert.Empty(t, out.Cursor)

	old := searchCalls
	searchCalls = 2
	t.Cleanup(func() { searchCalls = old })
	r := s.cli(t, "search", "orders.many", "--meta", "needle=1")
	require.Equal(t, 0, r.code)
	assert.Equal(t, "no waiting message of topic \"orders.many\" matches among those read so far\n", r.stdout)
	c := nextCursor.FindStringSubmatch(r.stderr)
	require.NotNil(t, c, r.stderr)
	assert.Equal(t, "(0 shown; stopped after reading up to 20000 stored messages, the bound of one search: more may match; next page: --cursor "+c[1]+")\n", r.stderr)
	out = decode[searchJSON[waitingJSON]](t, s.ok(t, "search", "orders.many", "--meta", "needle=1", "--cursor", c[1], "--json"))
	assert.Equal(t, []string{needle}, uuidsOf(out.Matches))
	assert.Empty(t, out.Cursor)
}

// Malformed filters and cursors are usage errors (exit 2), caught before
// Redis is asked; a cursor of the right form that the topic cannot have
// is the Inspector's error (exit 1).
func TestSearch_BadInput(t *testing.T) {
	s := setupSample(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"search", topic, "--meta", "tenant"}, `invalid value "tenant" for flag -meta: no '=' in "tenant": give K=V, a metadata key and its value (K= for an empty value)`},
		{[]string{"search", topic, "--meta", "=acme"}, `invalid value "=acme" for flag -meta: no key before '=' in "=acme"`},
		{[]string{"search", topic, "--meta", "a=1", "--meta", "a=2"}, `key "a" given twice ("1" and "2"): no message holds both`},
		{[]string{"search", topic, "--from", "tomorrow"}, `--from "tomorrow" is not a time: give an RFC 3339 time (2030-01-02T15:04:05Z), now, or a signed duration from now (-2h, +10m, +90s)`},
		{[]string{"search", topic, "--to", "10m"}, `--to "10m" is not a time`},
		{[]string{"search", topic, "--to", "+2d"}, `--to "+2d" is not a time`},
		{[]string{"search", topic, "--from", "+1h", "--to", "+10m"}, "--to +10m is not after --from +1h: give an increasing range, or one side only"},
		{[]string{"search", topic, "--limit", "0"}, "--limit is 0: use 1 to 10000"},
		{[]string{"search", topic, "--limit", "10001"}, "--limit is 10001: use 1 to 10000"},
		{[]string{"search", topic, "--cursor", "garbage"}, `--cursor "garbage" is not a cursor over waiting messages as redisdelay prints them`},
		{[]string{"search", topic, "--cursor", "0:x:1:a"}, `--cursor "0:x:1:a" is not a cursor over waiting messages`},
		{[]string{"search", topic, "--cursor", "1-0"}, `--cursor "1-0" is not a cursor over waiting messages`},
		{[]string{"search", topic, "--cursor", "bulk:0:near:12"}, `--cursor "bulk:0:near:12" is the cursor of a bulk action (cancel, reschedule: for their --resume), not of a search`},
		{[]string{"search", topic, "--group", group, "--cursor", "0:n:1:x"}, `--cursor "0:n:1:x" is not a cursor over dead letters as redisdelay prints them`},
		{[]string{"search"}, "search: wrong number of arguments (0)"},
	} {
		r := s.cli(t, c.args...)
		assert.Equal(t, 2, r.code, c.args)
		assert.Contains(t, r.stderr, c.want, c.args)
		assert.Contains(t, r.stderr, "usage: redisdelay [flags] search <topic>", c.args)
		usageLines(t, r, c.args)
		assert.Empty(t, r.stdout, c.args)
	}

	r := s.cli(t, "search", topic, "--cursor", "5:n:1:x")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, `redisdelay: cursor "5:n:1:x" names partition 5, but topic "orders.close-unpaid" has 1: pass the cursor of the previous call unchanged, or "" to start`+"\n", r.stderr)
	r = s.cli(t, "search", topic, "--group", group, "--cursor", "3/1-0")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `cursor "3/1-0" is not one a search or bulk action returned`)
}

// Cursors hold message UUIDs, which the publisher chose: the hint quotes
// them for the shell, and escapes what a terminal would act on.
func TestSearch_ShellWord(t *testing.T) {
	for in, want := range map[string]string{
		"0:n:1.7954e+12:3e42c17c-67fa-499c-b635-09a1c3ce0795": "0:n:1.7954e+12:3e42c17c-67fa-499c-b635-09a1c3ce0795",
		"2/1795400834527-0": "2/1795400834527-0",
		"0:n:1:order 1":     "'0:n:1:order 1'",
		"0:n:1:it's":        `'0:n:1:it'\''s'`,
		"0:n:1:é":           "'0:n:1:é'",
		"0:n:1:\x1b[31m'\\": `$'0:n:1:\x1b[31m\'\\'`,
		"0:n:1:\u202e\xff":  `$'0:n:1:\u202e\xff'`,
		"":                  "''",
	} {
		assert.Equal(t, want, shellWord(in), "%q", in)
	}
}
