package store

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

var (
	luaLongComment = regexp.MustCompile(`(?s)--\[\[.*?\]\]`)
	luaComment     = regexp.MustCompile(`--[^\n]*`)
	luaFunction    = regexp.MustCompile(`(?m)^local function (\w+)`)
	luaReturn      = regexp.MustCompile(`(?m)^return\b`)
)

// luaCode is src without its comments (the scripts have no "--" in strings).
func luaCode(src string) string {
	return luaComment.ReplaceAllString(luaLongComment.ReplaceAllString(src, ""), "")
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

// scriptNames are the names of the embedded .lua files, scripts and
// includes.
func scriptNames(t *testing.T) []string {
	entries, err := scriptFiles.ReadDir("scripts")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".lua"))
	}
	return names
}

// calledOf returns the helpers of defined (helper -> its include) that code
// calls, in order of first call.
func calledOf(code string, defined map[string]string) []string {
	var called []string
	for _, m := range regexp.MustCompile(`\b(\w+)\(`).FindAllStringSubmatch(code, -1) {
		if _, ok := defined[m[1]]; ok && !slices.Contains(called, m[1]) {
			called = append(called, m[1])
		}
	}
	return called
}

// TestScriptIncludes guards the include lines (see scriptSource): a script
// that calls a helper its includes do not define fails only when it runs
// (attempt to call a nil value), and one that names an include it does not
// use sends Redis code for nothing, so check every script here.
func TestScriptIncludes(t *testing.T) {
	names := scriptNames(t)
	// The includes are the files some include line names.
	included := map[string]bool{}
	for _, name := range names {
		_, incs, _ := splitScript(readScript(name))
		for _, inc := range incs {
			if !slices.Contains(names, inc) {
				t.Errorf("%s.lua includes %q: there is no %s.lua", name, inc, inc)
				continue
			}
			included[inc] = true
		}
	}
	defined := map[string]string{} // helper -> the include defining it
	uses := map[string][]string{}  // include -> the helpers of others it calls
	for _, inc := range names {
		if !included[inc] {
			continue
		}
		src := readScript(inc)
		shebang, incs, _ := splitScript(src)
		if shebang != "" || incs != nil {
			t.Errorf("%s.lua is an include: it may have no shebang or include line of its own", inc)
		}
		if luaReturn.MatchString(luaCode(src)) {
			t.Errorf("%s.lua is an include: a top-level return would end the scripts that name it", inc)
		}
		if !strings.HasSuffix(src, "\n") {
			t.Errorf("%s.lua does not end with a newline: the next file would continue its last line", inc)
		}
		fns := luaFunction.FindAllStringSubmatch(src, -1)
		if len(fns) == 0 {
			t.Errorf("%s.lua is an include but defines no helper", inc)
		}
		for _, m := range fns {
			if other, ok := defined[m[1]]; ok {
				t.Errorf("%s is defined by both %s.lua and %s.lua", m[1], other, inc)
			}
			defined[m[1]] = inc
		}
	}
	for inc := range included {
		for _, fn := range calledOf(luaCode(readScript(inc)), defined) {
			if defined[fn] != inc {
				uses[inc] = append(uses[inc], fn)
			}
		}
	}

	for _, name := range names {
		if included[name] {
			continue
		}
		src := readScript(name)
		shebang, incs, rest := splitScript(src)
		code := luaCode(rest)
		for _, m := range luaFunction.FindAllStringSubmatch(code, -1) {
			if inc, ok := defined[m[1]]; ok {
				t.Errorf("%s.lua defines %s, a helper of %s.lua: give it another name", name, m[1], inc)
			}
		}
		// Each include may call those named before it; the script, all.
		used := map[string]bool{}
		for i, inc := range incs {
			if slices.Contains(incs[:i], inc) {
				t.Errorf("%s.lua names %s twice", name, inc)
			}
			for _, fn := range uses[inc] {
				if !slices.Contains(incs[:i], defined[fn]) {
					t.Errorf("%s.lua: its include %s calls %s, so %s must be named before %s", name, inc, fn, defined[fn], inc)
				}
			}
		}
		for _, fn := range calledOf(code, defined) {
			if !slices.Contains(incs, defined[fn]) {
				t.Errorf("%s.lua calls %s of %s.lua but its include line does not name %s", name, fn, defined[fn], defined[fn])
			}
			used[defined[fn]] = true
		}
		// An include is used when the script or a used include (one named
		// after it) calls one of its helpers.
		for i := len(incs) - 1; i >= 0; i-- {
			if !used[incs[i]] {
				t.Errorf("%s.lua names %s but calls none of its helpers (nor do its other includes)", name, incs[i])
				continue
			}
			for _, fn := range uses[incs[i]] {
				used[defined[fn]] = true
			}
		}

		// What Redis runs: the shebang, the includes in order, the script.
		want := shebang
		for _, inc := range incs {
			want += readScript(inc)
		}
		want += rest
		if got := scriptSource(name); got != want {
			t.Errorf("%s.lua: scriptSource does not put the shebang, then %v in order, then the script", name, incs)
		}
	}
}

// TestScriptsLoad has a server compile every script as Redis runs it
// (SCRIPT LOAD): a syntax error, a shebang flag the server does not know,
// or a function over Lua's limits (200 locals, 60 upvalues) fails here
// rather than in the first test that runs the script.
func TestScriptsLoad(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	included := map[string]bool{}
	for _, name := range scriptNames(t) {
		_, incs, _ := splitScript(readScript(name))
		for _, inc := range incs {
			included[inc] = true
		}
	}
	for _, name := range scriptNames(t) {
		if included[name] {
			continue
		}
		if err := c.ScriptLoad(ctx, scriptSource(name)).Err(); err != nil {
			t.Errorf("%s.lua: %v", name, err)
		}
	}
}
