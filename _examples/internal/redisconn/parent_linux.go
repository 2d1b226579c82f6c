package redisconn

import (
	"os/exec"
	"syscall"
)

// stopWithParent has the kernel kill the server when the example exits
// without releasing it (log.Fatal).
func stopWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
