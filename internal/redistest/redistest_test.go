package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What the chaos suite relies on: with AOF "always", a SIGKILLed server
// started again has every acknowledged write.
func TestServer_KillAndStartKeepAcknowledgedWrites(t *testing.T) {
	s := ForTest(t, Options{AppendFsync: "always", KillWithParent: true})
	if _, err := do(s.Addr, 0, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := Ping(s.Addr, 0); err == nil {
		t.Fatal("the server still answers after Kill")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if v, err := do(s.Addr, 0, "GET", "k"); err != nil || v != "$1" {
		t.Fatalf("after Kill and Start GET k = %q, %v; want the value kept", v, err)
	}
}

// The launcher's own round trip: start without persistence, restart with
// AOF keeping nothing lost, stop removing the temporary directory.
func TestServer_StartRestartStop(t *testing.T) {
	if _, err := ServerBin(); err != nil {
		t.Skip(err)
	}
	s, err := Start(Options{AppendFsync: "everysec", Args: []string{"--loglevel", "warning"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := do(s.Addr, 0, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := do(s.Addr, 0, "GET", "k"); err != nil || v != "$1" {
		t.Fatalf("after Restart GET k = %q, %v; want the value kept", v, err)
	}
	out, err := exec.Command(s.RestartCommand()[0], s.RestartCommand()[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("RestartCommand: %v: %s", err, out)
	}
	if err := Ping(s.Addr, 0); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := Ping(s.Addr, 0); err == nil {
		t.Fatal("the server still answers after Stop")
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Fatalf("Stop left %s: %v", s.Dir, err)
	}
}

func TestServer_CheckLoopback(t *testing.T) {
	for _, a := range []string{"127.0.0.1:6379", "[::1]:6379", "localhost:6379"} {
		if err := CheckLoopback("X", a); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	for _, a := range []string{"10.0.0.1:6379", "redis.example.com:6379", "6379"} {
		if err := CheckLoopback("X", a); err == nil || !strings.Contains(err.Error(), "X") {
			t.Errorf("%s: want an error naming X, got %v", a, err)
		}
	}
}

// RefusedPort's port refuses connections, and no listener can take it while
// the test runs (a server that sets SO_REUSEADDR, as Go's and Redis's do).
func TestRefusedPort(t *testing.T) {
	port := RefusedPort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	_, err := net.DialTimeout("tcp", addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: want connection refused, got %v", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("a listener took %s", addr)
	}
}

// A server that cannot start says why: a binary that is not there, or a
// redis-server that exits at once (its redis.log has the reason).
func TestServer_StartErrors(t *testing.T) {
	if _, err := Start(Options{Bin: "/nonexistent/redis-server"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/redis-server") {
		t.Errorf("missing binary: got %v, want an error naming it", err)
	}
	if _, err := ServerBin(); err != nil {
		t.Skip(err)
	}
	_, err := Start(Options{Args: []string{"--no-such-option", "1"}})
	if err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), "no-such-option") {
		t.Errorf("bad option: got %v, want an error saying redis-server exited, with its complaint", err)
	}
}

// A server whose port another server holds says so with ErrPortTaken, the
// error on which Start picks another port: whether it fails to bind or the
// other server answers its PING first.
func TestServer_PortTaken(t *testing.T) {
	if _, err := ServerBin(); err != nil {
		t.Skip(err)
	}
	a := ForTest(t, Options{})
	for name, port := range map[string]int{"answered": a.Port, "bound": RefusedPort(t)} {
		b := &Server{Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: t.TempDir(), bin: a.bin}
		b.conf = filepath.Join(b.Dir, "redis.conf")
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsave \"\"\n", port, b.Dir, b.LogFile())
		if err := os.WriteFile(b.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		err := b.Start()
		b.Kill()
		if !errors.Is(err, ErrPortTaken) {
			t.Errorf("%s: got %v, want ErrPortTaken", name, err)
		}
	}
}

// OnFreePort tries another port while the start finds its port taken, up
// to five times, and stops at any other outcome.
func TestOnFreePort(t *testing.T) {
	calls := 0
	err := OnFreePort(func(int) error {
		if calls++; calls < 3 {
			return fmt.Errorf("start: %w", ErrPortTaken)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("taken twice: got %v after %d calls, want nil after 3", err, calls)
	}
	calls = 0
	err = OnFreePort(func(int) error { calls++; return ErrPortTaken })
	if !errors.Is(err, ErrPortTaken) || calls != 5 {
		t.Errorf("always taken: got %v after %d calls, want ErrPortTaken after 5", err, calls)
	}
	calls = 0
	other := errors.New("bad config")
	err = OnFreePort(func(int) error { calls++; return other })
	if err != other || calls != 1 {
		t.Errorf("another error: got %v after %d calls, want it after 1", err, calls)
	}
}

// Which binaries the tests start: the variables first, then Redis's names
// on the PATH, then Valkey's (whose packages need not ship redis-* names);
// the CLI beside the server comes before one on the PATH.
func TestServer_BinAndCLIBin(t *testing.T) {
	exe := func(dir string, names ...string) {
		t.Helper()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(what string, got func() (string, error), want string) {
		t.Helper()
		if p, err := got(); err != nil || p != want {
			t.Errorf("%s = %q, %v; want %q", what, p, err, want)
		}
	}
	path, valkey, build := t.TempDir(), t.TempDir(), t.TempDir()
	exe(valkey, "valkey-server", "valkey-cli")
	exe(path, "redis-cli")
	exe(build, "valkey-server", "valkey-cli")
	t.Setenv(ServerEnv, "")
	t.Setenv(CLIEnv, "")

	t.Setenv("PATH", valkey)
	check("ServerBin with only Valkey", ServerBin, filepath.Join(valkey, "valkey-server"))
	check("CLIBin with only Valkey", CLIBin, filepath.Join(valkey, "valkey-cli"))

	exe(path, "redis-server")
	t.Setenv("PATH", path+string(os.PathListSeparator)+valkey)
	check("ServerBin with both", ServerBin, filepath.Join(path, "redis-server"))

	t.Setenv(ServerEnv, filepath.Join(build, "valkey-server"))
	check("ServerBin with "+ServerEnv, ServerBin, filepath.Join(build, "valkey-server"))
	check("CLIBin beside "+ServerEnv, CLIBin, filepath.Join(build, "valkey-cli"))
	t.Setenv(CLIEnv, filepath.Join(valkey, "valkey-cli"))
	check("CLIBin with "+CLIEnv, CLIBin, filepath.Join(valkey, "valkey-cli"))

	t.Setenv(ServerEnv, filepath.Join(build, "nonexistent"))
	if _, err := ServerBin(); err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), ServerEnv) {
		t.Errorf("%s naming no binary: got %v, want an error naming the variable, not ErrNotFound (ForTest must not skip)", ServerEnv, err)
	}

	t.Setenv(ServerEnv, "")
	t.Setenv("PATH", t.TempDir())
	_, err := ServerBin()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("no server anywhere: got %v, want ErrNotFound", err)
	}
	for _, want := range []string{ServerEnv, "redis-server", "valkey-server"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no server anywhere: %q does not name %s", err, want)
		}
	}
}

// Two holds of one address: the second waits, told who holds it, until the
// first is released; another address is not held up.
func TestExternal_HoldWaitsForTheHolder(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	first, err := hold("127.0.0.1:6379", func(string) { t.Error("the first hold waited") })
	if err != nil {
		t.Fatal(err)
	}
	other, err := hold("[::1]:6379", func(string) { t.Error("a hold of another address waited") })
	if err != nil {
		t.Fatal(err)
	}
	other()
	waiting := make(chan string, 1)
	second := make(chan error, 1)
	go func() {
		release, err := hold("127.0.0.1:6379", func(holder string) { waiting <- holder })
		if err == nil {
			release()
		}
		second <- err
	}()
	select {
	case holder := <-waiting:
		if !strings.Contains(holder, self()) {
			t.Errorf("the second hold was told %q holds it, want %q", holder, self())
		}
	case err := <-second:
		t.Fatalf("the second hold returned (%v) while the first held the address", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the second hold neither waited nor returned")
	}
	first()
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second hold still waits after the first was released")
	}
}
