package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is the suite's own redis-server, on a free 127.0.0.1 port in
// the run's temporary directory, run as a direct child so it can be killed.
//
// Persistence is AOF with appendfsync always. A SIGKILLed Redis must not
// lose anything it acknowledged, or the suite would report losses that are
// Redis's configuration, not the library's. With "always", Redis writes and
// fsyncs the AOF buffer before it sends the replies of the commands in it
// (beforeSleep: flushAppendOnlyFile, then the pending replies). With
// "everysec" that is not guaranteed even for a process kill: while a
// background fsync is still running, Redis postpones the write(2) of the
// AOF buffer for up to 2s but still sends the replies, so a SIGKILL in that
// window loses acknowledged writes. ("no" writes before replying but never
// fsyncs: safe against a process kill, not against an OS crash.)
type redisServer struct {
	bin  string
	dir  string
	conf string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(bin, dir string) (*redisServer, error) {
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("redis-server not found in PATH (Debian: apt-get install redis-server), or pass -redis-server: %w", err)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &redisServer{bin: bin, dir: dir, port: port, conf: filepath.Join(dir, "redis.conf")}
	conf := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode yes
dir %s
logfile %s
daemonize no
appendonly yes
appendfsync always
save ""
maxclients 10000
`, port, dir, filepath.Join(dir, "redis.log"))
	if err := os.WriteFile(r.conf, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return r, r.start()
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// start runs redis-server on the configuration (same port, same dir: it
// loads the AOF) and waits until it answers PING with the data loaded.
func (r *redisServer) start() error {
	cmd := exec.Command(r.bin, r.conf)
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", r.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done

	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err() // LOADING is an error too: wait for the AOF
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server exited at start (see %s): %v", filepath.Join(r.dir, "redis.log"), err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server does not answer on %s: %w", r.addr(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill SIGKILLs redis-server and waits until it is gone.
func (r *redisServer) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
