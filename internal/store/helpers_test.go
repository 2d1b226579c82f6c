package store

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// Helpers of several test files of the package.

// fairCall is a Publish call of the tests.
type fairCall struct{ PubArgs }

// freshClient returns a client of a server of the test's own, closed when
// the test ends.
func freshClient(t *testing.T) *redis.Client {
	t.Helper()
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// wakeNotes subscribes to the wake-up channel of sh and returns a function
// that returns the notes published there since its last call: up to a
// note of its own, which it publishes first.
func wakeNotes(t *testing.T, c *redis.Client, sh Shard) func() []string {
	t.Helper()
	ctx := context.Background()
	ps := c.Subscribe(ctx, sh.Wake())
	t.Cleanup(func() { _ = ps.Close() })
	_, err := ps.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)
	return func() []string {
		t.Helper()
		require.NoError(t, c.Publish(ctx, sh.Wake(), "end").Err())
		var got []string
		for {
			m, err := ps.ReceiveMessage(ctx)
			require.NoError(t, err)
			if m.Payload == "end" {
				return got
			}
			got = append(got, m.Payload)
		}
	}
}

// loadScripts loads every script, so the pipelined ones (pick, ack) run at
// their first use.
func loadScripts(t testing.TB, c *redis.Client) {
	t.Helper()
	for _, name := range scriptNames(t) {
		require.NoError(t, c.ScriptLoad(context.Background(), scriptSource(name)).Err(), name)
	}
}

// scriptNames are the names of the scripts (scripts/*.lua), includeNames
// those of the includes (scripts/include/*.lua).
func scriptNames(t testing.TB) []string  { return luaNames(t, "scripts") }
func includeNames(t testing.TB) []string { return luaNames(t, "scripts/include") }

func luaNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := scriptFiles.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".lua"); ok {
			names = append(names, name)
		}
	}
	return names
}

func (c *fairCall) PublishArgs() *PubArgs { return &c.PubArgs }
