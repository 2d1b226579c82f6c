package redisdelay_test

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// Failover: a publisher publishes continuously (immediate and delayed
// messages) while a subscriber consumes; the test SIGKILLs the master that
// holds the topic, the cluster or the sentinels promote its replica, and
// the adapter must recover by itself. Each test restarts the killed node
// (it rejoins as a replica) and waits until the deployment is healthy.
//
// What Redis's asynchronous replication may lose (messages whose Publish
// returned nil just before the kill) is logged, not asserted; with
// PublisherConfig.MinReplicas nothing Publish reported stored may be lost.

func TestFailover_Cluster(t *testing.T)             { failoverTest(t, "cluster", 0) }
func TestFailover_ClusterMinReplicas(t *testing.T)  { failoverTest(t, "cluster", 1) }
func TestFailover_Sentinel(t *testing.T)            { failoverTest(t, "sentinel", 0) }
func TestFailover_SentinelMinReplicas(t *testing.T) { failoverTest(t, "sentinel", 1) }

// deployment is a Cluster or Sentinel deployment started by a .ci script.
type deployment struct {
	kind   string // "cluster" or "sentinel"
	dir    string // the script's state dir: <dir>/<port>/redis.{conf,pid}
	script string
}

func failoverDeployment(t *testing.T, kind string) deployment {
	t.Helper()
	d := deployment{kind: kind, script: filepath.Join(".ci", kind+".sh")}
	switch {
	case kind == "cluster" && clusterMode():
		d.dir = os.Getenv("REDISDELAY_TEST_CLUSTER_DIR")
	case kind == "sentinel" && sentinelMode():
		d.dir = os.Getenv("REDISDELAY_TEST_SENTINEL_DIR")
	default:
		t.Skipf("needs a %[1]s: run `.ci/%[1]s.sh start` and set the variables it prints", kind)
	}
	if d.dir == "" {
		t.Skipf("needs REDISDELAY_TEST_%s_DIR (printed by .ci/%s.sh start) to kill and restart nodes", strings.ToUpper(kind), kind)
	}
	return d
}

// master returns the port of the master that holds key, as every sentinel
// or the cluster nodes other than except see it.
func (d deployment) master(ctx context.Context, key string, except string) (string, error) {
	if d.kind == "sentinel" {
		// Every sentinel must agree: a client that asks one still naming
		// the old master would write to it once it is restarted, and
		// those writes are lost when the sentinels make it a replica.
		master := ""
		for _, a := range sentinelAddrs {
			s := redis.NewSentinelClient(&redis.Options{Addr: a, Dialer: loopbackDialer})
			addr, err := s.GetMasterAddrByName(ctx, sentinelMaster).Result()
			_ = s.Close()
			if err != nil {
				return "", err
			}
			if master != "" && addr[1] != master {
				return "", fmt.Errorf("sentinels disagree: %s and %s", master, addr[1])
			}
			master = addr[1]
		}
		return master, nil
	}
	slot := redisSlot(key)
	var lastErr error
	for _, seed := range clusterSeeds {
		if strings.HasSuffix(seed, ":"+except) {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: seed, Dialer: loopbackDialer, MaxRetries: -1})
		slots, err := c.ClusterSlots(ctx).Result()
		_ = c.Close()
		if err != nil {
			lastErr = err
			continue
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				_, port, _ := strings.Cut(s.Nodes[0].Addr, ":")
				return port, nil
			}
		}
	}
	return "", fmt.Errorf("slot %d has no master: %v", slot, lastErr)
}

// redisSlot asks the cluster for the hash slot of key (CLUSTER KEYSLOT).
func redisSlot(key string) int64 {
	for _, seed := range clusterSeeds {
		c := redis.NewClient(&redis.Options{Addr: seed, Dialer: loopbackDialer, MaxRetries: -1})
		slot, err := c.ClusterKeySlot(context.Background(), key).Result()
		_ = c.Close()
		if err == nil {
			return slot
		}
	}
	return -1
}

func (d deployment) kill(t *testing.T, port string) {
	pid, err := os.ReadFile(filepath.Join(d.dir, port, "redis.pid"))
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(n, syscall.SIGKILL))
}

func (d deployment) restart(t *testing.T, port string) {
	bin, err := redistest.ServerBin() // the one .ci/cluster.sh and .ci/sentinel.sh started
	require.NoError(t, err)
	out, err := exec.Command(bin, filepath.Join(d.dir, port, "redis.conf")).CombinedOutput()
	require.NoError(t, err, "restart %s on %s: %s", bin, port, out)
}

// waitHealthy runs the script's wait command on the deployment's dir.
func (d deployment) waitHealthy(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.WriteFile(state, []byte(d.dir+"\n"), 0o600))
	cmd := exec.Command("bash", d.script, "wait")
	cmd.Env = append(os.Environ(), "STATE="+state)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s wait: %s", d.script, out)
}

// pubRecord is one published message.
type pubRecord struct {
	started time.Time
	ok      bool // Publish returned nil
}

func failoverTest(t *testing.T, kind string, minReplicas int) {
	d := failoverDeployment(t, kind)
	ctx := context.Background()
	d.waitHealthy(t)

	// go-redis's default retries, as an application would run it.
	client := openClient("")
	t.Cleanup(func() { _ = client.Close() })
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
		Client: client, PublishTimeout: 2 * time.Second, MinReplicas: minReplicas, ReplicaTimeout: 500 * time.Millisecond,
	}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{
		ConsumerGroup: "g", CheckInterval: 500 * time.Millisecond, VisibilityTimeout: 5 * time.Second,
	})
	topic := topic()
	ch := subscribe(t, sub, topic)

	var (
		mu        sync.Mutex
		published = map[string]pubRecord{}
		delivered = map[string]bool{}
		errs      = map[string]int{} // errors after the kill, by kind
		killedAt  time.Time
		goneAt    time.Time // when the killed master refused connections
		recovered time.Time // when the first Publish started after that returned nil
	)
	go func() {
		for msg := range ch {
			mu.Lock()
			delivered[msg.UUID] = true
			mu.Unlock()
			msg.Ack()
		}
	}()
	publishOne := func(rng *rand.Rand) {
		msg := message.NewMessage(watermill.NewUUID(), []byte("m"))
		if rng.Intn(2) == 0 {
			delay.Message(msg, delay.For(time.Duration(rng.Intn(2000))*time.Millisecond))
		}
		start := time.Now()
		err := pub.Publish(topic, msg)
		mu.Lock()
		defer mu.Unlock()
		published[msg.UUID] = pubRecord{started: start, ok: err == nil}
		if killedAt.IsZero() {
			if err != nil {
				t.Errorf("publish before the kill: %v", err)
			}
			return
		}
		if err != nil { // started before or after the kill: in the window
			kind := "other"
			switch {
			case errorsIsNotReplicated(err):
				kind = "ErrNotReplicated"
			case strings.Contains(err.Error(), "gave up"):
				kind = "timeout"
			}
			errs[kind]++
			return
		}
		// A Publish started between the SIGKILL and the master's death may
		// land on the master and die with it (not replicated yet): that is
		// the window, not recovery.
		if recovered.IsZero() && !goneAt.IsZero() && start.After(goneAt) {
			recovered = time.Now()
		}
	}
	stop := make(chan struct{})
	var publishers sync.WaitGroup
	startPublishers := func(n int, pause time.Duration, stop <-chan struct{}) {
		for i := range n {
			publishers.Add(1)
			go func() {
				defer publishers.Done()
				rng := rand.New(rand.NewSource(int64(i) + time.Now().UnixNano()))
				for {
					select {
					case <-stop:
						return
					default:
					}
					publishOne(rng)
					time.Sleep(pause)
				}
			}()
		}
	}

	// Steady publishing, then a burst from 8 goroutines right before the
	// kill, to make the replication window visible.
	startPublishers(1, 5*time.Millisecond, stop)
	time.Sleep(2 * time.Second)
	port, err := d.master(ctx, shardOf(topic, 0).Waiting(), "")
	require.NoError(t, err)
	burst := make(chan struct{})
	startPublishers(8, 0, burst)
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	d.kill(t, port)
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	}, 5*time.Second, time.Millisecond, "the killed master still accepts connections")
	mu.Lock()
	goneAt = time.Now()
	mu.Unlock()
	close(burst)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			d.restart(t, port)
		}
		d.waitHealthy(t)
	})

	// Wait for the promotion, then restart the killed node: it rejoins as a
	// replica (with MinReplicas 1 Publish needs it back).
	var promoted time.Time
	require.Eventually(t, func() bool {
		p, err := d.master(ctx, shardOf(topic, 0).Waiting(), port)
		if err == nil && p != port {
			promoted = time.Now()
			return true
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "no replica promoted within 30s")
	d.restart(t, port)
	restarted = true

	// With MinReplicas 1 publishing resumes only when the killed node is a
	// replica again (the sentinels convert it after it has reported as a
	// master for some seconds), then fully synced.
	within := 15 * time.Second
	if minReplicas > 0 {
		within = 40 * time.Second
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !recovered.IsZero()
	}, within, 20*time.Millisecond, "publishing did not resume within %s of the promotion", within)
	time.Sleep(3 * time.Second) // publishing after recovery
	close(stop)
	publishers.Wait()

	// Every message published after recovery must arrive (delays are under
	// 2s); the others are waited for as long, then counted.
	mu.Lock()
	rec := recovered
	mu.Unlock()
	missing := func(after bool) []string {
		mu.Lock()
		defer mu.Unlock()
		var m []string
		for id, r := range published {
			if r.ok && !delivered[id] && (!after || !r.started.Before(rec)) {
				m = append(m, id)
			}
		}
		return m
	}
	assert.Eventually(t, func() bool { return len(missing(true)) == 0 }, 30*time.Second, 50*time.Millisecond,
		"messages published after the recovery were not delivered")
	time.Sleep(3 * time.Second) // stragglers published before
	lost := missing(false)
	lostAfter := missing(true)

	mu.Lock()
	var ok, beforeKill int
	for _, r := range published {
		if r.ok {
			ok++
			if r.started.Before(killedAt) {
				beforeKill++
			}
		}
	}
	summary := fmt.Sprintf("FAILOVER %s MinReplicas=%d: promoted %s after the kill, publishing resumed %s after it; "+
		"%d published (%d stored before the kill), %d delivered; publish errors after the kill %v; lost %d (of them published after recovery: %d)",
		kind, minReplicas, promoted.Sub(killedAt).Round(time.Millisecond), rec.Sub(killedAt).Round(time.Millisecond),
		ok, beforeKill, len(delivered), errs, len(lost), len(lostAfter))
	mu.Unlock()
	t.Log(summary)
	fmt.Println(summary)
	assert.Empty(t, lostAfter, "messages published after the recovery were lost")
	if minReplicas > 0 {
		assert.Empty(t, lost, "with MinReplicas a message Publish reported stored was lost")
	}
}

func errorsIsNotReplicated(err error) bool {
	return err != nil && strings.Contains(err.Error(), redisdelay.ErrNotReplicated.Error())
}
