//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package redistest

import "os"

// flock does nothing where there is no flock(2): there, run packages that
// share REDISDELAY_TEST_ADDR one at a time (go test -p 1).
func flock(*os.File, func()) error { return nil }
