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

// The tests and the example run against a real redis-server, started
// through internal/redistest as the redisdelay package's tests do: the one
// at REDISDELAY_TEST_ADDR (loopback only; held while the package runs, see
// redistest.External), or one TestMain starts on a free loopback port
// without persistence. Unlike the redisdelay package's tests they do not
// run on a Cluster or Sentinel deployment: what they test is the mapping of
// the library's hooks and Inspector figures to Prometheus, the same on any.
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
	if redisAddr, stop, err = redistest.ForPackage(); err != nil {
		return nil, err
	}
	return stop, ping()
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

// newClient returns a client of the test server with go-redis's defaults,
// closed when the test ends.
func newClient(t testing.TB) *redis.Client {
	c := exampleClient()
	t.Cleanup(func() { _ = c.Close() })
	return c
}
