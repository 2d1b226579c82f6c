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
	ctx := context.Background()
	included := map[string]bool{}
	entries, err := scriptFiles.ReadDir("scripts")
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lua")
		names = append(names, name)
		_, incs, _ := splitScript(readScript(name))
		for _, inc := range incs {
			included[inc] = true
		}
	}
	for _, name := range names {
		if !included[name] {
			require.NoError(t, c.ScriptLoad(ctx, scriptSource(name)).Err(), name)
		}
	}
}

// splitScript cuts a script's source into its shebang line (with its
// newline; "" for none), the includes its include line names, and the rest
// (from the include line on).
func splitScript(src string) (shebang string, includes []string, rest string) {
	rest = src
	if strings.HasPrefix(rest, "#!") {
		line, after, _ := strings.Cut(rest, "\n")
		shebang, rest = line+"\n", after
	}
	first, _, _ := strings.Cut(rest, "\n")
	if list, ok := strings.CutPrefix(first, includeLine); ok {
		for _, name := range strings.Split(list, ",") {
			includes = append(includes, strings.TrimSpace(name))
		}
	}
	return shebang, includes, rest
}

func (c *fairCall) PublishArgs() *PubArgs { return &c.PubArgs }
