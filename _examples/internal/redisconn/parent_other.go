//go:build !linux

package redisconn

import "os/exec"

// stopWithParent does nothing here: a server left by an example that exits
// through log.Fatal keeps running until stopped.
func stopWithParent(*exec.Cmd) {}
