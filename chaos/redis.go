package main

import (
	"fmt"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// startRedis starts the suite's own redis-server (internal/redistest), on a
// free 127.0.0.1 port in the run's directory, as a direct child so it can be
// SIGKILLed, and killed with the driver.
//
// Persistence is AOF with appendfsync always. A SIGKILLed Redis must not
// lose anything it acknowledged, or the suite would report losses that are
// Redis's configuration, not the library's. With "always", Redis writes and
// fsyncs the AOF buffer before it sends the replies of the commands in it
// (beforeSleep: flushAppendOnlyFile, then the pending replies). With
// "everysec" that is not guaranteed even for a process kill: while a
// background fsync is still running, Redis postpones the write(2) of the
// AOF buffer for up to 2s but still sends the replies, so a SIGKILL in that
// window loses acknowledged writes. ("no" writes before replying but never
// fsyncs: safe against a process kill, not against an OS crash.)
func startRedis(bin, dir string) (*redistest.Server, error) {
	s, err := redistest.Start(redistest.Options{Bin: bin, Dir: dir, AppendFsync: "always", KillWithParent: true})
	if err != nil {
		return nil, fmt.Errorf("%w (or pass -redis-server)", err)
	}
	return s, nil
}
