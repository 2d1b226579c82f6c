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
//go:embed scripts/*.lua
var scriptFiles embed.FS

// loadScript returns an embedded script.
func loadScript(name string) *redis.Script { return redis.NewScript(scriptSource(name)) }

// scriptSource is the source of an embedded script as Redis runs it.
//
// Includes: a script that calls helpers of other files (clock.lua,
// lib.lua, ...) names them on its first line after the shebang (which
// Redis reads only as the first line), comma-separated, as in
// "-- include: clock, lib". Each named file is put in front of the script,
// in the order named, so an include may call the helpers of those named
// before it: lib's requeue reads clock's now_ceil_ms, so a script naming
// lib names clock before it. An include only defines local functions: it
// has no shebang, no include line and no top-level return.
// TestScriptIncludes checks that every helper a script or its includes call
// is defined by an include named (before the caller), and that each include
// named is used.
func scriptSource(name string) string {
	src := readScript(name)
	shebang := ""
	if strings.HasPrefix(src, "#!") {
		line, rest, _ := strings.Cut(src, "\n")
		shebang, src = line+"\n", rest
	}
	first, _, _ := strings.Cut(src, "\n")
	if list, ok := strings.CutPrefix(first, includeLine); ok {
		var libs strings.Builder
		for _, inc := range strings.Split(list, ",") {
			libs.WriteString(readScript(strings.TrimSpace(inc)))
		}
		src = libs.String() + src
	}
	return shebang + src
}

// includeLine starts the line by which a script names its includes.
const includeLine = "-- include: "

func readScript(name string) string {
	src, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic("redisdelay: missing embedded script " + name)
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

	schedAddScript   = loadScript("schedadd")
	schedPauseScript = loadScript("schedpause")
	schedClaimScript = loadScript("schedclaim")
	schedRetryScript = loadScript("schedretry")

	schedOverlapScript = loadScript("schedoverlap")
	schedSkipScript    = loadScript("schedskip")
)
