package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// A call's context that ends while it waits for a connection (or while
// go-redis retries a pool timeout) fails it with the context's error: with
// every connection in use, that is explained as the pool's doing; with one
// free, it is left as it is.
func TestExplainPool_DeadlinePassedWithThePoolInUse(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	// A pool of 1 the test can hold whole.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	bg := context.Background()
	require.NoError(t, c.Ping(bg).Err())
	assert.Equal(t, context.DeadlineExceeded, ExplainPool(c, context.DeadlineExceeded), "a connection is free")
	assert.Equal(t, context.Canceled, ExplainPool(c, context.Canceled))

	held := c.Conn()
	require.NoError(t, held.Ping(bg).Err())
	defer held.Close()
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond) // within PoolTimeout
	defer cancel()
	err := ExplainPool(c, c.Ping(ctx).Err())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var explained *poolError
	require.True(t, errors.As(err, &explained), "%v", err)
	assert.Contains(t, err.Error(), "all 1 connections of the Redis client's pool were in use when the deadline passed")
	assert.Contains(t, err.Error(), "raise the client's PoolSize")
	assert.Same(t, explained, ExplainPool(c, err), "explained once")
}
