package store

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

var (
	luaFunction = regexp.MustCompile(`(?m)^local function (\w+)`)
	luaReturn   = regexp.MustCompile(`(?m)^return\b`)
)

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

// TestScripts_Includes guards the include lines (see scriptSource): a script
// that calls a helper its includes do not define fails only when it runs
// (attempt to call a nil value), and one that names an include it does not
// use sends Redis code for nothing, so check every file here. Each file,
// script or include, names exactly the includes whose helpers it calls
// itself (those they call come with them); the includes form no cycle; and
// scriptSource puts before the script each helper it calls, directly or
// through other helpers, once and after those it calls, and no other.
func TestScripts_Includes(t *testing.T) {
	includes := includeNames(t)
	defined := map[string]string{} // helper -> the include defining it
	for _, inc := range includes {
		src := readInclude(inc)
		shebang, _, rest := splitScript(src)
		if shebang != "" {
			t.Errorf("include/%s.lua is an include: it may have no shebang", inc)
		}
		if luaReturn.MatchString(luaCode(rest)) {
			t.Errorf("include/%s.lua is an include: a top-level return would end the scripts that name it", inc)
		}
		if !strings.HasSuffix(src, "\n") {
			t.Errorf("include/%s.lua does not end with a newline: the next file would continue its last line", inc)
		}
		fns := luaFunction.FindAllStringSubmatch(rest, -1)
		if len(fns) == 0 {
			t.Errorf("include/%s.lua is an include but defines no helper", inc)
		}
		for _, m := range fns {
			if other, ok := defined[m[1]]; ok {
				t.Errorf("%s is defined by both include/%s.lua and include/%s.lua", m[1], other, inc)
			}
			defined[m[1]] = inc
		}
	}
	if len(defined) == 0 {
		t.Fatal("no include defines a helper")
	}
	// direct checks one file's include line against the helpers it calls.
	direct := func(what, own, src string) []string {
		_, incs, rest := splitScript(src)
		code := luaCode(rest)
		if own == "" {
			for _, m := range luaFunction.FindAllStringSubmatch(code, -1) {
				if inc, ok := defined[m[1]]; ok {
					t.Errorf("%s defines %s, a helper of include/%s.lua: give it another name", what, m[1], inc)
				}
			}
		}
		calls := map[string]bool{}
		for _, fn := range calledOf(code, defined) {
			if defined[fn] == own {
				continue
			}
			calls[defined[fn]] = true
			if !slices.Contains(incs, defined[fn]) {
				t.Errorf("%s calls %s of include/%s.lua but its include line does not name %s", what, fn, defined[fn], defined[fn])
			}
		}
		for i, inc := range incs {
			switch {
			case !slices.Contains(includes, inc):
				t.Errorf("%s names %q: there is no include/%s.lua", what, inc, inc)
			case slices.Contains(incs[:i], inc):
				t.Errorf("%s names %s twice", what, inc)
			case !calls[inc]:
				t.Errorf("%s names %s but calls none of its helpers (the includes it needs come with those it names)", what, inc)
			}
		}
		return incs
	}
	deps := map[string][]string{}
	for _, inc := range includes {
		deps[inc] = direct("include/"+inc+".lua", inc, readInclude(inc))
	}
	// No cycle: a depth-first walk never meets an include it is inside.
	state := map[string]int{} // 1 inside, 2 done
	var walk func(inc string, path []string)
	walk = func(inc string, path []string) {
		switch state[inc] {
		case 1:
			t.Errorf("the includes form a cycle: %s", strings.Join(append(path, inc), " -> "))
			return
		case 2:
			return
		}
		state[inc] = 1
		for _, d := range deps[inc] {
			walk(d, append(path, inc))
		}
		state[inc] = 2
	}
	for _, inc := range includes {
		walk(inc, nil)
	}
	if t.Failed() {
		return
	}

	srcOf := map[string]string{} // helper -> its source, as the loader cut it
	for _, inc := range includes {
		for _, h := range helpers(inc) {
			srcOf[h.name] = h.src
		}
	}
	for _, name := range scriptNames(t) {
		src := readScript(name)
		incs := direct(name+".lua", "", src)
		// What Redis runs: the shebang, the helpers the script calls,
		// directly or through other helpers (each once, after those it
		// calls, nothing else), the script.
		shebang, _, rest := splitScript(src)
		got := scriptSource(name)
		if !strings.HasPrefix(got, shebang) || !strings.HasSuffix(got, rest) {
			t.Errorf("%s.lua: scriptSource does not start with its shebang and end with the script", name)
			continue
		}
		body := got[len(shebang) : len(got)-len(rest)]
		// an include taken lazily: its helpers, less the block making them
		// at use_<include>()
		for inc := range lazyIncludes(src) {
			m := regexp.MustCompile(`(?m)^local ([\w, ]+)\nlocal function use_` + inc + `\(\)\n`).FindStringSubmatchIndex(body)
			if m == nil {
				t.Errorf("%s.lua takes %s lazily, but scriptSource has no use_%s", name, inc, inc)
				continue
			}
			head, tail := lazyBlock(inc, strings.Split(body[m[2]:m[3]], ", "))
			end := strings.Index(body[m[0]:], tail)
			if !strings.HasPrefix(body[m[0]:], head) || end < 0 {
				t.Errorf("%s.lua: scriptSource's block for the lazy include %s is not lazyBlock's", name, inc)
				continue
			}
			body = body[:m[0]] + body[m[0]+len(head):m[0]+end] + body[m[0]+end+len(tail):]
		}
		pos, size := map[string]int{}, 0
		for i, m := range luaFunction.FindAllStringSubmatch(body, -1) {
			inc, ok := defined[m[1]]
			if _, twice := pos[m[1]]; !ok || twice {
				t.Errorf("%s.lua: scriptSource defines %s, not once a helper of an include", name, m[1])
				continue
			}
			if !slices.Contains(incs, inc) && !slices.ContainsFunc(incs, func(i string) bool { return reaches(deps, i, inc) }) {
				t.Errorf("%s.lua: scriptSource holds %s of include/%s.lua, which the script does not need", name, m[1], inc)
			}
			pos[m[1]] = i
			size += len(srcOf[m[1]])
		}
		if size != len(body) {
			t.Errorf("%s.lua: scriptSource holds more than the helpers (%d of %d bytes)", name, size, len(body))
		}
		needed := map[string]bool{}
		var need func(code, by string)
		need = func(code, by string) {
			for _, fn := range calledOf(code, defined) {
				if fn == by {
					continue // recursion
				}
				p, ok := pos[fn]
				switch {
				case !ok:
					t.Errorf("%s.lua: scriptSource lacks %s, which %s calls", name, fn, by)
				case by != "the script" && p > pos[by]:
					t.Errorf("%s.lua: scriptSource defines %s after %s, which calls it", name, fn, by)
				}
				if ok && !needed[fn] {
					needed[fn] = true
					need(luaCode(srcOf[fn]), fn)
				}
			}
		}
		need(luaCode(rest), "the script")
		for fn := range pos {
			if !needed[fn] {
				t.Errorf("%s.lua: scriptSource holds %s, which nothing calls", name, fn)
			}
		}
	}
}

// reaches reports whether include from names to, directly or through others.
func reaches(deps map[string][]string, from, to string) bool {
	for _, d := range deps[from] {
		if d == to || reaches(deps, d, to) {
			return true
		}
	}
	return false
}

// TestScripts_Load has a server compile every script as Redis runs it
// (SCRIPT LOAD): a syntax error, a shebang flag the server does not know,
// or a function over Lua's limits (200 locals, 60 upvalues) fails here
// rather than in the first test that runs the script.
func TestScripts_Load(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	for _, name := range scriptNames(t) {
		if err := c.ScriptLoad(ctx, scriptSource(name)).Err(); err != nil {
			t.Errorf("%s.lua: %v", name, err)
		}
	}
}

var (
	luaHeaderEntry = regexp.MustCompile(`(?m)^\s*(KEYS|ARGV)\[(\d+)\]\s+(\S+)`)
	luaLocal       = regexp.MustCompile(`^local\s+(\w+(?:\s*,\s*\w+)*)\s*=\s*(.+)$`)
	luaFixedIndex  = regexp.MustCompile(`\b(KEYS|ARGV)\[(\d+)\]`)
)

// splitTopLevel splits a Lua expression list at its top-level commas.
func splitTopLevel(exprs string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range exprs {
		switch r {
		case '(', '{', '[':
			depth++
		case ')', '}', ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, strings.TrimSpace(exprs[start:i]))
				start = i + 1
			}
		}
	}
	return append(parts, strings.TrimSpace(exprs[start:]))
}

// TestScripts_Locals guards the scripts' named keys and arguments. Each
// script's header lists its fixed keys and arguments, KEYS[1] name ...,
// ARGV[1] ..., in order (a variable tail, as KEYS[13...], KEYS[3g+8] or
// ARGV[j+1], is not counted). Right after the header, a block of local
// lines gives each of them a local, in the same order: a key the name the
// header gives it (local waiting = KEYS[1]), an argument a name of its own
// (plain, or converted: tonumber(ARGV[2])). The body uses the names: no
// KEYS[<digits>] or ARGV[<digits>] outside the block, so a key added,
// removed or moved in the header cannot leave the body reading the wrong
// one. Tails keep index arithmetic (KEYS[g], ARGV[j + 2]).
func TestScripts_Locals(t *testing.T) {
	for _, inc := range includeNames(t) {
		_, _, rest := splitScript(readInclude(inc))
		if luaFixedIndex.MatchString(luaCode(rest)) {
			t.Errorf("include/%s.lua is an include: its helpers take keys and arguments as parameters", inc)
		}
	}
	for _, name := range scriptNames(t) {
		_, _, rest := splitScript(readScript(name))
		start := strings.Index(rest, "--[[")
		end := strings.Index(rest, "\n]]\n")
		if start < 0 || end < start {
			t.Errorf("%s.lua has no header (--[[ ... ]] listing its keys and arguments)", name)
			continue
		}
		header, body := rest[start:end], rest[end+len("\n]]\n"):]

		var headerKeys []string // names of KEYS[1], KEYS[2], ...
		headerArgs := 0
		for _, m := range luaHeaderEntry.FindAllStringSubmatch(header, -1) {
			n, want := m[2], len(headerKeys)+1
			if m[1] == "ARGV" {
				want = headerArgs + 1
			}
			if n != strconv.Itoa(want) {
				t.Errorf("%s.lua: its header lists %s[%s] where %s[%d] belongs", name, m[1], n, m[1], want)
				continue
			}
			if m[1] == "KEYS" {
				headerKeys = append(headerKeys, m[3])
			} else {
				headerArgs++
			}
		}

		// The locals block: the local (and comment) lines after the header.
		lines := strings.Split(body, "\n")
		n := 0
		for n < len(lines) && (strings.HasPrefix(lines[n], "local ") || strings.HasPrefix(lines[n], "--")) {
			n++
		}
		var keys []string // the names given KEYS[1], KEYS[2], ... in order
		args := 0
		for _, line := range lines[:n] {
			code := strings.TrimSpace(luaCode(line))
			if !luaFixedIndex.MatchString(code) {
				continue
			}
			m := luaLocal.FindStringSubmatch(code)
			if m == nil {
				t.Errorf("%s.lua: cannot read the local line %q", name, line)
				continue
			}
			names, exprs := splitTopLevel(m[1]), splitTopLevel(m[2])
			if len(names) != len(exprs) {
				t.Errorf("%s.lua: %q: give each name its own expression", name, line)
				continue
			}
			for i, expr := range exprs {
				for _, ix := range luaFixedIndex.FindAllStringSubmatch(expr, -1) {
					if ix[1] == "KEYS" {
						if expr != ix[0] {
							t.Errorf("%s.lua: %s = %s: a key's local is the key itself", name, names[i], expr)
						}
						if ix[2] != strconv.Itoa(len(keys)+1) {
							t.Errorf("%s.lua: its locals name %s where KEYS[%d] belongs (header order)", name, ix[0], len(keys)+1)
						}
						keys = append(keys, names[i])
					} else {
						if ix[2] != strconv.Itoa(args+1) {
							t.Errorf("%s.lua: its locals name %s where ARGV[%d] belongs (header order)", name, ix[0], args+1)
						}
						args++
					}
				}
			}
		}
		if !slices.Equal(keys, headerKeys) {
			t.Errorf("%s.lua: the locals of its keys are %v; its header names them %v", name, keys, headerKeys)
		}
		if args != headerArgs {
			t.Errorf("%s.lua: its locals take %d arguments; its header lists %d (ARGV[1..%d])", name, args, headerArgs, headerArgs)
		}
		for i, line := range lines[n:] {
			if ix := luaFixedIndex.FindString(luaCode(line)); ix != "" {
				t.Errorf("%s.lua: %s in the body (%q, %d lines after the locals): use its local", name, ix, strings.TrimSpace(line), i+1)
			}
		}
	}
}

// TestScripts_HelpersOfBadInclude: an include the loader cannot split
// into helpers stops the package from loading, saying where.
func TestScripts_HelpersOfBadInclude(t *testing.T) {
	got := helpersOf("x", "--[[\n  doc\n]]\n-- one\nlocal function a(v) return v end\n\nlocal function b()\n  return a(1)\nend\n")
	if len(got) != 2 || got[0].name != "a" || got[1].name != "b" || got[1].src != "local function b()\n  return a(1)\nend\n" {
		t.Fatalf("helpersOf = %q", got)
	}
	for src, want := range map[string]string{
		"local N = 3\n":                         "redisdelay: include x has a line outside its functions: local N = 3",
		"local function a()\n  return 1\n  end": `redisdelay: include x: function a has no closing line "end"`,
	} {
		func() {
			defer func() {
				if r := recover(); r != want {
					t.Errorf("helpersOf(%q) panicked with %v, want %q", src, r, want)
				}
			}()
			helpersOf("x", src)
		}()
	}
}

// TestScripts_LazyInclude checks scriptSource's lazy includes on scripts
// of its own: the helpers of an include taken lazily are made at its
// use_<include>() with those only they call, and a script that never calls
// use_<include>(), or whose front would call them, is refused.
func TestScripts_LazyInclude(t *testing.T) {
	includes := map[string]string{
		"base": "local function twice(x) return 2 * x end\nlocal function half(x) return x / 2 end\n",
		"rare": "-- include: base\nlocal function quad(x) return twice(twice(x)) end\n",
		"uses": "-- include: rare\nlocal function eight(x) return twice(quad(x)) end\n",
	}
	include := func(inc string) string { return includes[inc] }

	src := "-- include: base, lazy rare\nlocal y = half(4)\nuse_rare()\nreturn quad(y)\n"
	got := assemble("ok", src, include)
	head, tail := lazyBlock("rare", []string{"quad"})
	want := "local function half(x) return x / 2 end\n" + head +
		"local function twice(x) return 2 * x end\nlocal function quad(x) return twice(twice(x)) end\n" + tail + src
	require.Equal(t, want, got)
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	n, err := c.Eval(context.Background(), got, nil).Int()
	require.NoError(t, err)
	require.Equal(t, 8, n)

	require.PanicsWithValue(t, "redisdelay: never.lua takes include rare lazily but never calls use_rare()", func() {
		assemble("never", "-- include: lazy rare\nreturn quad(1)\n", include)
	})
	require.PanicsWithValue(t, "redisdelay: front.lua takes include rare lazily, but eight of include uses calls its quad", func() {
		assemble("front", "-- include: uses, lazy rare\nuse_rare()\nreturn eight(1) + quad(1)\n", include)
	})
}

// helpers returns the functions include inc defines, in order.
func helpers(inc string) []helper {
	_, _, src := splitScript(readInclude(inc))
	return helpersOf(inc, src)
}

// luaNumber is an argument that is a number literal.
var luaNumber = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// callArgs returns the top-level arguments of each redis.call(...) in code
// (comments removed): a call's arguments end at its closing parenthesis,
// past nested calls and tables.
func callArgs(code string) [][]string {
	var calls [][]string
	for at := 0; ; {
		i := strings.Index(code[at:], "redis.call(")
		if i < 0 {
			return calls
		}
		at += i + len("redis.call(")
		var args []string
		depth, start, quote := 0, at, byte(0)
		for ; at < len(code) && depth >= 0; at++ {
			switch c := code[at]; {
			case quote != 0:
				if c == '\\' {
					at++
				} else if c == quote {
					quote = 0
				}
			case c == '\'' || c == '"':
				quote = c
			case c == '(' || c == '{' || c == '[':
				depth++
			case c == ')' || c == '}' || c == ']':
				depth--
			case c == ',' && depth == 0:
				args = append(args, strings.TrimSpace(code[start:at]))
				start = at + 1
			}
		}
		calls = append(calls, append(args, strings.TrimSpace(code[start:at-1])))
	}
}

// TestScripts_NoNumberLiterals guards a cost: Redis 7.0 makes a string of
// each Lua number a script passes to redis.call with snprintf's %.17g,
// about 2k instructions even for a 0 (callgrind: `ZRANGE key 0 0` cost
// delayed.lua 4k of its 111k a publish), where a string literal costs
// nothing. So a script passes '0', not 0. (Numbers computed at run time
// go through string.format('%d', n) where a call runs per message.)
func TestScripts_NoNumberLiterals(t *testing.T) {
	check := func(file, src string) {
		for _, args := range callArgs(luaCode(src)) {
			for _, a := range args[1:] {
				if luaNumber.MatchString(a) {
					t.Errorf("%s: redis.call(%s) passes the number %s: write '%s' (Redis formats a Lua number with %%.17g)", file, strings.Join(args, ", "), a, a)
				}
			}
		}
	}
	for _, name := range scriptNames(t) {
		check(name+".lua", readScript(name))
	}
	for _, inc := range includeNames(t) {
		check("include/"+inc+".lua", readInclude(inc))
	}
	// the check itself
	got := callArgs("x = redis.call('ZRANGE', k, 0, f(a, 1), {2}, '(')[1]")
	require.Equal(t, [][]string{{"'ZRANGE'", "k", "0", "f(a, 1)", "{2}", "'('"}}, got)
}
