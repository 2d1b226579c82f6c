//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package redistest

import (
	"fmt"
	"syscall"
)

// RefusedPort returns a loopback port where every connection is refused
// until the test ends. A port FreePort found and closed again can be taken
// meanwhile by a server of a test running beside this one (go test runs
// packages in parallel), which then answers instead of refusing; so the port
// stays bound by a socket that never listens. The socket does not set
// SO_REUSEADDR: nothing else binds the port, not even a server that does.
func RefusedPort(t TB) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(fmt.Errorf("redistest: socket: %w", err))
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(fmt.Errorf("redistest: bind 127.0.0.1:0: %w", err))
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(fmt.Errorf("redistest: getsockname: %w", err))
	}
	return sa.(*syscall.SockaddrInet4).Port
}
