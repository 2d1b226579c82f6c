package redisdelay_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// The tests run against a real redis-server: the one at REDISDELAY_TEST_ADDR
// (loopback only; held while the package runs, see redistest.External), or
// one TestMain starts on a free loopback port with AOF on, so a restart
// (TestReconnect) loses nothing.
//
// With REDISDELAY_TEST_CLUSTER (comma-separated seed addresses, see
// .ci/cluster.sh) they run against a Redis Cluster through a
// redis.ClusterClient instead; with REDISDELAY_TEST_SENTINEL (sentinel
// addresses, see .ci/sentinel.sh; master name REDISDELAY_TEST_SENTINEL_MASTER,
// default "redisdelay") against a Sentinel-managed master through a failover
// client. Tests that need a single server (TCP proxies, restarts, FLUSHALL)
// skip themselves then (needSingle).
//
// With REDISDELAY_TEST_CONTEXT_TIMEOUTS=1 the test clients set go-redis's
// ContextTimeoutEnabled, with which Publish runs its script in the
// caller's goroutine (CI runs the publishing tests so too).
//
// With REDISDELAY_TEST_FAR2=1 the publishers store far messages in format 2
// (store.SetWriteFar2), as this release does while a process of release
// 0.2.0 lives: CI runs the whole package so too, every reader meeting what
// a writer of level 2 stores.
var (
	contextTimeouts = os.Getenv("REDISDELAY_TEST_CONTEXT_TIMEOUTS") == "1"
	far2            = os.Getenv("REDISDELAY_TEST_FAR2") == "1"

	redisAddr   string
	restartCmd  []string // restarts the test server; nil for an external one
	stopCommand func()

	clusterSeeds   []string // REDISDELAY_TEST_CLUSTER
	sentinelAddrs  []string // REDISDELAY_TEST_SENTINEL
	sentinelMaster string   // REDISDELAY_TEST_SENTINEL_MASTER
)

func TestMain(m *testing.M) {
	flag.Parse()
	shortParallel()
	// Far buckets of 1s, unpacked 1s ahead: every message due more than
	// about 2.5s ahead (with no business key or priority) goes through the
	// far tier, so the whole suite runs on it, unpacking included.
	redisdelay.SetFarTier(time.Second, time.Second, 500*time.Millisecond)
	// The package's tests share the default prefix's storage level
	// registry: without a settle time, level 3 (far tier format 3, the
	// codec's named codes) is written from the first announcement, as after
	// a settled upgrade, whatever ran before. Announcements every 5s rather
	// than 30s: a pin reaches every process, and RewriteStorage waits for
	// it, within seconds (TestStorageLevel_RewriteToLevel1). The settle time
	// itself is internal/store's TestLevel_*'s.
	redisdelay.SetLevelTiming(0, 5*time.Second)
	store.SetWriteFar2(far2)
	if err := setupRedis(); err != nil {
		fmt.Fprintln(os.Stderr, "redisdelay tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	if stopCommand != nil {
		stopCommand()
	}
	os.Exit(code)
}

// loopbackDialer dials like go-redis does, but only loopback addresses: a
// cluster or a sentinel reports node addresses the tests did not choose.
func loopbackDialer(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := redistest.CheckLoopback("node address", addr); err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func addrList(env string) ([]string, error) {
	v := os.Getenv(env)
	if v == "" {
		return nil, nil
	}
	var addrs []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if err := redistest.CheckLoopback(env, a); err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

func setupRedis() error {
	var err error
	if clusterSeeds, err = addrList("REDISDELAY_TEST_CLUSTER"); err != nil {
		return err
	}
	if sentinelAddrs, err = addrList("REDISDELAY_TEST_SENTINEL"); err != nil {
		return err
	}
	if clusterSeeds != nil && sentinelAddrs != nil {
		return fmt.Errorf("set REDISDELAY_TEST_CLUSTER or REDISDELAY_TEST_SENTINEL, not both")
	}
	if sentinelMaster = os.Getenv("REDISDELAY_TEST_SENTINEL_MASTER"); sentinelMaster == "" {
		sentinelMaster = "redisdelay"
	}
	if clusterSeeds != nil || sentinelAddrs != nil {
		return ping()
	}
	addr, release, err := redistest.External()
	if err != nil {
		return err
	}
	if addr != "" {
		redisAddr, stopCommand = addr, release
		return ping()
	}
	// AOF on, so a restart (TestReconnect) loses nothing.
	server, err := redistest.Start(redistest.Options{AppendFsync: "everysec"})
	if err != nil {
		return fmt.Errorf("%w (or set REDISDELAY_TEST_ADDR)", err)
	}
	redisAddr = server.Addr
	restartCmd = server.RestartCommand()
	stopCommand = server.Stop
	return ping()
}

func ping() error {
	c := openClient("")
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	}
	return c.Ping(ctx).Err()
}

// clusterMode and sentinelMode say which kind of deployment the tests use.
func clusterMode() bool  { return clusterSeeds != nil }
func sentinelMode() bool { return sentinelAddrs != nil }

// openClient returns a client of the test deployment with go-redis's
// defaults: a *redis.Client, a *redis.ClusterClient or a Sentinel-backed
// *redis.Client. The caller closes it. A name, if given, is set on its
// connections (CLIENT SETNAME), so CLIENT LIST tells them apart.
func openClient(name string) redis.UniversalClient {
	switch {
	case clusterMode():
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterSeeds, Dialer: loopbackDialer, ClientName: name,
			ContextTimeoutEnabled: contextTimeouts})
	case sentinelMode():
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMaster, SentinelAddrs: sentinelAddrs,
			Dialer: loopbackDialer, ClientName: name, ContextTimeoutEnabled: contextTimeouts})
	default:
		return redis.NewClient(&redis.Options{Addr: redisAddr, ClientName: name, ContextTimeoutEnabled: contextTimeouts})
	}
}

// newClient returns a client of the test deployment with go-redis's
// defaults (a pool of 10 connections per GOMAXPROCS, 3 retries), as a new
// user creates it, closed when the test ends.
func newClient(t testing.TB) redis.UniversalClient {
	c := openClient("")
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// needSingle skips the test on a Cluster or Sentinel deployment: it needs
// the single test server (a TCP proxy in front of it, a restart, FLUSHALL,
// or a *redis.Client of one node).
func needSingle(t testing.TB, why string) {
	t.Helper()
	switch {
	case clusterMode():
		t.Skip("needs a single Redis server (running on the Redis Cluster of REDISDELAY_TEST_CLUSTER): " + why)
	case sentinelMode():
		t.Skip("needs a single Redis server (running on the Sentinel deployment of REDISDELAY_TEST_SENTINEL): " + why)
	}
}

// singleClient is newClient for a test that needs the single test server.
func singleClient(t testing.TB, why string) *redis.Client {
	t.Helper()
	needSingle(t, why)
	return newClient(t).(*redis.Client)
}

// exampleClient is the client of the examples, which have no *testing.T.
func exampleClient() redis.UniversalClient { return openClient("") }

// shortParallel lets -short run 8 parallel tests at a time instead of
// GOMAXPROCS (2 on the CI machine), unless -parallel is given: the tests
// mostly wait on timers and delays (a run uses a few seconds of CPU), so
// this is what brings -short under a minute. The full run keeps the default.
func shortParallel() {
	if !testing.Short() {
		return
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "8")
	}
}

// format2 makes pub write far messages in format 2, as this release does
// while a process of release 0.2.0 lives: for the tests of format 2's own
// storage (its index entries, its far filter, what older releases see of
// it).
func format2(pub *redisdelay.Publisher) { redisdelay.WriteLevelAtMost(pub, store.Level2) }
