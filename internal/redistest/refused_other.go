//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package redistest

// RefusedPort returns a loopback port where nothing listens. Here it is
// FreePort's: a test running beside this one may take it meanwhile.
func RefusedPort(t TB) int {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
