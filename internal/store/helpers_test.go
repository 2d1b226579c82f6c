package store

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Helpers of several test files of the package.

// fairCall is a Publish call of the tests.
type fairCall struct{ PubArgs }

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
