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
//
// For the same reason a script whose calls seldom need an include takes
// it lazily: "lazy fair" on its include line. That include's helpers are
// then made only when the script calls use_fair(), which it does before
// calling any of them (see lazyBlock); only the script itself may call
// them. promote.lua so takes fair.lua, which most ticks do not need: its
// helpers were a tenth of an idle tick's instructions (callgrind).
func scriptSource(name string) string { return assemble(name, readScript(name), readInclude) }

// assemble is scriptSource for the script name of source src, its
// includes read by include.
func assemble(name, src string, include func(string) string) string {
	shebang, incs, rest := splitScript(src)
	lazy := lazyIncludes(src)
	var order []string // the includes, each after those it names
	added := map[string]bool{}
	var add func(inc string)
	add = func(inc string) {
		if added[inc] {
			return
		}
		added[inc] = true
		_, deps, _ := splitScript(include(inc))
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
	incOf := map[string]string{} // helper -> its include
	for _, inc := range order {
		_, _, isrc := splitScript(include(inc))
		for _, h := range helpersOf(inc, isrc) {
			all = append(all, h)
			byName[h.name] = h
			incOf[h.name] = inc
		}
	}
	// reach marks in seen the helpers code calls, directly or through
	// others, not going into those of the includes taken lazily when eager
	// (a helper put in front of the script may not call them).
	var reach func(code, by string, eager bool, seen map[string]bool)
	reach = func(code, by string, eager bool, seen map[string]bool) {
		for _, m := range luaCall.FindAllStringSubmatch(code, -1) {
			h, ok := byName[m[1]]
			switch {
			case !ok || seen[h.name]:
			case eager && lazy[incOf[h.name]] && by != "":
				panic("redisdelay: " + name + ".lua takes include " + incOf[h.name] + " lazily, but " + by + " of include " + incOf[by] + " calls its " + h.name)
			case eager && lazy[incOf[h.name]]:
			default:
				seen[h.name] = true
				reach(luaCode(h.src), h.name, eager, seen)
			}
		}
	}
	code := luaCode(rest)
	eager := map[string]bool{}
	reach(code, "", true, eager)
	var b strings.Builder
	b.WriteString(shebang)
	for _, h := range all {
		if eager[h.name] {
			b.WriteString(h.src)
		}
	}
	// Each include taken lazily: the helpers of it the script calls, made
	// with those they call that the script's front lacks.
	for _, inc := range order {
		if !lazy[inc] {
			continue
		}
		if !strings.Contains(code, "use_"+inc+"()") {
			panic("redisdelay: " + name + ".lua takes include " + inc + " lazily but never calls use_" + inc + "()")
		}
		var exported []string
		inside := map[string]bool{}
		for _, m := range luaCall.FindAllStringSubmatch(code, -1) {
			if h, ok := byName[m[1]]; ok && incOf[h.name] == inc && !inside[h.name] {
				exported = append(exported, h.name)
				inside[h.name] = true
				reach(luaCode(h.src), h.name, false, inside)
			}
		}
		head, tail := lazyBlock(inc, exported)
		b.WriteString(head)
		for _, h := range all {
			if inside[h.name] && !eager[h.name] {
				b.WriteString(h.src)
			}
		}
		b.WriteString(tail)
	}
	b.WriteString(rest)
	return b.String()
}

// lazyBlock returns the code scriptSource puts around the helpers of
// include inc that a script takes lazily, exported being those the script
// calls: locals for them, set by use_<inc>() at its first call.
func lazyBlock(inc string, exported []string) (head, tail string) {
	names := strings.Join(exported, ", ")
	head = "local " + names + "\n" +
		"local function use_" + inc + "()\n" +
		"  if " + exported[0] + " then return end\n" +
		"  " + names + " = (function()\n"
	tail = "  return " + names + "\n" +
		"  end)()\n" +
		"end\n"
	return head, tail
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
			includes = append(includes, strings.TrimPrefix(strings.TrimSpace(name), lazyPrefix))
		}
	}
	return shebang, includes, rest
}

// lazyIncludes returns the includes a file's include line takes lazily.
func lazyIncludes(src string) map[string]bool {
	lazy := map[string]bool{}
	if strings.HasPrefix(src, "#!") {
		_, src, _ = strings.Cut(src, "\n")
	}
	first, _, _ := strings.Cut(src, "\n")
	if list, ok := strings.CutPrefix(first, includeLine); ok {
		for _, name := range strings.Split(list, ",") {
			if inc, ok := strings.CutPrefix(strings.TrimSpace(name), lazyPrefix); ok {
				lazy[inc] = true
			}
		}
	}
	return lazy
}

const (
	// includeLine starts the line by which a file names its includes.
	includeLine = "-- include: "
	// lazyPrefix marks an include the file takes lazily (see scriptSource).
	lazyPrefix = "lazy "
)

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
	unparkScript     = loadScript("unpark")
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
