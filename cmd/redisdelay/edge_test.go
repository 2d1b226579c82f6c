package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// A message's UUID and metadata come from whoever published it: control
// characters in them (an OSC sequence that retitles the terminal, a
// colour, a bell) are shown escaped, never sent to the terminal.
func TestWaiting_EscapesControlCharacters(t *testing.T) {
	s := setupSample(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: s.client, KeyPrefix: s.prefix}, nil)
	require.NoError(t, err)
	defer pub.Close()
	evil := "\x1b]0;owned\x07id"
	msg := message.NewMessage(evil, []byte("x"))
	msg.Metadata.Set("note", "\x1b[31mred\u202e")
	delay.Message(msg, delay.For(time.Minute))
	require.NoError(t, pub.Publish(topic, msg))

	out := s.ok(t, "waiting", topic)
	assert.NotContains(t, out, "\x1b")
	assert.NotContains(t, out, "\x07")
	assert.NotContains(t, out, "\u202e")
	assert.Contains(t, out, `\x1b]0;owned\aid`)
	assert.Contains(t, out, `note=\x1b[31mred\u202e`)

	// JSON escapes them itself.
	var found bool
	for _, w := range decode[[]waitingJSON](t, s.ok(t, "--json", "waiting", topic)) {
		found = found || w.UUID == evil
	}
	assert.True(t, found)
}

// One waiting body that cannot be decoded does not hide the rest of the
// page: it is listed as corrupt.
func TestWaiting_ShowsCorruptBody(t *testing.T) {
	s := setupSample(t)
	// Due in hours, it is in the far tier (see internal/store/far.go): a
	// reschedule to its own due time moves it into the waiting set and its
	// hash of bodies.
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: s.client, KeyPrefix: s.prefix})
	require.NoError(t, err)
	w, ok, err := insp.FindWaiting(context.Background(), topic, s.delayed[1])
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = insp.Reschedule(context.Background(), topic, s.delayed[1], w.Due)
	require.NoError(t, err)
	require.True(t, ok)
	bodies := store.Keys{Prefix: s.prefix}.Shard(topic, 0).Bodies()
	require.NoError(t, s.client.HSet(context.Background(), bodies, s.delayed[1], "not a message").Err())

	r := rows(s.ok(t, "waiting", topic))
	require.Len(t, r, 4)
	assert.Equal(t, s.delayed[0], r[1][0])
	assert.Equal(t, s.delayed[1], r[2][0])
	assert.Equal(t, "CORRUPT:", r[2][6], r[2])
	assert.Equal(t, s.delayed[2], r[3][0])

	page := decode[[]waitingJSON](t, s.ok(t, "--json", "waiting", topic))
	require.Len(t, page, 3)
	assert.Equal(t, s.delayed[1], page[1].UUID)
	assert.NotEmpty(t, page[1].Corrupt)
	assert.Empty(t, page[0].Corrupt)
}

// A registry entry that is not a valid topic name (written by hand or by
// another tool) is skipped with a warning; the other topics are listed
// and counted.
func TestTopics_InvalidRegistryEntrySkipped(t *testing.T) {
	s := setupSample(t)
	require.NoError(t, s.client.SAdd(context.Background(), s.prefix+":topics", "bad{topic}").Err())

	for _, args := range [][]string{{"topics"}, {"stats"}, {"--json", "stats"}} {
		r := s.cli(t, args...)
		require.Equal(t, 0, r.code, args)
		assert.Contains(t, r.stdout, topic, args)
		assert.NotContains(t, r.stdout, "bad{topic}", args)
		assert.Contains(t, r.stderr, `"bad{topic}"`, args)
		assert.Contains(t, r.stderr, "not a valid topic name", args)
	}
}

// Malformed dead letter IDs and page bounds are usage errors (exit 2),
// caught before anything is changed.
func TestUsage_BadIDsAndPagesAreErrors(t *testing.T) {
	s := setupSample(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"delete-dead", topic, group, "not-an-id"}, `dead letter ID "not-an-id"`},
		{[]string{"requeue", topic, group, "1-0", "nope"}, `dead letter ID "nope"`},
		{[]string{"dead", topic, group, "--after", "x/1-0"}, `dead letter ID "x/1-0"`},
		{[]string{"waiting", topic, "--limit", "0"}, "--limit is 0: use 1 to 10000"},
		{[]string{"waiting", topic, "--limit", "10001"}, "--limit is 10001: use 1 to 10000"},
		{[]string{"waiting", topic, "--offset", "-1"}, "--offset is -1: use 0 or more"},
		{[]string{"dead", topic, group, "--limit", "0"}, "--limit is 0: use 1 to 10000"},
	} {
		r := s.cli(t, c.args...)
		assert.Equal(t, 2, r.code, c.args)
		assert.Contains(t, r.stderr, c.want, c.args)
		assert.True(t, strings.HasPrefix(r.stderr, "redisdelay: "), c.args)
	}
	assert.Len(t, s.deadIDs(t), 2, "nothing deleted or requeued")
}
