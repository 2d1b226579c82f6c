package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has Linux SIGKILL the child when its parent dies.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
