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
