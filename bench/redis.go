package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// redisServer is the redis-server the bench runs against: one it started
// (stop kills it) or one given with -redis (stop leaves it running).
type redisServer struct {
	addr string
	own  *redistest.Server // nil for a server the bench did not start
}

// startRedis starts redis-server on a free loopback port with persistence
// off (internal/redistest), and waits until it answers.
func startRedis() (*redisServer, error) {
	s, err := redistest.Start(redistest.Options{Args: []string{"--loglevel", "warning"}})
	if err != nil {
		return nil, fmt.Errorf("%w, or pass -redis 127.0.0.1:PORT", err)
	}
	return &redisServer{addr: s.Addr, own: s}, nil
}

// externalRedis checks that addr is a loopback address (the bench flushes
// the server between scenarios) and that it answers.
func externalRedis(addr string) (*redisServer, error) {
	if err := redistest.CheckLoopback("-redis", addr); err != nil {
		return nil, fmt.Errorf("%w: the bench runs FLUSHALL", err)
	}
	if err := waitForRedis(addr, time.Second); err != nil {
		return nil, err
	}
	return &redisServer{addr: addr}, nil
}

func waitForRedis(addr string, limit time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(limit)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis at %s does not answer: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop stops a server the bench started and removes its directory.
func (s *redisServer) stop() {
	if s.own != nil {
		s.own.Stop()
	}
}

func (s *redisServer) version(ctx context.Context) string {
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	info, err := infoFields(ctx, c, "server")
	if err != nil {
		return "unknown"
	}
	// Valkey keeps redis_version at the Redis release it is compatible with
	// (7.2.4) and reports its own version beside it.
	if v := info["valkey_version"]; v != "" {
		return "Valkey " + v
	}
	return info["redis_version"]
}

// newClient returns a client with a pool large enough for 64 publishing
// goroutines plus the blocking reads of many subscriptions.
func newClient(addr string, pool int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		PoolSize:     pool,
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
	})
}

// infoFields returns the key:value lines of one INFO section.
func infoFields(ctx context.Context, c redis.UniversalClient, section string) (map[string]string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// usedMemory returns INFO memory used_memory in bytes.
func usedMemory(ctx context.Context, c redis.UniversalClient) (int64, error) {
	m, err := infoFields(ctx, c, "memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(m["used_memory"], 10, 64)
}

// cpuSeconds returns the CPU time the server has used (INFO cpu
// used_cpu_sys + used_cpu_user).
func cpuSeconds(ctx context.Context, c redis.UniversalClient) (float64, error) {
	m, err := infoFields(ctx, c, "cpu")
	if err != nil {
		return 0, err
	}
	sys, err1 := strconv.ParseFloat(m["used_cpu_sys"], 64)
	user, err2 := strconv.ParseFloat(m["used_cpu_user"], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse INFO cpu: %w", err)
	}
	return sys + user, nil
}

// socketIO returns the server's socket reads and writes so far (INFO stats).
func socketIO(ctx context.Context, c redis.UniversalClient) ([2]float64, error) {
	m, err := infoFields(ctx, c, "stats")
	if err != nil {
		return [2]float64{}, err
	}
	r, err1 := strconv.ParseFloat(m["total_reads_processed"], 64)
	w, err2 := strconv.ParseFloat(m["total_writes_processed"], 64)
	if err := errors.Join(err1, err2); err != nil {
		return [2]float64{}, fmt.Errorf("parse INFO stats: %w", err)
	}
	return [2]float64{r, w}, nil
}

// CommandStat is one line of INFO commandstats.
type CommandStat struct {
	Command string  `json:"command"`
	Calls   int64   `json:"calls"`
	Usec    int64   `json:"usec"`
	PerMsg  float64 `json:"calls_per_msg"`
	UsecMsg float64 `json:"usec_per_msg"`
}

// commandStats returns INFO commandstats, most time first.
func commandStats(ctx context.Context, c redis.UniversalClient) ([]CommandStat, error) {
	m, err := infoFields(ctx, c, "commandstats")
	if err != nil {
		return nil, err
	}
	var stats []CommandStat
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		st := CommandStat{Command: name}
		for _, kv := range strings.Split(v, ",") {
			key, val, _ := strings.Cut(kv, "=")
			switch key {
			case "calls":
				st.Calls, _ = strconv.ParseInt(val, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseInt(val, 10, 64)
			}
		}
		stats = append(stats, st)
	}
	sort.Slice(stats, func(i, j int) bool { return stats[i].Usec > stats[j].Usec })
	return stats, nil
}

// flush empties the server and resets its command statistics, so every
// measurement starts from the same state.
func flush(ctx context.Context, c redis.UniversalClient) error {
	if err := c.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("FLUSHALL: %w", err)
	}
	return c.ConfigResetStat(ctx).Err()
}
