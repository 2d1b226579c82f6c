package store

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// EvictingServer is a server whose maxmemory policy may evict keys.
type EvictingServer struct {
	Addr   string // "" when the client is not a Cluster client
	Policy string
}

// EvictingServers reads the maxmemory policy of the server (of every
// master of a Cluster) from INFO memory, as CONFIG GET is often denied by
// ACLs, and returns those that may evict keys. A server without maxmemory
// evicts nothing. A server that denies INFO is skipped: the risk cannot be
// told. within runs each server's INFO (nil: at once), the node given on
// a cluster.
func EvictingServers(ctx context.Context, client redis.UniversalClient, within func(ctx context.Context, node *redis.Client, fn func()) error) ([]EvictingServer, error) {
	if within == nil {
		within = func(_ context.Context, _ *redis.Client, fn func()) error { fn(); return nil }
	}
	var (
		mu  sync.Mutex
		out []EvictingServer
	)
	check := func(ctx context.Context, c redis.Cmdable, addr string) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			if IsNoPerm(err) {
				return nil
			}
			return err
		}
		var maxmemory, policy string
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "maxmemory:"); ok {
				maxmemory = v
			} else if v, ok := strings.CutPrefix(line, "maxmemory_policy:"); ok {
				policy = v
			}
		}
		if maxmemory == "0" || maxmemory == "" || policy == "noeviction" || policy == "" {
			return nil
		}
		mu.Lock()
		out = append(out, EvictingServer{Addr: addr, Policy: policy})
		mu.Unlock()
		return nil
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			var err error
			if e := within(ctx, node, func() { err = check(ctx, node, node.Options().Addr) }); e != nil {
				return e
			}
			return err
		})
	default: // a Ring sends INFO to one of its shards
		if e := within(ctx, nil, func() { err = check(ctx, c, "") }); e != nil {
			err = e
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read the maxmemory policy (INFO memory): %w", err)
	}
	return out, nil
}
