package redisdelay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

func TestHealth_HealthyTopic(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", CheckInterval: 100 * time.Millisecond})
	ch := subscribe(t, sub, env.topic)
	msg := newMessage("x")
	delay.Message(msg, delay.For(100*time.Millisecond))
	require.NoError(t, env.pub.Publish(env.topic, msg, newMessage("y")))
	receive(t, ch, 3*time.Second).Ack()
	receive(t, ch, 3*time.Second).Ack()
	later := newMessage("later")
	delay.Message(later, delay.For(time.Hour))
	require.NoError(t, env.pub.Publish(env.topic, later))
	time.Sleep(300 * time.Millisecond)

	config := redisdelay.HealthConfig{Topics: []string{env.topic}, StuckAfter: 200 * time.Millisecond,
		ConsumerIdle: 200 * time.Millisecond, MaxOverdue: 200 * time.Millisecond}
	rep := healthReport(t, env.insp, config)
	assert.True(t, rep.Healthy, "%+v", rep.Problems)
	assert.Equal(t, 1, rep.Topics)

	srv := httptest.NewServer(redisdelay.HealthHandler(env.insp, config, 0))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	var body redisdelay.HealthReport
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	assert.True(t, body.Healthy)
}

// A consumer that read a message and died, with no scheduler to reclaim
// it: the message is stuck.
func TestHealth_StuckPendingMessage(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	require.NoError(t, env.pub.Publish(env.topic, newMessage("x")))
	e := crashedRead(t, env.client, env.topic, "g", "crashed")
	time.Sleep(300 * time.Millisecond)

	config := redisdelay.HealthConfig{Topics: []string{env.topic}, StuckAfter: 200 * time.Millisecond}
	rep := healthReport(t, env.insp, config)
	require.False(t, rep.Healthy)
	require.Len(t, rep.Problems, 1, "%+v", rep.Problems)
	p := rep.Problems[0]
	assert.Equal(t, redisdelay.ProblemStuckPending, p.Kind)
	assert.Equal(t, env.topic, p.Topic)
	assert.Equal(t, "g", p.Group)
	assert.Contains(t, p.Detail, e.ID)
	assert.NotContains(t, p.Detail, "crashed", "consumer names are shown only with ShowConsumers")
	t.Log(p.Detail)
	config.ShowConsumers = true
	assert.Contains(t, healthReport(t, env.insp, config).Problems[0].Detail, `for consumer "crashed"`)

	// The default limit is twice the group's stored VisibilityTimeout (30s).
	assert.True(t, healthReport(t, env.insp, redisdelay.HealthConfig{Topics: []string{env.topic}}).Healthy)

	srv := httptest.NewServer(redisdelay.HealthHandler(env.insp, config, time.Second))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
	b, _ := io.ReadAll(res.Body)
	t.Logf("%s", b)
	var body redisdelay.HealthReport
	require.NoError(t, json.Unmarshal(b, &body))
	assert.False(t, body.Healthy)
	require.Len(t, body.Problems, 1)
	assert.Equal(t, redisdelay.HealthProblem{Topic: env.topic, Group: "g", Kind: redisdelay.ProblemStuckPending, Detail: body.Problems[0].Detail}, body.Problems[0])
}

// Messages ready and no consumer: a group created and never consumed, and
// one whose consumer stopped reading.
func TestHealth_ReadyMessagesAndNoActiveConsumer(t *testing.T) {
	t.Parallel()
	env := setup(t)
	for _, g := range []string{"never", "stopped"} {
		sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: g, DisableScheduler: true})
		require.NoError(t, sub.SubscribeInitialize(env.topic))
	}
	require.NoError(t, env.pub.Publish(env.topic, newMessage("1"), newMessage("2")))
	crashedRead(t, env.client, env.topic, "stopped", "gone")
	time.Sleep(300 * time.Millisecond)

	rep := healthReport(t, env.insp, redisdelay.HealthConfig{Topics: []string{env.topic}, ConsumerIdle: 200 * time.Millisecond, StuckAfter: time.Hour})
	require.Len(t, rep.Problems, 2, "%+v", rep.Problems)
	byGroup := map[string]redisdelay.HealthProblem{}
	for _, p := range rep.Problems {
		assert.Equal(t, redisdelay.ProblemNoActiveConsumer, p.Kind)
		byGroup[p.Group] = p
		t.Log(p.Detail)
	}
	assert.Contains(t, byGroup["never"].Detail, "2 message(s) ready and the group has no consumer")
	assert.Contains(t, byGroup["stopped"].Detail, "1 message(s) ready and none of its 1 consumer(s) read for")

	// A live subscription reads every BlockTime: healthy again.
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "never", DisableScheduler: true, BlockTime: 50 * time.Millisecond})
	ch := subscribe(t, sub, env.topic)
	receive(t, ch, 3*time.Second).Ack()
	receive(t, ch, 3*time.Second).Ack()
	rep = healthReport(t, env.insp, redisdelay.HealthConfig{Topics: []string{env.topic}, ConsumerIdle: 200 * time.Millisecond, StuckAfter: time.Hour})
	require.Len(t, rep.Problems, 1, "%+v", rep.Problems)
	assert.Equal(t, "stopped", rep.Problems[0].Group)
}

// Subscribers with DisableScheduler and no Manager: due messages stay
// waiting and the topic is reported.
func TestHealth_SchedulerNotRunning(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true, BlockTime: 50 * time.Millisecond})
	ch := subscribe(t, sub, env.topic)
	msg := newMessage("x")
	delay.Message(msg, delay.For(50*time.Millisecond))
	require.NoError(t, env.pub.Publish(env.topic, msg))
	nothing(t, ch, 400*time.Millisecond)

	overdue, err := env.insp.Overdue(context.Background(), env.topic)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, overdue, 300*time.Millisecond)
	rep := healthReport(t, env.insp, redisdelay.HealthConfig{Topics: []string{env.topic}, MaxOverdue: 200 * time.Millisecond})
	require.Len(t, rep.Problems, 1, "%+v", rep.Problems)
	p := rep.Problems[0]
	assert.Equal(t, redisdelay.ProblemSchedulerBehind, p.Kind)
	assert.Empty(t, p.Group)
	assert.Contains(t, p.Detail, "no scheduler runs")
	t.Log(p.Detail)
	// The default MaxOverdue is a minute.
	assert.True(t, healthReport(t, env.insp, redisdelay.HealthConfig{Topics: []string{env.topic}}).Healthy)
}

func TestHealth_Errors(t *testing.T) {
	t.Parallel()
	env := setup(t)
	_, err := env.insp.Health(context.Background(), redisdelay.HealthConfig{StuckAfter: -time.Second})
	assert.ErrorContains(t, err, "must not be negative")
	_, err = env.insp.Health(context.Background(), redisdelay.HealthConfig{Topics: []string{"a{b"}})
	assert.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
	_, err = env.insp.Overdue(context.Background(), "")
	assert.ErrorIs(t, err, redisdelay.ErrInvalidTopic)

	dead := setupUnreachable(t)
	for _, topics := range [][]string{{"a"}, nil} {
		_, err = dead.insp.Health(context.Background(), redisdelay.HealthConfig{Topics: topics})
		assert.Error(t, err)
	}
	_, err = dead.insp.Overdue(context.Background(), "a")
	assert.Error(t, err)

	srv := httptest.NewServer(redisdelay.HealthHandler(dead.insp, redisdelay.HealthConfig{Topics: []string{"a"}}, time.Second))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	var body struct {
		Healthy bool   `json:"healthy"`
		Error   string `json:"error"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	assert.False(t, body.Healthy)
	assert.Contains(t, body.Error, "127.0.0.1:1")
}

// idleTopics registers topics idle-0 to idle-(n-1), each with a consumer
// group and nothing in it, as subscribers that came and went leave them.
func idleTopics(t *testing.T, client redis.UniversalClient, from, n int) {
	t.Helper()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "g", DisableScheduler: true}, nil)
	require.NoError(t, err)
	defer sub.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := from + w; i < n; i += 8 {
				if err := sub.SubscribeInitialize("idle-" + strconv.Itoa(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// commandsProcessed reads the server's total_commands_processed.
func commandsProcessed(t *testing.T, client *redis.Client) int64 {
	t.Helper()
	info, err := client.Info(context.Background(), "stats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("INFO stats has no total_commands_processed")
	return 0
}

// settled waits until the server has run no command but these INFOs for
// 100 ms (the check a request started has ended: under the race detector
// on a busy machine, its Go work between two pipelines can take tens of
// milliseconds) and returns total_commands_processed without them.
func settled(t *testing.T, client *redis.Client) int64 {
	t.Helper()
	infos := int64(1)
	last := commandsProcessed(t, client)
	quiet := 0
	for range 500 {
		time.Sleep(20 * time.Millisecond)
		now := commandsProcessed(t, client)
		infos++
		if now-last == 1 {
			quiet++
		} else {
			quiet = 0
		}
		if quiet == 5 {
			return now - infos
		}
		last = now
	}
	t.Fatal("the server kept running commands")
	return 0
}

// The health handler of a Manager scheduling many healthy idle topics
// answers 200 at once, and a request costs Redis a bounded number of
// commands, however many topics there are. Inspector.Health, the full
// check, reads them in pipelines.
func TestHealth_HandlerIsCheapWithManyIdleTopics(t *testing.T) {
	env := setupOwnServer(t)
	ctx := context.Background()
	// Every request finds the report old and starts a check: the worst case.
	srv := httptest.NewServer(redisdelay.HealthHandler(env.insp, redisdelay.HealthConfig{CheckEvery: time.Nanosecond}, 0))
	defer srv.Close()

	created := 0
	for _, n := range []int{2_000, 10_000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			start := time.Now()
			idleTopics(t, env.client, created, n)
			created = n
			t.Logf("%d idle topics created in %s", n, time.Since(start).Round(time.Millisecond))

			before := commandsProcessed(t, env.server)
			start = time.Now()
			rep, err := env.insp.Health(ctx, redisdelay.HealthConfig{})
			took := time.Since(start)
			require.NoError(t, err)
			assert.True(t, rep.Healthy, "%+v", rep.Problems)
			assert.Equal(t, n, rep.Topics)
			t.Logf("Inspector.Health at %d topics: %s, %d Redis commands", n, took.Round(time.Millisecond), commandsProcessed(t, env.server)-before-1)

			var most int64
			var slowest time.Duration
			deadline := time.Now().Add(time.Minute)
			for {
				before := commandsProcessed(t, env.server)
				status, body, took := healthGet(t, srv.URL)
				cmds := settled(t, env.server) - before
				most, slowest = max(most, cmds), max(slowest, took)
				assert.Equal(t, http.StatusOK, status, "healthy idle topics answered %v", body)
				if body["topics"] == float64(n) {
					break
				}
				// Each check covers the next thousand topics; a request
				// finding a check still running starts none. A deadline,
				// not a count of requests: settled can end before a slow
				// check does, and the next request then starts nothing.
				require.True(t, time.Now().Before(deadline), "the checks never covered every topic")
			}
			t.Logf("handler at %d topics: slowest request %s, at most %d Redis commands per request", n, slowest.Round(time.Microsecond), most)
			assert.Less(t, slowest, time.Second)
			assert.Less(t, most, int64(10_000), "commands per request must not grow with the topics")
		})
	}
}

// The handler's errors: a bad config, and Redis stalled during the first
// check and the PING after it.
func TestHealth_HandlerErrors(t *testing.T) {
	env := setup(t)
	srv := httptest.NewServer(redisdelay.HealthHandler(env.insp, redisdelay.HealthConfig{CheckEvery: -time.Second}, 0))
	defer srv.Close()
	status, body, _ := healthGet(t, srv.URL)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body["error"], "HealthConfig durations must not be negative")

	p := newFaultProxy(t)
	stalled := newInspector(t, p.client(t))
	p.stall()
	srv2 := httptest.NewServer(redisdelay.HealthHandler(stalled, redisdelay.HealthConfig{Topics: []string{env.topic}}, 300*time.Millisecond))
	defer srv2.Close()
	status, body, took := healthGet(t, srv2.URL)
	assert.Equal(t, http.StatusServiceUnavailable, status, "%v", body)
	assert.Equal(t, false, body["healthy"])
	assert.NotEmpty(t, body["error"])
	assert.Less(t, took, 2*time.Second)
	t.Logf("stalled Redis: %d in %s: %v", status, took.Round(time.Millisecond), body["error"])

	// Once Redis answers, a request starts a new check at once.
	p.restore(t)
	require.Eventually(t, func() bool {
		status, _, _ := healthGet(t, srv2.URL)
		return status == http.StatusOK
	}, 5*time.Second, 50*time.Millisecond)
}

// A server whose ACL denies INFO: the eviction policy cannot be told, and
// is not a problem.
func TestHealth_InfoDeniedSkipsTheEvictionCheck(t *testing.T) {
	env := setupOwnServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	ctx := context.Background()
	require.NoError(t, env.server.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-info").Err())
	client := redis.NewClient(&redis.Options{Addr: env.server.Options().Addr, Username: "app", Password: "pw"})
	t.Cleanup(func() { _ = client.Close() })
	require.ErrorContains(t, client.Info(ctx, "memory").Err(), "NOPERM")
	insp := newInspector(t, client)
	rep, err := insp.Health(ctx, redisdelay.HealthConfig{})
	require.NoError(t, err)
	assert.True(t, rep.Healthy, "%+v", rep.Problems)
}

// In a topic of several partitions each problem names the partition
// where it shows first.
func TestHealth_PartitionedTopic(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ctx := context.Background()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.client, Partitions: 3}, logger)
	require.NoError(t, err)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true, Partitions: 3})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	for i := range 30 {
		require.NoError(t, pub.Publish(env.topic, newMessage(strconv.Itoa(i))))
	}
	stream := shardOf(env.topic, 2).Stream()
	res, err := env.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "crashed", Streams: []string{stream, ">"}, Count: 1, Block: -1}).Result()
	require.NoError(t, err)
	require.Len(t, res, 1)
	time.Sleep(300 * time.Millisecond)

	rep := healthReport(t, env.insp, redisdelay.HealthConfig{Topics: []string{env.topic}, StuckAfter: 200 * time.Millisecond, ConsumerIdle: 200 * time.Millisecond})
	require.Len(t, rep.Problems, 2, "%+v", rep.Problems)
	assert.Equal(t, redisdelay.ProblemStuckPending, rep.Problems[0].Kind)
	assert.Contains(t, rep.Problems[0].Detail, "entry "+res[0].Messages[0].ID+" has been pending for ")
	assert.Contains(t, rep.Problems[0].Detail, " in partition 2 (limit 200ms)")
	assert.Equal(t, redisdelay.ProblemNoActiveConsumer, rep.Problems[1].Kind)
	assert.Contains(t, rep.Problems[1].Detail, "ready in partition 0 and the group has no consumer")
	for _, p := range rep.Problems {
		t.Log(p.Detail)
	}
}

// TestHealth_NoConsumerGroup: ready messages in a topic with no consumer
// group (a schedule ticking into it) are a problem until a group exists.
func TestHealth_NoConsumerGroup(t *testing.T) {
	t.Parallel()
	env := setup(t)
	config := redisdelay.HealthConfig{Topics: []string{env.topic}}
	require.NoError(t, env.pub.Publish(env.topic, newMessage("tick 1"), newMessage("tick 2")))
	rep := healthReport(t, env.insp, config)
	require.False(t, rep.Healthy)
	require.Len(t, rep.Problems, 1, "%+v", rep.Problems)
	p := rep.Problems[0]
	assert.Equal(t, redisdelay.ProblemNoConsumerGroup, p.Kind)
	assert.Equal(t, env.topic, p.Topic)
	assert.Contains(t, p.Detail, "2 message(s) in the ready stream, but the topic has no consumer group")

	// A group, even one that has not read yet, is someone to read them.
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)
	receive(t, ch, 5*time.Second).Ack()
	receive(t, ch, 5*time.Second).Ack()
	assert.True(t, healthReport(t, env.insp, config).Healthy)
}
