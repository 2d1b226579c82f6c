package prommetrics_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// The example runs against a real redis-server: the one at
// REDISDELAY_TEST_ADDR (loopback only; held while the package runs, see
// redistest.External), or one TestMain starts on a free loopback port
// without persistence. The metrics tests themselves live in the redisdelay
// package (metrics_test.go), beside its test helpers.
var redisAddr string

func TestMain(m *testing.M) {
	stop, err := startRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "prommetrics tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func startRedis() (stop func(), err error) {
	addr, release, err := redistest.External()
	if err != nil {
		return nil, err
	}
	if addr != "" {
		redisAddr = addr
		return release, ping()
	}
	server, err := redistest.Start(redistest.Options{})
	if err != nil {
		return nil, fmt.Errorf("%w (or set REDISDELAY_TEST_ADDR)", err)
	}
	redisAddr = server.Addr
	return server.Stop, ping()
}

func ping() error {
	c := exampleClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// exampleClient is the client of the examples, which have no *testing.T.
func exampleClient() *redis.Client { return redis.NewClient(&redis.Options{Addr: redisAddr}) }
