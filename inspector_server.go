package redisdelay

import (
	"context"
	"strings"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/scheduling"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// RedisServer is what Inspector.Servers reads of a Redis (or Valkey)
// server from INFO.
type RedisServer struct {
	// Addr is the node's address on a Cluster, "" otherwise.
	Addr string
	// Name is "redis" or "valkey"; Version its version; Mode standalone,
	// cluster or sentinel.
	Name, Version, Mode string
	Uptime              time.Duration
	// UsedMemory and PeakMemory are in bytes; MaxMemory too, 0 when
	// unbounded (maxmemory 0).
	UsedMemory, PeakMemory, MaxMemory int64
	MaxMemoryPolicy                   string
	// Warning says, in a sentence, what the configuration risks when the
	// maxmemory policy is not noeviction; "" when it is.
	Warning string
	// InfoDenied is true when the Redis user may not run INFO (an ACL
	// without +info): nothing else is known then.
	InfoDenied bool
}

// Servers reads the version, memory and maxmemory policy of the Redis
// server (of each master of a Cluster), with a warning for a policy other
// than noeviction: allkeys-* policies evict messages without an error,
// volatile-* ones the leases and ordered ownerships (see
// docs/operations.md, memory and eviction).
func (i *Inspector) Servers(ctx context.Context) ([]RedisServer, error) {
	infos, err := store.ReadServers(ctx, i.client)
	if err != nil {
		return nil, wrap(err, "read the Redis server's INFO")
	}
	out := make([]RedisServer, len(infos))
	for n, s := range infos {
		out[n] = RedisServer{Addr: s.Addr, Name: s.Name, Version: s.Version, Mode: s.Mode, Uptime: s.Uptime,
			UsedMemory: s.UsedMemory, PeakMemory: s.PeakMemory, MaxMemory: s.MaxMemory, MaxMemoryPolicy: s.Policy,
			InfoDenied: s.Denied, Warning: policyWarning(s.Addr, s.Policy, s.MaxMemory)}
	}
	return out, nil
}

// policyWarning is RedisServer.Warning.
func policyWarning(addr, policy string, maxmemory int64) string {
	if policy == "" || policy == "noeviction" {
		return ""
	}
	w := scheduling.EvictionRisk{Addr: addr, Policy: policy, Messages: strings.HasPrefix(policy, "allkeys-")}.Detail()
	if maxmemory == 0 {
		w += " (maxmemory is not set, so nothing is evicted until it is: set noeviction before a limit)"
	}
	return w
}
