// Package redistest starts redis-server processes for the library's tests,
// the CLI tests, the chaos suite and the bench: each on a free 127.0.0.1
// port, in a directory of its own, so no test ever touches a server it did
// not choose. ServerBin and CLIBin are the one place that decides which
// binaries those are (Redis or Valkey). It also holds the loopback check for
// servers given by address (REDISDELAY_TEST_ADDR, the bench's -redis): the
// tests run FLUSHALL, SHUTDOWN and CONFIG SET, which must never reach a real
// server.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The environment variables that name the binaries, for a server that is
// not on the PATH under either name (a source build) or to choose one when
// both Redis and Valkey are installed.
const (
	ServerEnv = "REDISDELAY_REDIS_SERVER"
	CLIEnv    = "REDISDELAY_REDIS_CLI"
)

// ErrNotFound is what ServerBin and CLIBin wrap when nothing names a binary
// and none is on the PATH, as opposed to a variable naming one that is not
// there (ForTest skips on the first, fails on the second).
var ErrNotFound = errors.New("not found")

// ServerBin is the server binary the tests start: $REDISDELAY_REDIS_SERVER,
// else redis-server on the PATH, else valkey-server (Valkey's packages and
// `make install` need not install any redis-* name).
func ServerBin() (string, error) {
	return lookup(ServerEnv, "", "redis-server", "valkey-server")
}

// CLIBin is the command-line client that goes with ServerBin (the restart
// command and cluster creation use it): $REDISDELAY_REDIS_CLI, else the
// -cli beside the server binary (valkey-cli beside a source build's
// valkey-server), else redis-cli or valkey-cli on the PATH.
func CLIBin() (string, error) {
	sibling := ""
	if server, err := ServerBin(); err == nil && strings.HasSuffix(server, "-server") {
		sibling = strings.TrimSuffix(server, "-server") + "-cli"
	}
	return lookup(CLIEnv, sibling, "redis-cli", "valkey-cli")
}

func lookup(env, sibling string, names ...string) (string, error) {
	if bin := os.Getenv(env); bin != "" {
		path, err := exec.LookPath(bin)
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, bin, err)
		}
		return path, nil
	}
	if sibling != "" {
		if path, err := exec.LookPath(sibling); err == nil {
			return path, nil
		}
	}
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s %w: set %s to the binary, or put %s on the PATH (Debian: apt-get install redis-server)",
		strings.Join(names, " or "), ErrNotFound, env, strings.Join(names, " or "))
}

// Options configure a server. The zero value is a server without
// persistence in a temporary directory, ServerBin's binary.
type Options struct {
	// Bin is the server binary; empty means ServerBin.
	Bin string
	// AppendFsync turns the append-only file on with this fsync policy
	// ("always" or "everysec"), so a restart or a SIGKILL loses nothing
	// (see chaos/redis.go for why the chaos suite needs "always"). Empty
	// means no persistence at all: no AOF, no RDB snapshots.
	AppendFsync string
	// Dir holds the configuration, the data and redis.log. Empty means a
	// new temporary directory, removed by Stop.
	Dir string
	// Args are extra redis-server options, e.g. "--maxmemory", "8mb".
	Args []string
	// KillWithParent has the server SIGKILLed when the process that started
	// it dies (Linux only), so an interrupted run leaves no server behind.
	KillWithParent bool
}

// Server is a redis-server this package started.
type Server struct {
	Addr string // 127.0.0.1:port
	Port int
	Dir  string

	bin    string
	conf   string
	args   []string
	ownDir bool
	killWP bool
	cmd    *exec.Cmd
	done   chan struct{}
}

// Start writes a configuration for a free loopback port and starts
// redis-server on it as a child process, then waits until it answers PING
// with its data loaded.
func Start(o Options) (*Server, error) {
	bin := o.Bin
	if bin == "" {
		var err error
		if bin, err = ServerBin(); err != nil {
			return nil, err
		}
	}
	s := &Server{Dir: o.Dir, bin: bin, args: o.Args, killWP: o.KillWithParent}
	if s.Dir == "" {
		var err error
		if s.Dir, err = os.MkdirTemp("", "redistest-"); err != nil {
			return nil, err
		}
		s.ownDir = true
	}
	persistence := "appendonly no\n"
	if o.AppendFsync != "" {
		persistence = "appendonly yes\nappendfsync " + o.AppendFsync + "\n"
	}
	err := OnFreePort(func(port int) error {
		s.Port, s.Addr = port, "127.0.0.1:"+strconv.Itoa(port)
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode yes\ndir %s\nlogfile %s\ndaemonize no\n%ssave \"\"\nmaxclients 10000\n",
			port, s.Dir, s.LogFile(), persistence)
		s.conf = filepath.Join(s.Dir, "redis.conf")
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			return err
		}
		err := s.Start()
		if errors.Is(err, ErrPortTaken) {
			_ = os.Remove(s.LogFile())
		}
		return err
	})
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, ErrPortTaken):
		// Not Stop: its SHUTDOWN would reach the server holding the port.
		s.removeDir()
	case s.cmd != nil:
		s.Stop()
	default: // it never started
		s.removeDir()
	}
	return nil, err
}

// ErrPortTaken is what a start on a port FreePort found returns when
// another process bound the port first, or answers on it (see OnFreePort).
var ErrPortTaken = errors.New("the port is taken")

// PortTakenIn reports whether a server's log says it could not bind its
// port because another process holds it.
func PortTakenIn(log []byte) bool { return bytes.Contains(log, []byte("Address already in use")) }

// OnFreePort calls start with a port FreePort found, and again with
// another while start returns an error wrapping ErrPortTaken, up to five
// times: between FreePort's close and a server's bind, a server of a test
// running beside this one (go test runs packages in parallel) may take
// the port. It returns start's last error.
func OnFreePort(start func(port int) error) error {
	var err error
	for range 5 {
		var port int
		if port, err = FreePort(); err != nil {
			return err
		}
		if err = start(port); !errors.Is(err, ErrPortTaken) {
			return err
		}
	}
	return err
}

// Bin is the binary the server runs (redis-server, valkey-server, ...).
func (s *Server) Bin() string { return s.bin }

// LogFile is the path of the server's redis.log.
func (s *Server) LogFile() string { return filepath.Join(s.Dir, "redis.log") }

// Start starts the server again after Kill or Restart's shutdown: same
// port, directory and configuration, so it loads its AOF.
func (s *Server) Start() error {
	cmd := exec.Command(s.bin, append([]string{s.conf}, s.args...)...)
	var out bytes.Buffer // configuration errors go to stderr, not redis.log
	cmd.Stdout, cmd.Stderr = &out, &out
	if s.killWP {
		setDeathSignal(cmd)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := Ping(s.Addr, time.Second) // LOADING is an error too: wait for the AOF
		if err == nil {
			// Another process's server may answer on the port while this one
			// fails to bind it.
			if pid, err := serverPID(s.Addr); err != nil || pid != cmd.Process.Pid {
				s.Kill()
				return fmt.Errorf("%s on %s: %w (a server with pid %d answers, not %d: %v)", s.bin, s.Addr, ErrPortTaken, pid, cmd.Process.Pid, err)
			}
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(s.LogFile())
			err = fmt.Errorf("%s exited at start: %v\n%s%s", s.bin, err, tail(out.Bytes()), tail(log))
			if PortTakenIn(log) {
				err = fmt.Errorf("%w: %w", ErrPortTaken, err)
			}
			return err
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not answer on %s (see %s): %w", s.bin, s.Addr, s.LogFile(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tail is the end of a log, for an error message.
func tail(b []byte) []byte {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return b
}

// Kill SIGKILLs the server and waits until it is gone.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart shuts the server down (SHUTDOWN writes the AOF out) and starts it
// again on the same port and data.
func (s *Server) Restart() error {
	_ = command(s.Addr, "SHUTDOWN")
	if s.cmd != nil {
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.Kill()
		}
		s.cmd = nil
	}
	return s.Start()
}

// RestartCommand is a shell command that restarts the server from outside
// the test process, as Watermill's universal suite wants it
// (tests.Features.RestartServiceCommand). The restarted server runs
// daemonized, no longer a child of this process; Stop still stops it.
// Without a CLI (CLIBin) the command fails saying so.
func (s *Server) RestartCommand() []string {
	cli, err := CLIBin()
	if err != nil {
		return []string{"bash", "-c", "echo " + shellQuote("restart: "+err.Error()) + " >&2; exit 1"}
	}
	p := strconv.Itoa(s.Port)
	start := shellQuote(s.bin) + " " + shellQuote(s.conf)
	for _, a := range s.args {
		start += " " + shellQuote(a)
	}
	// SHUTDOWN flushes the AOF; the loop waits until the port is free and the
	// new server answers.
	script := fmt.Sprintf(`%[4]s -p %[1]s shutdown >/dev/null 2>&1
for i in $(seq 1 200); do %[4]s -p %[1]s ping >/dev/null 2>&1 || break; sleep 0.05; done
for i in $(seq 1 50); do %[2]s --daemonize yes --pidfile %[3]s && %[4]s -p %[1]s ping 2>/dev/null | grep -q PONG && exit 0; sleep 0.1; done
exit 1`, p, start, shellQuote(filepath.Join(s.Dir, "redis.pid")), shellQuote(cli))
	return []string{"bash", "-c", script}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Stop shuts the server down without saving (whether it is still the child
// this package started or was restarted by RestartCommand) and removes a
// temporary directory Start made.
func (s *Server) Stop() {
	_ = command(s.Addr, "SHUTDOWN", "NOSAVE")
	if s.cmd != nil {
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
		}
		s.Kill()
	}
	s.removeDir()
}

func (s *Server) removeDir() {
	if s.ownDir {
		_ = os.RemoveAll(s.Dir)
	}
}

// TB is the part of testing.TB that ForTest uses (so this package does not
// import testing into the chaos and bench binaries).
type TB interface {
	Helper()
	Cleanup(func())
	Failed() bool
	Logf(format string, args ...any)
	Skip(args ...any)
	Fatal(args ...any)
}

// ForTest starts a server for one test, stopped when the test ends; if the
// test failed, its redis.log goes to the test log. The test is skipped
// when no server is installed, and fails when REDISDELAY_REDIS_SERVER names
// one that is not there (a mistake a skip would hide).
func ForTest(t TB, o Options) *Server {
	t.Helper()
	if o.Bin == "" {
		bin, err := ServerBin()
		if errors.Is(err, ErrNotFound) {
			t.Skip("needs a server to start: " + err.Error())
		}
		if err != nil {
			t.Fatal(err)
		}
		o.Bin = bin
	}
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if log, err := os.ReadFile(s.LogFile()); err == nil {
				t.Logf("redis.log:\n%s", log)
			}
		}
		s.Stop()
	})
	return s
}

// ForPackage is the server of a package's tests, for its TestMain: the one
// at REDISDELAY_TEST_ADDR (see External), or one started on a free loopback
// port, without persistence, killed with the test process if it dies.
// stop releases or stops it.
func ForPackage() (addr string, stop func(), err error) {
	addr, release, err := External()
	if err != nil {
		return "", nil, err
	}
	if addr != "" {
		return addr, release, nil
	}
	s, err := Start(Options{KillWithParent: true})
	if err != nil {
		return "", nil, fmt.Errorf("%w (or set %s)", err, AddrEnv)
	}
	return s.Addr, s.Stop, nil
}

// AddrEnv names a server the tests use instead of starting their own.
const AddrEnv = "REDISDELAY_TEST_ADDR"

// External returns the server named by REDISDELAY_TEST_ADDR ("" when it is
// unset), checked to be on loopback, and holds it for this process until
// release is called (or the process ends). `go test ./...` runs the test
// binaries of several packages at once, and on one server they would break
// each other: the library's tests FLUSHALL and set maxmemory, and count the
// server's commands. So a package's tests wait, saying so on stderr, until
// the previous package is done with the server: the same as `go test -p 1`,
// which is still the way to run them (a package waiting counts against go
// test's -timeout). The lock is a file in the temporary directory, so it
// holds among processes of one machine, where a loopback server is.
func External() (addr string, release func(), err error) {
	addr = os.Getenv(AddrEnv)
	if addr == "" {
		return "", func() {}, nil
	}
	if err := CheckLoopback(AddrEnv, addr); err != nil {
		return "", nil, err
	}
	release, err = hold(addr, func(holder string) {
		fmt.Fprintf(os.Stderr, "%s: waiting for %s to finish with %s=%s (go test -p 1 runs packages one at a time)\n",
			self(), holder, AddrEnv, addr)
	})
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", AddrEnv, err)
	}
	return addr, release, nil
}

// hold takes the lock on addr, first calling waiting with who holds it if
// another process (or another hold of this one) does.
func hold(addr string, waiting func(holder string)) (release func(), err error) {
	name := filepath.Join(os.TempDir(), "redisdelay-test-"+strings.NewReplacer(":", "_", "[", "", "]", "").Replace(addr)+".lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	err = flock(f, func() {
		holder, _ := os.ReadFile(name)
		who := strings.TrimSpace(string(holder))
		if who == "" { // taken, not yet written
			who = "another package's tests"
		}
		waiting(who)
	})
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	// Who holds it, for the message of the next one that waits.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(self()+"\n"), 0)
	return func() { _ = f.Close() }, nil
}

// self names this test process: go test runs a package's tests in its
// directory, and the binary's name alone is not enough (the module's root
// package and cmd/redisdelay both build redisdelay.test).
func self() string {
	wd, _ := os.Getwd()
	return fmt.Sprintf("the tests in %s (pid %d)", wd, os.Getpid())
}

// CheckLoopback refuses an address that is not on the loopback interface;
// what names where the address came from (an environment variable, a flag).
func CheckLoopback(what, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s %q: only loopback addresses (127.0.0.1, ::1, localhost) are accepted", what, addr)
	}
	return nil
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Ping sends PING to the server at addr and reports an error unless it
// answers PONG (a server still loading its AOF answers -LOADING).
func Ping(addr string, timeout time.Duration) error {
	reply, err := do(addr, timeout, "PING")
	if err != nil {
		return err
	}
	if reply != "+PONG" {
		return fmt.Errorf("redis at %s answers PING with %q", addr, reply)
	}
	return nil
}

// command sends a command whose reply does not matter: SHUTDOWN closes the
// connection instead of answering.
func command(addr string, args ...string) error {
	_, err := do(addr, 5*time.Second, args...)
	return err
}

// serverPID is the process_id the server at addr reports in INFO server.
func serverPID(addr string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil {
		return 0, fmt.Errorf("INFO server answers %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// do sends one command in RESP and returns the first line of the reply.
func do(addr string, timeout time.Duration, args ...string) (string, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}
