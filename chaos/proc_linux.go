package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has Linux SIGKILL the child if the driver dies, so no
// redis-server outlives an interrupted run.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
