package store

import (
	"embed"
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
// script every include it needs, transitively, each once and after those
// it names (as BullMQ's @include loader does), so a script names only what
// it calls itself. An include only defines local functions: no shebang and
// no top-level return. TestScripts_Includes checks that every file names
// exactly the includes whose helpers it calls, and that they form no
// cycle.
func scriptSource(name string) string {
	shebang, incs, rest := splitScript(readScript(name))
	var b strings.Builder
	b.WriteString(shebang)
	added := map[string]bool{}
	var add func(inc string)
	add = func(inc string) {
		if added[inc] {
			return
		}
		added[inc] = true
		_, deps, src := splitScript(readInclude(inc))
		for _, d := range deps {
			add(d)
		}
		b.WriteString(src)
	}
	for _, inc := range incs {
		add(inc)
	}
	b.WriteString(rest)
	return b.String()
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
