package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Blocking reads that Close can interrupt. A subscription's read of new
// messages (XREADGROUP BLOCK) runs on a connection of its own: a
// *redis.Conn of the client's pool, or on a cluster of the pool of the
// master serving the partition's slot. Its CLIENT ID is read when the
// connection is taken, so Close, the end of the Subscribe context and a
// pause change (flowcontrol.go) end a blocked read at once: CLIENT
// UNBLOCK <id>, sent on another connection to the same server, makes it
// return as if it had timed out. An idle subscription therefore reads once
// per BlockTime (default 30s) and Close never waits for a read.
//
// CLIENT UNBLOCK is an @admin command: a Redis user without it (the
// connection's first call probes it), or a client that is neither a
// *redis.Client (plain or Sentinel) nor a *redis.ClusterClient, cannot
// interrupt; reads then block at most fallbackBlock unless BlockTime was
// set, as before this file existed, and Close waits for them.

// defaultBlockTime is SubscriberConfig.BlockTime's default, and
// fallbackBlock how long a read blocks by default where it cannot be
// interrupted.
const (
	defaultBlockTime = 30 * time.Second
	fallbackBlock    = time.Second
)

// abandonAfter is how long a subscription that is ending waits for a
// blocked read once it asked Redis to unblock it: only a server that does
// not answer takes that long. The read is then left to finish on its own
// (see blockingReader.read).
const abandonAfter = opTimeout

// blockingReader runs the blocking reads of one subscription. read is
// called by the subscription's goroutine only; interrupt from any.
type blockingReader struct {
	client   redis.UniversalClient
	key      string        // a key of the partition: finds its cluster node
	block    time.Duration // how long a read blocks when it can be interrupted
	fallback time.Duration // when it cannot
	denied   func(error)   // Redis refused CLIENT UNBLOCK (to be logged)
	// abandoned gets what a read left to finish on its own fetched.
	abandoned func([]redis.XStream)

	// pooled: reads go through the client's pool and cannot be
	// interrupted (a client other than *redis.Client and
	// *redis.ClusterClient, or a server refusing CLIENT ID).
	pooled bool
	// The connection (subscription goroutine only): nil before the first
	// read and after an error.
	conn       *redis.Conn
	node       *redis.Client // its server's client: CLIENT UNBLOCK goes there
	id         int64         // its CLIENT ID
	canUnblock bool

	// pooledRead: a read went through the pool since the last lease
	// renewal, which clears it (see subscription.needless).
	pooledRead atomic.Bool

	mu      sync.Mutex
	flight  *flight // the read under way
	pending bool    // interrupted between reads: the next read returns at once
}

// flight is one blocking read under way.
type flight struct {
	node       *redis.Client
	id         int64
	done       chan struct{} // closed when the read returned
	unblocking bool          // an unblock loop runs (under blockingReader.mu)
}

// read runs XREADGROUP args, blocking (args.Block is set here) until
// entries come, the block time passes, ctx ends or interrupt is called.
// A read interrupted or timed out returns nothing and no error.
func (r *blockingReader) read(ctx context.Context, args *redis.XReadGroupArgs) ([]redis.XStream, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if !r.pooled {
		if err := r.connect(ctx); err != nil {
			return nil, err
		}
	}
	if r.pooled {
		args.Block = r.fallback
		r.pooledRead.Store(true)
		res, err := r.client.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return res, err
	}
	args.Block = r.fallback
	if r.canUnblock {
		args.Block = r.block
	}
	f := &flight{node: r.node, id: r.id, done: make(chan struct{})}
	r.mu.Lock()
	if r.pending {
		r.pending = false
		r.mu.Unlock()
		return nil, nil
	}
	r.flight = f
	r.mu.Unlock()

	conn := r.conn
	var res []redis.XStream
	var err error
	go func() {
		defer close(f.done)
		res, err = conn.XReadGroup(ctx, args).Result()
	}()
	select {
	case <-f.done:
	case <-ctx.Done():
		r.unblock(f)
		wait := time.NewTimer(abandonAfter)
		defer wait.Stop()
		select {
		case <-f.done:
		case <-wait.C:
			// Redis does not answer: leave the read to end on its own
			// (the connection's deadline is BlockTime plus 10s), its
			// connection to close then, and what it fetched to be
			// handed back.
			r.mu.Lock()
			r.flight = nil
			r.mu.Unlock()
			r.conn = nil
			go func() {
				<-f.done
				_ = conn.Close()
				if len(res) > 0 && r.abandoned != nil {
					r.abandoned(res)
				}
			}()
			return nil, ctx.Err()
		}
	}
	r.mu.Lock()
	r.flight = nil
	r.mu.Unlock()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		r.discard()
	}
	return res, err
}

// connect takes a connection of its own for the reads, once, reads its
// CLIENT ID and probes whether CLIENT UNBLOCK is allowed (CLIENT UNBLOCK
// 0 unblocks nothing).
func (r *blockingReader) connect(ctx context.Context) error {
	if r.conn != nil {
		return nil
	}
	node, ok := r.client.(*redis.Client)
	if cluster, isCluster := r.client.(*redis.ClusterClient); isCluster {
		var err error
		if node, err = cluster.MasterForKey(ctx, r.key); err != nil {
			return fmt.Errorf("find the cluster node of the partition: %w", err)
		}
	} else if !ok {
		r.pooled = true
		return nil
	}
	conn := node.Conn()
	var id, probe *redis.IntCmd
	pipeFailed(conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		id = p.ClientID(ctx)
		probe = p.ClientUnblock(ctx, 0)
		return nil
	}))
	if err := id.Err(); err != nil {
		_ = conn.Close()
		if refused(err) {
			// A server or proxy without CLIENT ID (some managed services
			// disable CLIENT): read as a pooled client does.
			r.pooled = true
			if r.denied != nil {
				r.denied(err)
			}
			return nil
		}
		r.reloadCluster()
		return fmt.Errorf("read the CLIENT ID of the connection for blocking reads: %w", err)
	}
	err := probe.Err()
	if err != nil && !refused(err) {
		_ = conn.Close()
		r.reloadCluster()
		return fmt.Errorf("probe CLIENT UNBLOCK on the connection for blocking reads: %w", err)
	}
	if err != nil && r.denied != nil {
		r.denied(err)
	}
	r.conn, r.node, r.id, r.canUnblock = conn, node, id.Val(), err == nil
	return nil
}

// refused reports whether Redis refuses a command for good: its ACL does
// not allow it, or the server (or a proxy) does not know it.
func refused(err error) bool {
	return isNoPerm(err) || strings.HasPrefix(err.Error(), "ERR unknown") || strings.HasPrefix(err.Error(), "ERR Unknown")
}

// discard drops the connection after an error: the next read takes
// another (on a cluster, from the node that serves the slot by then).
func (r *blockingReader) discard() {
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
	r.reloadCluster()
}

func (r *blockingReader) reloadCluster() {
	if cluster, ok := r.client.(*redis.ClusterClient); ok {
		cluster.ReloadState(context.Background())
	}
}

// close gives the connection back to the pool when the subscription ends.
func (r *blockingReader) close() {
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
}

// interrupt ends the read under way at once, or makes the next one return
// at once when none is.
func (r *blockingReader) interrupt() {
	r.mu.Lock()
	f := r.flight
	if f == nil {
		r.pending = true
	}
	r.mu.Unlock()
	if f != nil {
		r.unblock(f)
	}
}

// unblock starts sending CLIENT UNBLOCK for a read until it returns,
// unless that already runs: the read may not be blocked in Redis yet
// when the first arrives.
func (r *blockingReader) unblock(f *flight) {
	r.mu.Lock()
	start := !f.unblocking
	f.unblocking = true
	r.mu.Unlock()
	if !start {
		return
	}
	go func() {
		giveUp := time.Now().Add(abandonAfter)
		for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			n, err := f.node.ClientUnblock(ctx, f.id).Result()
			cancel()
			if (err == nil && n == 1) || time.Now().After(giveUp) {
				return
			}
			select {
			case <-f.done:
				return
			case <-time.After(wait):
			}
		}
	}()
}
