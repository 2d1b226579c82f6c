package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// redisCluster is a Redis Cluster of masters only (no replicas), started by
// the bench from redis-server on free 127.0.0.1 ports with persistence off.
type redisCluster struct {
	addrs  []string
	cmds   []*exec.Cmd
	dir    string
	admins []*redis.Client // one per node: INFO, FLUSHALL, CONFIG RESETSTAT
	once   sync.Once
}

// liveClusters are the clusters to kill on an interrupt (stopClusters).
var liveClusters struct {
	sync.Mutex
	set map[*redisCluster]bool
}

// stopClusters kills every cluster the bench started and has not stopped.
func stopClusters() {
	liveClusters.Lock()
	cs := make([]*redisCluster, 0, len(liveClusters.set))
	for c := range liveClusters.set {
		cs = append(cs, c)
	}
	liveClusters.Unlock()
	for _, c := range cs {
		c.stop()
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1 whose cluster bus
// ports (port + 10000) are free too.
func freePorts(n int) ([]int, error) {
	var (
		ports     []int
		listeners []net.Listener
	)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n && tries < 200; tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		port := l.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		listeners = append(listeners, bus)
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("found only %d of %d free loopback ports with a free cluster bus port", len(ports), n)
	}
	return ports, nil
}

// startCluster starts masters redis-server processes with cluster-enabled,
// joins them into one cluster holding all 16384 slots and waits until every
// node reports cluster_state:ok. redis-cli --cluster create needs at least
// three masters, so a one-master cluster gets its slots with CLUSTER
// ADDSLOTSRANGE instead.
func startCluster(ctx context.Context, masters int) (_ *redisCluster, err error) {
	bin, err := redistest.ServerBin()
	if err != nil {
		return nil, err
	}
	cli, err := redistest.CLIBin()
	if err != nil && masters >= 3 {
		return nil, err
	}
	ports, err := freePorts(masters)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redisdelay-bench-cluster-")
	if err != nil {
		return nil, err
	}
	c := &redisCluster{dir: dir}
	liveClusters.Lock()
	if liveClusters.set == nil {
		liveClusters.set = map[*redisCluster]bool{}
	}
	liveClusters.set[c] = true
	liveClusters.Unlock()
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	for i, port := range ports {
		nodeDir := fmt.Sprintf("%s/node%d", dir, i)
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			return nil, err
		}
		cmd := exec.Command(bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
			"--save", "", "--appendonly", "no",
			"--dir", nodeDir, "--maxclients", "10000", "--loglevel", "warning")
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		c.cmds = append(c.cmds, cmd)
		c.addrs = append(c.addrs, addr)
		c.admins = append(c.admins, redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 2 * time.Minute}))
	}
	for _, addr := range c.addrs {
		if err := waitForRedis(addr, 5*time.Second); err != nil {
			return nil, err
		}
	}
	if masters == 1 {
		if err := c.admins[0].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
			return nil, fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
		}
	} else {
		args := append(append([]string{"--cluster", "create"}, c.addrs...), "--cluster-replicas", "0", "--cluster-yes")
		if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
		}
	}
	return c, c.waitOK(ctx, 30*time.Second)
}

// waitOK waits until every node reports cluster_state:ok and knows all the
// others.
func (c *redisCluster) waitOK(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var problem string
		for _, a := range c.admins {
			ci, err := a.ClusterInfo(ctx).Result()
			if err != nil {
				problem = err.Error()
				break
			}
			if !strings.Contains(ci, "cluster_state:ok") || !strings.Contains(ci, "cluster_known_nodes:"+strconv.Itoa(len(c.addrs))+"\r") {
				problem = a.Options().Addr + " not ready"
				break
			}
		}
		if problem == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster of %d nodes not ready after %s: %s", len(c.addrs), limit, problem)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// client returns a cluster client for redisdelay, with a pool per node large
// enough for 64 publishing goroutines plus the blocking reads of 4
// subscriptions of 8 partitions.
func (c *redisCluster) client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        c.addrs,
		PoolSize:     poolSize,
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
	})
}

// flush empties every node and resets its statistics.
func (c *redisCluster) flush(ctx context.Context) error {
	for _, a := range c.admins {
		if err := flush(ctx, a); err != nil {
			return fmt.Errorf("%s: %w", a.Options().Addr, err)
		}
	}
	return nil
}

// cpuSeconds returns each node's used CPU seconds (INFO cpu).
func (c *redisCluster) cpuSeconds(ctx context.Context) ([]float64, error) {
	out := make([]float64, len(c.admins))
	for i, a := range c.admins {
		s, err := cpuSeconds(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.Options().Addr, err)
		}
		out[i] = s
	}
	return out, nil
}

// commandStats returns INFO commandstats summed over the nodes, most time
// first.
func (c *redisCluster) commandStats(ctx context.Context) ([]CommandStat, error) {
	sum := map[string]*CommandStat{}
	var order []string
	for _, a := range c.admins {
		stats, err := commandStats(ctx, a)
		if err != nil {
			return nil, err
		}
		for _, s := range stats {
			if t, ok := sum[s.Command]; ok {
				t.Calls += s.Calls
				t.Usec += s.Usec
			} else {
				s := s
				sum[s.Command] = &s
				order = append(order, s.Command)
			}
		}
	}
	out := make([]CommandStat, 0, len(order))
	for _, k := range order {
		out = append(out, *sum[k])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Usec > out[j].Usec })
	return out, nil
}

// nodeOfSlot returns the index (in c.addrs) of the master serving slot.
func (c *redisCluster) nodeOfSlot(ctx context.Context, slot int64) (int, error) {
	slots, err := c.admins[0].ClusterSlots(ctx).Result()
	if err != nil {
		return 0, err
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			// A node that never met another announces no IP: match the port.
			_, port, _ := net.SplitHostPort(s.Nodes[0].Addr)
			for i, a := range c.addrs {
				if _, p, _ := net.SplitHostPort(a); p == port {
					return i, nil
				}
			}
			return 0, fmt.Errorf("slot %d served by unknown node %s", slot, s.Nodes[0].Addr)
		}
	}
	return 0, fmt.Errorf("slot %d not served", slot)
}

// stop closes the admin clients, kills the nodes and removes their
// directory; it is safe to call more than once and concurrently.
func (c *redisCluster) stop() {
	c.once.Do(func() {
		for _, a := range c.admins {
			_ = a.Close()
		}
		for _, cmd := range c.cmds {
			_ = cmd.Process.Kill()
		}
		for _, cmd := range c.cmds {
			_ = cmd.Wait()
		}
		_ = os.RemoveAll(c.dir)
		liveClusters.Lock()
		delete(liveClusters.set, c)
		liveClusters.Unlock()
	})
}
