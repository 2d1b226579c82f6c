//go:build !linux

package main

import "os/exec"

// setDeathSignal does nothing outside Linux: the driver's deferred cleanup
// (and its signal handler) stop redis-server there.
func setDeathSignal(cmd *exec.Cmd) {}
