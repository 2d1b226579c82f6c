package prommetrics_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The example runs against a real redis-server: the one at
// REDISDELAY_TEST_ADDR (loopback only), or one TestMain starts on a free
// loopback port without persistence. The metrics tests themselves live in
// the redisdelay package (metrics_test.go), beside its test helpers.
var redisAddr string

func TestMain(m *testing.M) {
	stop, err := startRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "prommetrics tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func startRedis() (stop func(), err error) {
	if addr := os.Getenv("REDISDELAY_TEST_ADDR"); addr != "" {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			return nil, fmt.Errorf("REDISDELAY_TEST_ADDR %q: tests only target loopback addresses (127.0.0.1, ::1)", addr)
		}
		redisAddr = addr
		return func() {}, ping()
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (install Debian's redis-server package, or set REDISDELAY_TEST_ADDR): %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	cmd := exec.Command(server, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	redisAddr = "127.0.0.1:" + port
	for range 100 {
		if err = ping(); err == nil {
			return stop, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	return nil, err
}

func ping() error {
	c := exampleClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// exampleClient is the client of the examples, which have no *testing.T.
func exampleClient() *redis.Client { return redis.NewClient(&redis.Options{Addr: redisAddr}) }
