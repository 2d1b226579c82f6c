package redisdelay_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// memoryInfo reads a numeric field of INFO memory.
func memoryInfo(t *testing.T, client *redis.Client, field string) int64 {
	t.Helper()
	info, err := client.Info(context.Background(), "memory").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("INFO memory has no field %s", field)
	return 0
}

// At maxmemory with noeviction, Publish fails cleanly, while the scheduler
// keeps promoting due messages and trimming acknowledged ones: they free
// memory, so everything published is delivered and Publish works again.
func TestMemory_FullMemoryStillDrainsDueMessages(t *testing.T) {
	t.Parallel()
	env := setupOwnServer(t, "--maxmemory-policy", "noeviction")
	ctx := context.Background()

	mgrConfig := redisdelay.ManagerConfig{Client: env.client, Topics: []string{env.topic},
		CheckInterval: 100 * time.Millisecond, TrimInterval: 100 * time.Millisecond}
	mgr, err := redisdelay.NewManager(mgrConfig, logger)
	require.NoError(t, err)
	go func() { _ = mgr.Run(ctx) }()
	t.Cleanup(func() { _ = mgr.Close() })
	<-mgr.Running()

	// Subscribers schedule nothing themselves: the Manager has to drain.
	subConfig := redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g", DisableScheduler: true}
	first, err := redisdelay.NewSubscriber(subConfig, logger)
	require.NoError(t, err)
	require.NoError(t, first.SubscribeInitialize(env.topic))
	require.NoError(t, first.Close())

	// Fill a small maxmemory with messages all due at the same time, later.
	used := memoryInfo(t, env.server, "used_memory")
	require.NoError(t, env.server.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+4<<20, 10)).Err())
	due := time.Now().Add(3 * time.Second)
	payload := strings.Repeat("x", 1000)
	var sent []string
	var full error
	for len(sent) < 100_000 && full == nil {
		batch := make([]*message.Message, 50)
		for i := range batch {
			batch[i] = message.NewMessage(watermill.NewUUID(), []byte(payload))
			delay.Message(batch[i], delay.Until(due))
		}
		if full = env.pub.Publish(env.topic, batch...); full == nil {
			for _, m := range batch {
				sent = append(sent, m.UUID)
			}
		}
	}
	require.Error(t, full, "maxmemory was never reached")
	require.ErrorContains(t, full, "OOM", "Publish must fail cleanly with Redis's out-of-memory error")
	require.True(t, time.Now().Before(due), "filling took too long: the messages were due before memory was full")
	// The refused call's own arguments took the last bytes: without them
	// memory may be just below the limit again. Below what is used, it
	// stays full until something is freed.
	limit := memoryInfo(t, env.server, "used_memory") - 256<<10
	require.NoError(t, env.server.ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit, 10)).Err())
	t.Logf("memory full after %d messages (maxmemory %d bytes)", len(sent), limit)
	require.ErrorContains(t, env.client.SAdd(ctx, "probe", "x").Err(), "OOM", "memory is not full")
	// A subscriber (re)starting at full memory joins its group; a topic
	// new to Redis cannot be registered.
	sub, err := redisdelay.NewSubscriber(subConfig, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	_, err = sub.Subscribe(ctx, "new-topic")
	require.ErrorContains(t, err, `redisdelay: register topic "new-topic": OOM command not allowed`)
	ch, err := sub.Subscribe(ctx, env.topic)
	require.NoError(t, err, "a subscriber could not start at full memory")
	var (
		mu  sync.Mutex
		got = map[string]bool{}
	)
	go func() {
		for m := range ch {
			mu.Lock()
			got[m.UUID] = true
			mu.Unlock()
			m.Ack()
		}
	}()
	deadline := time.Now().Add(time.Until(due) + 15*time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == len(sent) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages delivered 15s after they were due: the scheduler stopped at full memory", n, len(sent))
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	for _, id := range sent {
		assert.True(t, got[id], "message %s not delivered", id)
	}
	mu.Unlock()

	// Acknowledged entries are trimmed, so memory frees up and Publish works.
	require.Eventually(t, func() bool {
		return env.pub.Publish(env.topic, delayed(delay.For(time.Hour), "after")) == nil
	}, 10*time.Second, 100*time.Millisecond, "Publish still fails: acknowledged messages were not trimmed")
	require.Eventually(t, func() bool {
		n, err := env.client.XLen(ctx, shardOf(env.topic, 0).Stream()).Result()
		return err == nil && n < int64(len(sent)/2)
	}, 5*time.Second, 50*time.Millisecond, "the acknowledged entries of the ready stream were not trimmed")
}

// errorLog keeps the messages logged at level ERROR.
type errorLog struct {
	watermill.NopLogger
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Error(msg string, _ error, _ watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg)
}

func (l *errorLog) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// evictionLogs starts a Manager (and stops it) on client and returns what
// it logged at level ERROR about the maxmemory policy.
func evictionLogs(t *testing.T, client redis.UniversalClient) []string {
	t.Helper()
	capture := &errorLog{}
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: client, Topics: []string{"t"}}, capture)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	<-mgr.Running()
	var logs []string
	require.Eventually(t, func() bool {
		capture.mu.Lock()
		defer capture.mu.Unlock()
		logs = logs[:0]
		for _, m := range capture.msgs {
			if strings.Contains(m, "maxmemory") {
				logs = append(logs, m)
			}
		}
		return len(logs) > 0
	}, time.Second, 10*time.Millisecond)
	require.NoError(t, mgr.Close())
	return logs
}

// A maxmemory policy that evicts the library's keys is logged when a
// scheduler starts, and one that evicts messages is a Health problem.
func TestMemory_EvictionPolicyIsWarnedAndReported(t *testing.T) {
	env := setupOwnServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	ctx := context.Background()

	logs := evictionLogs(t, env.client)
	require.Len(t, logs, 1)
	assert.Contains(t, logs[0], "maxmemory-policy allkeys-lru")
	assert.Contains(t, logs[0], "messages")
	assert.Contains(t, logs[0], "set maxmemory-policy noeviction")
	rep, err := env.insp.Health(ctx, redisdelay.HealthConfig{})
	require.NoError(t, err)
	assert.False(t, rep.Healthy)
	require.Len(t, rep.Problems, 1)
	assert.Equal(t, redisdelay.ProblemEvictionPolicy, rep.Problems[0].Kind)
	assert.Empty(t, rep.Problems[0].Topic)
	assert.Equal(t, logs[0], "redisdelay: WARNING: "+rep.Problems[0].Detail)
	t.Log(rep.Problems[0].Detail)

	srv := httptest.NewServer(redisdelay.HealthHandler(env.insp, redisdelay.HealthConfig{}, 0))
	defer srv.Close()
	status, body, _ := healthGet(t, srv.URL)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, fmt.Sprint(body["problems"]), redisdelay.ProblemEvictionPolicy)

	// volatile-*: only the keys that expire (leases, ordered ownerships);
	// logged, not a Health problem.
	require.NoError(t, env.server.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err())
	logs = evictionLogs(t, env.client)
	require.Len(t, logs, 1)
	assert.Contains(t, logs[0], "maxmemory-policy volatile-lru")
	assert.Contains(t, logs[0], "ordered")
	t.Log(logs[0])
	rep, err = env.insp.Health(ctx, redisdelay.HealthConfig{})
	require.NoError(t, err)
	assert.True(t, rep.Healthy, "%+v", rep.Problems)

	// Without maxmemory nothing is evicted, whatever the policy.
	require.NoError(t, env.server.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	require.NoError(t, env.server.ConfigSet(ctx, "maxmemory", "0").Err())
	rep, err = env.insp.Health(ctx, redisdelay.HealthConfig{})
	require.NoError(t, err)
	assert.True(t, rep.Healthy, "%+v", rep.Problems)
}

// How many messages allkeys-lru loses at a small maxmemory: a figure for
// README, not a check (REDISDELAY_TEST_MEASURE=1 runs it).
func TestMemory_MeasureAllkeysLRULoss(t *testing.T) {
	if os.Getenv("REDISDELAY_TEST_MEASURE") == "" {
		t.Skip("a measurement: set REDISDELAY_TEST_MEASURE=1 to run it")
	}
	env := setupOwnServer(t, "--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru")
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: env.client, Topics: []string{env.topic},
		CheckInterval: 100 * time.Millisecond}, nil)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g", DisableScheduler: true}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	ch := subscribe(t, sub, env.topic)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.client}, nil)
	require.NoError(t, err)

	const n = 20_000
	due := time.Now().Add(5 * time.Second)
	payload := strings.Repeat("x", 1000)
	var failed int
	for i := 0; i < n; i += 100 {
		batch := make([]*message.Message, 100)
		for k := range batch {
			batch[k] = message.NewMessage(watermill.NewUUID(), []byte(payload))
			delay.Message(batch[k], delay.Until(due))
		}
		if pub.Publish(env.topic, batch...) != nil {
			failed += len(batch)
		}
	}
	got := 0
	idle := time.NewTimer(time.Until(due) + 5*time.Second)
	for done := false; !done; {
		select {
		case m := <-ch:
			m.Ack()
			got++
			idle.Reset(3 * time.Second)
		case <-idle.C:
			done = true
		}
	}
	t.Logf("allkeys-lru, maxmemory 8 MB: %d messages of 1 KB published without an error (%d refused), %d delivered: %.0f%% lost silently",
		n-failed, failed, got, 100*float64(n-failed-got)/float64(n-failed))
}
