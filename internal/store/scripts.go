package store

import (
	"embed"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts are the specification of the data model: each opens with
// the keys and arguments it takes and what it returns.
//
// Scripts that only move, settle or delete messages already stored, or
// renew small bookkeeping keys (promote, reclaim, trim, ack, nack, extend,
// release, init, own, members, unlease), start with "#!lua flags=allow-oom":
// at maxmemory with the noeviction policy Redis refuses a script without
// it at its first write that may grow memory (promote's lease SET), so
// scheduling would stop, and with it promotion and trimming, which are what
// frees memory. publish (new messages) keeps Redis's default and fails
// cleanly with OOM. Script flags need Redis 7.0 or later.
//
//go:embed scripts/*.lua scripts/include/*.lua
var scriptFiles embed.FS

// loadScript returns an embedded script.
func loadScript(name string) *redis.Script { return redis.NewScript(scriptSource(name)) }

// scriptSource is the source of an embedded script as Redis runs it.
//
// Includes (scripts/include/*.lua: clock, lib, ...) hold helpers that
// several scripts call. A file that calls the helpers of an include names
// it on its first line (after the shebang, which Redis reads only as the
// first line), comma-separated, as in "-- include: clock, stream"; an
// include does the same for the includes it calls (lib names clock: its
// requeue reads clock's now_ceil_ms). scriptSource puts in front of the
// script the helpers it calls, directly or through other helpers, from
// every include it needs, transitively, each once and after those it
// names (as BullMQ's @include loader does), so a script names only what
// it calls itself. An include only defines local functions: no shebang and
// no top-level return. TestScripts_Includes checks that every file names
// exactly the includes whose helpers it calls, and that they form no
// cycle.
//
// Only the helpers called go in because Redis runs a script's top level at
// each call: every helper defined there is a closure made and collected
// again, whether called or not. promote.lua's three includes (28
// helpers) cost Redis 28,000 instructions a call (callgrind), a sixth of
// an idle tick.
func scriptSource(name string) string {
	shebang, incs, rest := splitScript(readScript(name))
	var order []string // the includes, each after those it names
	added := map[string]bool{}
	var add func(inc string)
	add = func(inc string) {
		if added[inc] {
			return
		}
		added[inc] = true
		_, deps, _ := splitScript(readInclude(inc))
		for _, d := range deps {
			add(d)
		}
		order = append(order, inc)
	}
	for _, inc := range incs {
		add(inc)
	}
	var all []helper
	byName := map[string]helper{}
	for _, inc := range order {
		for _, h := range helpers(inc) {
			all = append(all, h)
			byName[h.name] = h
		}
	}
	called := map[string]bool{}
	var visit func(src string)
	visit = func(src string) {
		for _, m := range luaCall.FindAllStringSubmatch(src, -1) {
			if h, ok := byName[m[1]]; ok && !called[h.name] {
				called[h.name] = true
				visit(luaCode(h.src))
			}
		}
	}
	visit(luaCode(rest))
	var b strings.Builder
	b.WriteString(shebang)
	for _, h := range all {
		if called[h.name] {
			b.WriteString(h.src)
		}
	}
	b.WriteString(rest)
	return b.String()
}

var (
	luaCall        = regexp.MustCompile(`\b(\w+)\(`) // the helpers call each other so, never by value
	luaLongComment = regexp.MustCompile(`(?s)--\[\[.*?\]\]`)
	luaComment     = regexp.MustCompile(`--[^\n]*`)
)

// luaCode is src without its comments (the scripts have no "--" in strings).
func luaCode(src string) string {
	return luaComment.ReplaceAllString(luaLongComment.ReplaceAllString(src, ""), "")
}

// helper is a function an include defines: its name and its source.
type helper struct{ name, src string }

// helpers returns the functions include inc defines, in order.
func helpers(inc string) []helper {
	_, _, src := splitScript(readInclude(inc))
	return helpersOf(inc, src)
}

// helpersOf returns the functions of src, the source of include inc, in
// order: each from its "local function" line to the first line that is
// "end" (or that line alone when it ends with " end"). It panics at
// anything else outside them but comments (an include only defines local
// functions), as the scripts load when the package does.
func helpersOf(inc, src string) []helper {
	var (
		out     []helper
		cur     *strings.Builder
		name    string
		comment bool // within a --[[ ]] block
	)
	for _, line := range strings.SplitAfter(src, "\n") {
		text := strings.TrimRight(line, "\n")
		switch {
		case cur != nil:
			cur.WriteString(line)
			if text == "end" {
				out = append(out, helper{name, cur.String()})
				cur = nil
			}
		case comment:
			comment = !strings.Contains(text, "]]")
		case strings.HasPrefix(text, "--[["):
			comment = !strings.Contains(text, "]]")
		case text == "" || strings.HasPrefix(text, "--"):
		case strings.HasPrefix(text, "local function "):
			name, _, _ = strings.Cut(strings.TrimPrefix(text, "local function "), "(")
			if strings.HasSuffix(text, " end") {
				out = append(out, helper{name, line})
				continue
			}
			cur = &strings.Builder{}
			cur.WriteString(line)
		default:
			panic("redisdelay: include " + inc + " has a line outside its functions: " + text)
		}
	}
	if cur != nil {
		panic("redisdelay: include " + inc + ": function " + name + " has no closing line \"end\"")
	}
	return out
}

// splitScript splits a file into its shebang line ("" when it has none),
// the includes its include line names, and the rest (the include line
// included: a comment).
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

// includeLine starts the line by which a file names its includes.
const includeLine = "-- include: "

func readScript(name string) string { return readEmbedded("scripts/" + name + ".lua") }

func readInclude(name string) string { return readEmbedded("scripts/include/" + name + ".lua") }

func readEmbedded(path string) string {
	src, err := scriptFiles.ReadFile(path)
	if err != nil {
		panic("redisdelay: missing embedded script " + path)
	}
	return string(src)
}

var (
	publishScript    = loadScript("publish")
	appendScript     = loadScript("append")
	delayedScript    = loadScript("delayed")
	promoteScript    = loadScript("promote")
	unleaseScript    = loadScript("unlease")
	nackScript       = loadScript("nack")
	ackScript        = loadScript("ack")
	releaseScript    = loadScript("release")
	reclaimScript    = loadScript("reclaim")
	extendScript     = loadScript("extend")
	requeueScript    = loadScript("requeue")
	cancelScript     = loadScript("cancel")
	initScript       = loadScript("init")
	trimScript       = loadScript("trim")
	dropGroupScript  = loadScript("dropgroup")
	ownScript        = loadScript("own")
	membersScript    = loadScript("members")
	idleScript       = loadScript("idle")
	findScript       = loadScript("find")
	gateScript       = loadScript("gate")
	slotScript       = loadScript("slot")
	rescheduleScript = loadScript("reschedule")
	unpackScript     = loadScript("unpack")
	farPullScript    = loadScript("farpull")
	peekScript       = loadScript("peek")
	pickScript       = loadScript("pick")
	ffBeginScript    = loadScript("ffbegin")
	ffMergeScript    = loadScript("ffmerge")
	ffSwapScript     = loadScript("ffswap")

	recurringAddScript   = loadScript("recurringadd")
	recurringPauseScript = loadScript("recurringpause")
	recurringClaimScript = loadScript("recurringclaim")
	recurringRetryScript = loadScript("recurringretry")

	recurringOverlapScript = loadScript("recurringoverlap")
	recurringSkipScript    = loadScript("recurringskip")
	announceScript         = loadScript("announce")
	rewriteScript          = loadScript("rewrite")
)
