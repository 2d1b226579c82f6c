package redisdelay_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests run against a real redis-server: the one at REDISDELAY_TEST_ADDR
// (loopback only), or one TestMain starts on a free loopback port with AOF
// on, so a restart (TestReconnect) loses nothing.
var (
	redisAddr   string
	restartCmd  []string // restarts the test server; nil for an external one
	stopCommand func()
)

func TestMain(m *testing.M) {
	if err := setupRedis(); err != nil {
		fmt.Fprintln(os.Stderr, "redisdelay tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	if stopCommand != nil {
		stopCommand()
	}
	os.Exit(code)
}

func setupRedis() error {
	if addr := os.Getenv("REDISDELAY_TEST_ADDR"); addr != "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("REDISDELAY_TEST_ADDR=%q: %w", addr, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("REDISDELAY_TEST_ADDR=%q: tests only target loopback addresses (127.0.0.1, ::1)", addr)
		}
		redisAddr = addr
		return ping()
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not found (install Debian's redis-server package, or set REDISDELAY_TEST_ADDR): %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "redisdelay-test-")
	if err != nil {
		return err
	}
	conf := filepath.Join(dir, "redis.conf")
	err = os.WriteFile(conf, []byte(fmt.Sprintf(
		"port %d\nbind 127.0.0.1\ndir %s\ndaemonize yes\npidfile %s\nlogfile %s\nappendonly yes\nappendfsync everysec\nsave \"\"\nmaxclients 10000\n",
		port, dir, filepath.Join(dir, "redis.pid"), filepath.Join(dir, "redis.log"))), 0o600)
	if err != nil {
		return err
	}
	redisAddr = "127.0.0.1:" + strconv.Itoa(port)
	p := strconv.Itoa(port)
	// SHUTDOWN flushes the AOF; the loop waits until the port is free and the
	// new server answers.
	restart := fmt.Sprintf(`redis-cli -p %[1]s shutdown >/dev/null 2>&1
for i in $(seq 1 200); do redis-cli -p %[1]s ping >/dev/null 2>&1 || break; sleep 0.05; done
for i in $(seq 1 50); do %[2]s %[3]s && redis-cli -p %[1]s ping 2>/dev/null | grep -q PONG && exit 0; sleep 0.1; done
exit 1`, p, server, conf)
	restartCmd = []string{"bash", "-c", restart}
	if out, err := exec.Command(server, conf).CombinedOutput(); err != nil {
		return fmt.Errorf("start redis-server: %v: %s", err, out)
	}
	stopCommand = func() {
		_ = exec.Command("redis-cli", "-p", p, "shutdown", "nosave").Run()
		_ = os.RemoveAll(dir)
	}
	for i := 0; i < 100; i++ {
		if ping() == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ping()
}

func ping() error {
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	return c.Ping(context.Background()).Err()
}

// newClient returns a client of the test server, closed when the test ends.
// The pool is large because each subscription blocks one connection.
func newClient(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 64, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
