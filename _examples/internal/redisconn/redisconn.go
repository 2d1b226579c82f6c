// Package redisconn gives the examples a Redis client: the server at the
// address in the first argument or REDIS_ADDR, or else a redis-server (or
// valkey-server) the example starts on a free loopback port, without
// persistence, and stops when it ends. An embedded in-memory Redis (miniredis) cannot serve: it
// does not run scripts with flags (#!lua flags=allow-oom), which the
// library's scripts carry since they drain at maxmemory.
package redisconn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client returns the client and a function that releases it.
func Client() (redis.UniversalClient, func()) {
	flag.Parse()
	addr := flag.Arg(0)
	if addr == "" {
		addr = os.Getenv("REDIS_ADDR")
	}
	if addr != "" {
		log.Printf("using Redis at %s", addr)
		c := redis.NewClient(&redis.Options{Addr: addr})
		return c, func() { _ = c.Close() }
	}
	srv, addr, err := startServer()
	if err != nil {
		log.Fatalf("no Redis address given (argument or REDIS_ADDR), and %v", err)
	}
	log.Printf("no Redis address given (argument or REDIS_ADDR): started %s at %s (no persistence; stopped at the end)", srv.Path, addr)
	c := redis.NewClient(&redis.Options{Addr: addr})
	return c, func() {
		_ = c.Close()
		_ = srv.Process.Kill()
		_ = srv.Wait()
	}
}

// serverBin is the server to start: $REDISDELAY_REDIS_SERVER, else
// redis-server on the PATH, else valkey-server (the rule of the library's
// tests, internal/redistest, which these examples do not import so that
// they read as a user's program).
func serverBin() (string, error) {
	if bin := os.Getenv("REDISDELAY_REDIS_SERVER"); bin != "" {
		return exec.LookPath(bin)
	}
	for _, name := range []string{"redis-server", "valkey-server"} {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", errors.New("neither redis-server nor valkey-server is on the PATH: install Redis 7.0 or later (Debian: apt-get install redis-server) or Valkey, set REDISDELAY_REDIS_SERVER to the binary, or pass the address of a running server")
}

// startServer starts the server on a free 127.0.0.1 port and waits until
// it answers.
func startServer() (*exec.Cmd, string, error) {
	path, err := serverBin()
	if err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("cannot find a free loopback port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", os.TempDir())
	stopWithParent(cmd) // a log.Fatal in the example skips the release
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("cannot start %s: %w", path, err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return cmd, addr, nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, "", fmt.Errorf("the %s started at %s did not answer within 5 s: %w", path, addr, err)
		}
	}
}
