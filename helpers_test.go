package redisdelay_test

// Helpers shared by the test files: topics, messages and receiving
// (topic ... nothing), Watermill suite setup (newPubSub, features), the
// constructors and stats, and the messages and settings several
// features' tests use. Beside this file: helpers_redis_test.go (keys and
// what a topic holds in Redis, servers and ACL users of a test's own),
// helpers_proxy_test.go (TCP proxies for outages and the publish gate) and
// helpers_groups_test.go (the groups tests'). The test
// deployment itself (TestMain, clients, needSingle) is in main_test.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/testkit"
)

func topic() string { return "t-" + watermill.NewShortUUID() }

func delayed(d delay.Delay, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	delay.Message(msg, d)
	return msg
}

var logger = testkit.Logger

func newPubSub(t *testing.T, group string, configure ...func(*redisdelay.SubscriberConfig)) (*redisdelay.Publisher, *redisdelay.Subscriber) {
	env := setup(t)
	config := redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: group}
	for _, c := range configure {
		c(&config)
	}
	sub, err := redisdelay.NewSubscriber(config, logger)
	require.NoError(t, err)
	return env.pub, sub
}

// features is what the adapter honestly claims: consumer groups, persistence,
// order for a single subscriber (no Nacks), new groups reading old messages,
// and reconnects. Not exactly-once: delivery is at-least-once.
//
// TestReconnect (Redis restarted twice mid-test) runs in the Delayed
// configuration only. Watermill's harness records a published message in
// another goroutine after Publish returns and compares when the last message
// arrives (pubsub/tests/test_pubsub.go:1084-1120), so an immediate message
// delivered before that append fails the test with "received: 10000, sent:
// 9999, missing: []". A 100ms delay rules that out; reconnects with
// immediate messages are covered by the lifecycle outage tests and the chaos
// suite. Under -race it does not run at all (see race_test.go).
func features(newGroupsReadOldMessages, reconnect bool) tests.Features {
	var restart []string
	if reconnect && !raceEnabled {
		restart = restartCmd
	}
	return tests.Features{
		ConsumerGroups:                      true,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    newGroupsReadOldMessages,
		RestartServiceCommand:               restart,
	}
}

func newMessage(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
}

func topicStats(t *testing.T, insp *redisdelay.Inspector, topic string) redisdelay.TopicStats {
	t.Helper()
	st, err := insp.Stats(context.Background(), topic)
	require.NoError(t, err)
	return st
}

func groupStats(t *testing.T, insp *redisdelay.Inspector, topic, group string) redisdelay.GroupStats {
	t.Helper()
	for _, g := range topicStats(t, insp, topic).Groups {
		if g.Group == group {
			return g
		}
	}
	t.Fatalf("group %q not in the stats of topic %q", group, topic)
	return redisdelay.GroupStats{}
}

// awaitDeadLetters polls until the group holds n dead letters and returns them.
func awaitDeadLetters(t *testing.T, insp *redisdelay.Inspector, topic, group string, n int, within time.Duration) []redisdelay.DeadLetter {
	t.Helper()
	var dead []redisdelay.DeadLetter
	var err error
	if !assert.Eventually(t, func() bool {
		dead, err = insp.DeadLetters(context.Background(), topic, group, "", 100)
		return err == nil && len(dead) == n
	}, within, 20*time.Millisecond) {
		t.Fatalf("want %d dead letters within %s, have %d (err %v)", n, within, len(dead), err)
	}
	return dead
}

// closeAsync closes sub in the background; the channel is closed when
// Close has returned.
func closeAsync(sub *redisdelay.Subscriber) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sub.Close()
	}()
	return done
}

// healthGet requests the handler and returns the status, the decoded body
// and how long the request took.
func healthGet(t *testing.T, url string) (int, map[string]any, time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	took := time.Since(start)
	var body map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	return res.StatusCode, body, took
}

// healthReport runs the health check of insp with config.
func healthReport(t *testing.T, insp *redisdelay.Inspector, config redisdelay.HealthConfig) redisdelay.HealthReport {
	t.Helper()
	rep, err := insp.Health(context.Background(), config)
	require.NoError(t, err)
	return rep
}

// uniquePrefix is a key prefix of the test's own, so a Manager without a
// topic list sees only the test's topics.
func uniquePrefix() string { return "wk-" + watermill.NewShortUUID() }

// runManagerWithLogger runs a Manager with config (Client is set here) and
// log, closed when the test ends.
func runManagerWithLogger(t *testing.T, client redis.UniversalClient, config redisdelay.ManagerConfig, log watermill.LoggerAdapter) *redisdelay.Manager {
	t.Helper()
	config.Client = client
	mgr, err := redisdelay.NewManager(config, log)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	<-mgr.Running()
	return mgr
}

// newPartitionedPublisher returns a Publisher on client that spreads
// topics over parts partitions, closed when the test ends.
func newPartitionedPublisher(t *testing.T, client redis.UniversalClient, parts int) *redisdelay.Publisher {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, Partitions: parts}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

func high(msg *message.Message) *message.Message {
	msg.Metadata.Set(redisdelay.PriorityKey, redisdelay.PriorityHigh)
	return msg
}

// businessKeyMessage is a message with a business key, delayed by d (0:
// immediate) and, when policy is set, with that per-message policy.
func businessKeyMessage(key string, d time.Duration, payload string, policy redisdelay.BusinessKeyPolicy) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set(redisdelay.BusinessKey, key)
	if policy != "" {
		msg.Metadata.Set(redisdelay.BusinessKeyPolicyKey, string(policy))
	}
	if d > 0 {
		delay.Message(msg, delay.For(d))
	}
	return msg
}

// newPublisherWithConfig returns a Publisher with config on a client of its
// own (Client is set here), closed when the test ends.
func newPublisherWithConfig(t *testing.T, config redisdelay.PublisherConfig) *redisdelay.Publisher {
	t.Helper()
	config.Client = newClient(t)
	pub, err := redisdelay.NewPublisher(config, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// keyedMessage is a message of partition key key whose payload is seq, so
// the ordered tests can check the order of a key's messages.
func keyedMessage(key string, seq int) *message.Message {
	msg := newMessage(strconv.Itoa(seq))
	msg.Metadata.Set(redisdelay.PartitionKey, key)
	return msg
}

// newTopics returns n new topics.
func newTopics(n int) []string {
	topics := make([]string, n)
	for i := range topics {
		topics[i] = topic()
	}
	return topics
}

// publishBacklog publishes n immediate messages to tp in one call, so its
// groups have a backlog to read.
func publishBacklog(t *testing.T, tp string, n int) {
	t.Helper()
	pub := newPartitionedPublisher(t, newClient(t), 1)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = newMessage(fmt.Sprint(i))
	}
	require.NoError(t, pub.Publish(tp, msgs...))
}

// noRetry as SubscriberConfig.RetryDelay asks for immediate redelivery of
// nacked messages, for tests that nack many times and are about something
// else than the backoff.
func noRetry(int) time.Duration { return 0 }

func noRetryDelay(c *redisdelay.SubscriberConfig) { c.RetryDelay = noRetry }

// receiveHandled returns what a handler reported on ch (a payload, or what
// the test's handler makes of it), failing the test after within.
var receiveHandled = testkit.ReceiveHandled

// wrappedClient is an application's wrapper around a go-redis client:
// neither a *redis.Client nor a *redis.ClusterClient.
type wrappedClient struct{ redis.UniversalClient }

var (
	newPublisher  = testkit.NewPublisher
	newSubscriber = testkit.NewSubscriber
	// runManager runs a Manager until the test ends: give it the test's
	// topics (one without a topic list would schedule every other test's).
	runManager   = testkit.RunManager
	newInspector = testkit.NewInspector
	subscribe    = testkit.Subscribe
	receive      = testkit.Receive
	nothing      = testkit.Nothing
	crashedRead  = testkit.CrashedRead
	// newCaptureLogger records what is logged, to be read while
	// components still log.
	newCaptureLogger = testkit.NewCaptureLogger
)

type captureLogger = testkit.CaptureLogger

// recLogger records the errors logged through it, and logs nothing else.
type recLogger struct {
	mu     sync.Mutex
	errors []string
	// onError, when set, runs inside Error, before the error is recorded:
	// what a test sees at the moment an error is logged. Running it first
	// means a test that waits for the record finds onError's work done (CI
	// once read onError's result while it was still running).
	onError func(msg string)
}

func (l *recLogger) Error(msg string, err error, fields watermill.LogFields) {
	if l.onError != nil {
		l.onError(msg)
	}
	l.mu.Lock()
	l.errors = append(l.errors, fmt.Sprintf("%s: %v %v", msg, err, fields))
	l.mu.Unlock()
}

func (l *recLogger) Info(string, watermill.LogFields) {}

func (l *recLogger) Debug(string, watermill.LogFields) {}

func (l *recLogger) Trace(string, watermill.LogFields) {}

func (l *recLogger) With(watermill.LogFields) watermill.LoggerAdapter {
	return l
}

func (l *recLogger) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...)
}

// runRouter runs r until the test ends.
func runRouter(t *testing.T, r *message.Router) {
	t.Helper()
	go func() { _ = r.Run(context.Background()) }()
	t.Cleanup(func() { _ = r.Close() })
	<-r.Running()
}

func newRouter(t *testing.T) *message.Router {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Second}, logger)
	require.NoError(t, err)
	return r
}

// checkGap asserts a gap is not shorter than intended, nor longer than
// intended by more than half of it plus slack (a second delay applied on top
// doubles it).
func checkGap(t *testing.T, what string, gap, intended, slack time.Duration) {
	t.Helper()
	t.Logf("%s: gap %s, intended %s (%.3fx)", what, gap.Round(time.Millisecond), intended, float64(gap)/float64(intended))
	assert.GreaterOrEqual(t, gap, intended, "%s: early", what)
	assert.Less(t, gap, intended+intended/2+slack, "%s: late", what)
}

func receiveTime(t *testing.T, ch <-chan time.Time, within time.Duration) time.Time {
	t.Helper()
	select {
	case at := <-ch:
		return at
	case <-time.After(within):
		t.Fatalf("nothing within %s", within)
		return time.Time{}
	}
}

// publishN publishes the n messages msg makes (given 0 to n-1) to tp,
// 1,000 a call.
func publishN(tb testing.TB, pub *redisdelay.Publisher, tp string, n int, msg func(i int) *message.Message) {
	tb.Helper()
	for b := 0; b < n; b += 1000 {
		msgs := make([]*message.Message, 0, 1000)
		for i := b; i < min(b+1000, n); i++ {
			msgs = append(msgs, msg(i))
		}
		require.NoError(tb, pub.Publish(tp, msgs...))
	}
}

func scPublisher(t *testing.T, client redis.UniversalClient, prefix string) *redisdelay.Publisher {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix}, logger)
	require.NoError(t, err)
	return pub
}

// The Prometheus metrics of prommetrics, read back by the tests of the
// features that record them (internal/testkit, shared with prommetrics).
var (
	newMetrics  = testkit.NewMetrics
	metricValue = testkit.MetricValue
	awaitMetric = testkit.AwaitMetric
)

// env is what most tests start with (River's test bundle): a client of the
// test deployment with go-redis's defaults, a topic of the test's own, and
// a Publisher and an Inspector on that client with the default config.
type env struct {
	client redis.UniversalClient
	topic  string
	pub    *redisdelay.Publisher
	insp   *redisdelay.Inspector
}

// setup returns a test's env; the client is closed when the test ends.
func setup(t *testing.T) *env {
	t.Helper()
	return setupOn(t, newClient(t))
}

// setupOn returns a test's env on a client the test chose: of a server of
// its own (ownRedis), through a proxy... The caller closes the client (the
// helpers that make them do when the test ends).
func setupOn(t *testing.T, client redis.UniversalClient) *env {
	t.Helper()
	return &env{client: client, topic: topic(), pub: newPublisher(t, client), insp: newInspector(t, client)}
}

// subscriber returns a Subscriber of group on the env's client, with the
// default config as configure changes it, closed when the test ends.
func (e *env) subscriber(t *testing.T, group string, configure ...func(*redisdelay.SubscriberConfig)) *redisdelay.Subscriber {
	t.Helper()
	config := redisdelay.SubscriberConfig{ConsumerGroup: group}
	for _, c := range configure {
		c(&config)
	}
	return newSubscriber(t, e.client, config)
}

// publisher returns a Publisher with config on the env's client (Client
// is set here), closed when the test ends.
func (e *env) publisher(t *testing.T, config redisdelay.PublisherConfig) *redisdelay.Publisher {
	t.Helper()
	config.Client = e.client
	pub, err := redisdelay.NewPublisher(config, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// prefixedEnv is an env whose pub and insp work under a key prefix of the
// test's own: a Manager without a topic list sees only the test's topics,
// and the schedules are the test's alone.
type prefixedEnv struct {
	*env
	prefix string
}

// setupPrefixed returns a test's env under prefix.
func setupPrefixed(t *testing.T, prefix string) *prefixedEnv {
	t.Helper()
	e := setup(t)
	var err error
	e.pub, err = redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: e.client, KeyPrefix: prefix}, logger)
	require.NoError(t, err)
	e.insp, err = redisdelay.NewInspector(redisdelay.InspectorConfig{Client: e.client, KeyPrefix: prefix})
	require.NoError(t, err)
	return &prefixedEnv{env: e, prefix: prefix}
}

// setupUnreachable returns a test's env on a client of an address nothing
// listens on (port 1), without retries and with a short dial timeout: each
// call fails at once, as when Redis is down. The client is closed when the
// test ends.
func setupUnreachable(t *testing.T) *env {
	t.Helper()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	return setupOn(t, dead)
}

// ownServerEnv is an env on a redis-server of the test's own (ownRedis),
// for tests that change its settings (maxmemory, its policy, users) or
// count its commands, which the shared test server's other tests must not
// see nor disturb. server is the env's client as the *redis.Client it is,
// for what concerns the whole server: its settings (CONFIG, ACL), figures
// (INFO) and address.
type ownServerEnv struct {
	*env
	server *redis.Client
}

// setupOwnServer returns a test's env on a server of its own started with
// args (redis-server options), stopped when the test ends.
func setupOwnServer(t *testing.T, args ...string) *ownServerEnv {
	t.Helper()
	server := ownRedis(t, args...)
	return &ownServerEnv{env: setupOn(t, server), server: server}
}
