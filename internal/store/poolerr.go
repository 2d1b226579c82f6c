package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// explain is explainPool for a command sent in a lane, noting the error
// for the commands that wait for a lane meanwhile.
func (h *Hub) explain(err error) error {
	err = ExplainPool(h.client, err)
	if p, ok := err.(*poolError); ok {
		h.poolErr.Store(&poolError{err: p.err, hint: p.hint, at: time.Now()})
	}
	return err
}

// ExplainPool returns err, when the client's pool gave no connection, with
// what happened and what to set; any other error (or nil) as it is.
func ExplainPool(client redis.UniversalClient, err error) error {
	if err == nil {
		return nil // and no allocation: it runs after every call
	}
	exhausted := errors.Is(err, redis.ErrPoolExhausted)
	// A context that ends while the call waits for a connection (or while
	// go-redis retries a pool timeout) fails it with the context's error:
	// a deadline that passed with every connection in use is the pool's
	// doing all the same.
	ended := errors.Is(err, context.DeadlineExceeded) && poolFull(client)
	var explained *poolError
	if !errors.Is(err, redis.ErrPoolTimeout) && !exhausted && !ended || errors.As(err, &explained) {
		return err
	}
	size, timeout := "", ""
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		size, timeout = fmt.Sprint(o.PoolSize), o.PoolTimeout.String()
		if exhausted {
			size = fmt.Sprintf("%d (MaxActiveConns)", o.MaxActiveConns)
		}
	case *redis.ClusterClient:
		o := c.Options()
		size, timeout = fmt.Sprintf("%d per node", o.PoolSize), o.PoolTimeout.String()
		if exhausted {
			size = fmt.Sprintf("%d per node (MaxActiveConns)", o.MaxActiveConns)
		}
	}
	what := "all connections of the Redis client's pool"
	if size != "" {
		what = fmt.Sprintf("all %s connections of the Redis client's pool", size)
	}
	wait := ""
	switch {
	case ended:
		wait = " when the deadline passed"
	case timeout != "" && !exhausted:
		wait = " for PoolTimeout (" + timeout + ")"
	}
	return &poolError{err: err, hint: fmt.Sprintf("%s were in use%s, by the application's own commands (redisdelay's background work uses at most %d per node at a time, "+
		"see docs/operations.md#connections); raise the client's PoolSize (redis.Options.PoolSize, by default 10 per GOMAXPROCS), "+
		"or give long blocking commands a client of their own", what, wait, Lanes)}
}

// poolFull tells whether every connection of a plain or Sentinel client's
// pool is in use (a cluster's pools, one per node, are not looked at).
func poolFull(client redis.UniversalClient) bool {
	c, ok := client.(*redis.Client)
	if !ok {
		return false
	}
	s := c.PoolStats()
	return s.IdleConns == 0 && int(s.TotalConns) >= c.Options().PoolSize
}

// poolError is an error of the client's pool with what to do about it.
type poolError struct {
	err  error
	hint string
	at   time.Time // when it happened (hub.poolErr)
}

func (e *poolError) Error() string { return e.err.Error() + ": " + e.hint }

func (e *poolError) Unwrap() error { return e.err }

// BoundsSocketWaits reports whether the client ends a command's socket
// reads and writes at its context's deadline (go-redis's
// ContextTimeoutEnabled); otherwise a read waits for a stalled Redis until
// the client's ReadTimeout whatever the context. Either way go-redis
// honours the context while it waits for a connection, dials or backs off
// between retries.
func BoundsSocketWaits(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}
