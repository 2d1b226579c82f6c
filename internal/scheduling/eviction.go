package scheduling

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// EvictionRisk is what a server's maxmemory policy can evict of the
// library's keys.
type EvictionRisk struct {
	Addr     string // the server's address, for logs; "" for a single server
	Policy   string
	Messages bool // allkeys-*: any key, message data included
}

// Detail says what the policy can do and what to set instead.
func (r EvictionRisk) Detail() string {
	where := "the Redis server"
	if r.Addr != "" {
		where += " at " + r.Addr
	}
	if r.Messages {
		return fmt.Sprintf("%s has maxmemory-policy %s: at maxmemory it evicts any key, so waiting messages, message bodies, "+
			"ready and redelivery streams and consumer groups are lost without an error; set maxmemory-policy noeviction "+
			"(Publish then fails with OOM at maxmemory while scheduling keeps draining); a volatile-* policy also keeps messages, "+
			"as it evicts only keys that expire", where, r.Policy)
	}
	return fmt.Sprintf("%s has maxmemory-policy %s: at maxmemory it evicts keys that expire, and of this library's keys only "+
		"the scheduling leases and the partition ownerships of ordered subscriptions expire: a lease evicted early lets another "+
		"scheduler take over (harmless), an ownership evicted early lets another ordered subscriber take the partition while "+
		"its owner still handles messages (order and at-most-one-owner broken for a moment); set maxmemory-policy noeviction "+
		"if you use ordered subscriptions", where, r.Policy)
}

// ReadEvictionRisks reads the maxmemory policy of the server (of every
// master of a Cluster) from INFO memory, as CONFIG GET is often denied by
// ACLs, and returns the servers whose policy can evict the library's keys.
// A server without maxmemory evicts nothing. A server that denies INFO is
// skipped: the risk cannot be told.
func ReadEvictionRisks(ctx context.Context, client redis.UniversalClient) ([]EvictionRisk, error) {
	return readEvictionRisksWithin(ctx, client, nil)
}

// readEvictionRisksWithin is ReadEvictionRisks with each server's INFO
// run by within (nil: at once), the node given on a cluster.
func readEvictionRisksWithin(ctx context.Context, client redis.UniversalClient, within func(ctx context.Context, node *redis.Client, fn func()) error) ([]EvictionRisk, error) {
	servers, err := store.EvictingServers(ctx, client, within)
	if err != nil {
		return nil, err
	}
	risks := make([]EvictionRisk, len(servers))
	for n, s := range servers {
		risks[n] = EvictionRisk{Addr: s.Addr, Policy: s.Policy, Messages: strings.HasPrefix(s.Policy, "allkeys-")}
	}
	return risks, nil
}

// warnEviction logs, once and without delaying the start, when a server's
// maxmemory policy can evict the library's keys.
func (s *Scheduler) warnEviction() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		defer cancel()
		// In a lane (internal/store/hub.go), as every command of the scheduler: on a
		// cluster, of each master's.
		risks, err := readEvictionRisksWithin(ctx, s.client, s.hub.Exclusive)
		if err != nil {
			if s.ctx.Err() == nil {
				s.logger.Info("redisdelay: cannot check the Redis maxmemory policy", watermill.LogFields{"error": err.Error()})
			}
			return
		}
		for _, r := range risks {
			s.logger.Error("redisdelay: WARNING: "+r.Detail(), nil, watermill.LogFields{"maxmemory_policy": r.Policy})
		}
	}()
}
