//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package redistest

import (
	"os"
	"syscall"
)

// flock takes the exclusive lock on f; blocked reports, before waiting,
// that another process holds it. The kernel drops the lock when the
// process ends, however it ends.
func flock(f *os.File, blocked func()) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err != syscall.EWOULDBLOCK {
		return err
	}
	blocked()
	for {
		if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != syscall.EINTR {
			return err
		}
	}
}
