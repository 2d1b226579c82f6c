package redisdelay_test

// Helpers shared by the test files: topics, messages and receiving
// (topic ... nothing), Watermill suite setup (newPubSub, features), the
// lc* constructors and stats, the lcProxy TCP proxy for outages, a
// server of a test's own (ownRedis), and the publish gate of the
// capacity tests. The test deployment itself (TestMain, clients,
// needSingle) is in main_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

func topic() string { return "t-" + watermill.NewShortUUID() }

func delayed(d delay.Delay, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	delay.Message(msg, d)
	return msg
}

func subscribe(t *testing.T, sub message.Subscriber, topic string) <-chan *message.Message {
	ch, err := sub.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	return ch
}

func receive(t *testing.T, ch <-chan *message.Message, within time.Duration) *message.Message {
	t.Helper()
	select {
	case msg := <-ch:
		require.NotNil(t, msg, "channel closed")
		return msg
	case <-time.After(within):
		t.Fatalf("no message within %s", within)
		return nil
	}
}

func nothing(t *testing.T, ch <-chan *message.Message, during time.Duration) {
	t.Helper()
	select {
	case msg := <-ch:
		t.Fatalf("unexpected message %s (%s)", msg.UUID, msg.Payload)
	case <-time.After(during):
	}
}

var logger = watermill.NewStdLogger(false, false)

func newPubSub(t *testing.T, group string, configure ...func(*redisdelay.SubscriberConfig)) (*redisdelay.Publisher, *redisdelay.Subscriber) {
	client := newClient(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, logger)
	require.NoError(t, err)
	config := redisdelay.SubscriberConfig{Client: client, ConsumerGroup: group}
	for _, c := range configure {
		c(&config)
	}
	sub, err := redisdelay.NewSubscriber(config, logger)
	require.NoError(t, err)
	return pub, sub
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

// defaultKeys is the key table (internal/store) under the default prefix,
// for raw checks of what the library stores.
var defaultKeys = store.Keys{Prefix: redisdelay.DefaultKeyPrefix}

// shardOf is the key base of partition part of topic under the default
// prefix: its methods name the partition's keys (Waiting, Stream, ...).
func shardOf(topic string, part int) store.Shard { return defaultKeys.Shard(topic, part) }

// shardKey is a key of partition part of topic that the key table does not
// export (prio, fanout, bkeys, bkeyof, g:<group>:owner, the far index, or a
// pattern for KEYS): the shard from the table, then the suffix as the
// layout in internal/store/scripts.go names it.
func shardKey(topic string, part int, suffix string) string {
	return string(shardOf(topic, part)) + ":" + suffix
}

func lcPublisher(t *testing.T, client redis.UniversalClient) *redisdelay.Publisher {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, logger)
	require.NoError(t, err)
	return pub
}

// lcSubscriber returns a Subscriber on client with config (Client is set
// here), closed when the test ends.
func lcSubscriber(t *testing.T, client redis.UniversalClient, config redisdelay.SubscriberConfig) *redisdelay.Subscriber {
	t.Helper()
	config.Client = client
	sub, err := redisdelay.NewSubscriber(config, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func lcInspector(t *testing.T, client redis.UniversalClient) *redisdelay.Inspector {
	t.Helper()
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	require.NoError(t, err)
	return insp
}

// lcManager runs a Manager for the given topics only (a Manager without a
// topic list would schedule every other test's topics too).
func lcManager(t *testing.T, client redis.UniversalClient, config redisdelay.ManagerConfig) *redisdelay.Manager {
	t.Helper()
	config.Client = client
	mgr, err := redisdelay.NewManager(config, logger)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	<-mgr.Running()
	return mgr
}

func lcMessage(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
}

func lcStats(t *testing.T, insp *redisdelay.Inspector, topic string) redisdelay.TopicStats {
	t.Helper()
	st, err := insp.Stats(context.Background(), topic)
	require.NoError(t, err)
	return st
}

func lcGroupStats(t *testing.T, insp *redisdelay.Inspector, topic, group string) redisdelay.GroupStats {
	t.Helper()
	for _, g := range lcStats(t, insp, topic).Groups {
		if g.Group == group {
			return g
		}
	}
	t.Fatalf("group %q not in the stats of topic %q", group, topic)
	return redisdelay.GroupStats{}
}

// lcAwaitDead polls until the group holds n dead letters and returns them.
func lcAwaitDead(t *testing.T, insp *redisdelay.Inspector, topic, group string, n int, within time.Duration) []redisdelay.DeadLetter {
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

// lcCloseAsync closes sub in the background; the channel is closed when
// Close has returned.
func lcCloseAsync(sub *redisdelay.Subscriber) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sub.Close()
	}()
	return done
}

// lcPending is how many entries of the ready stream the group has pending.
func lcPending(t *testing.T, client redis.UniversalClient, topic, group string) int64 {
	t.Helper()
	p, err := client.XPending(context.Background(), shardOf(topic, 0).Stream(), group).Result()
	require.NoError(t, err)
	return p.Count
}

// lcCrashedRead fetches one message of the ready stream as a consumer that
// then dies: it never acks nor extends the lease.
func lcCrashedRead(t *testing.T, client redis.UniversalClient, topic, group, consumer string) redis.XMessage {
	t.Helper()
	res, err := client.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: group, Consumer: consumer, Streams: []string{shardOf(topic, 0).Stream(), ">"}, Count: 1, Block: -1,
	}).Result()
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Len(t, res[0].Messages, 1)
	return res[0].Messages[0]
}

// lcProxy is a TCP proxy to the test server that can refuse connections
// (cut), swallow traffic (stall) and come back (restore), so clients lose
// Redis while the shared server keeps running for the other tests.
type lcProxy struct {
	target, addr string

	mu      sync.Mutex
	ln      net.Listener // nil while cut
	stalled bool
	pipes   map[*lcPipe]struct{}
	held    map[net.Conn]struct{} // client connections that get no answer
}

type lcPipe struct{ down, up net.Conn }

func newLcProxy(t *testing.T) *lcProxy {
	needSingle(t, "it cuts and stalls connections through a TCP proxy in front of the test server")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &lcProxy{target: redisAddr, addr: ln.Addr().String(), ln: ln,
		pipes: map[*lcPipe]struct{}{}, held: map[net.Conn]struct{}{}}
	go p.accept(ln)
	t.Cleanup(func() { p.cut(0) })
	return p
}

// client returns a go-redis client through the proxy, with default options
// but the pool size.
func (p *lcProxy) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (p *lcProxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *lcProxy) serve(down net.Conn) {
	p.mu.Lock()
	if p.stalled {
		p.held[down] = struct{}{}
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = down.Close()
		return
	}
	pipe := &lcPipe{down: down, up: up}
	p.mu.Lock()
	if p.ln == nil || p.stalled {
		p.mu.Unlock()
		_ = down.Close()
		_ = up.Close()
		return
	}
	p.pipes[pipe] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, down); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
	<-done
	p.mu.Lock()
	_, mine := p.pipes[pipe] // else cut or stall took it over
	delete(p.pipes, pipe)
	p.mu.Unlock()
	if mine {
		_ = down.Close()
		_ = up.Close()
	}
}

// cut refuses new connections and closes the clients' connections at once;
// their server sides stay open for linger, so a reply Redis sends meanwhile
// (a blocked read served by a publish) is lost on the way.
func (p *lcProxy) cut(linger time.Duration) {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	var ups []net.Conn
	for pipe := range p.pipes {
		_ = pipe.down.Close()
		ups = append(ups, pipe.up)
	}
	for c := range p.held {
		_ = c.Close()
	}
	p.pipes, p.held, p.stalled = map[*lcPipe]struct{}{}, map[net.Conn]struct{}{}, false
	p.mu.Unlock()
	closeUps := func() {
		for _, c := range ups {
			_ = c.Close()
		}
	}
	if linger > 0 {
		time.AfterFunc(linger, closeUps)
	} else {
		closeUps()
	}
}

// stall keeps every connection open, and accepts new ones, but nothing
// reaches Redis and no reply comes back: a network partition without resets.
func (p *lcProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	for pipe := range p.pipes {
		_ = pipe.up.Close()
		p.held[pipe.down] = struct{}{}
	}
	p.pipes = map[*lcPipe]struct{}{}
}

func (p *lcProxy) restore(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.held {
		_ = c.Close()
	}
	p.held, p.stalled = map[net.Conn]struct{}{}, false
	if p.ln != nil {
		return
	}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err, "proxy cannot listen on %s again", p.addr)
	p.ln = ln
	go p.accept(ln)
}

// lcIsCause reports whether err wraps a network or context error: the
// cause of a failed call to an unreachable Redis.
func lcIsCause(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.Is(err, io.EOF)
}

// ownRedis starts a redis-server of the test's own, without persistence,
// for tests that change server settings (maxmemory, its policy) the
// shared test server's other tests must not see. Stopped when the test ends.
func ownRedis(t *testing.T, args ...string) *redis.Client {
	t.Helper()
	server := redistest.ForTest(t, redistest.Options{Args: args})
	client := redis.NewClient(&redis.Options{Addr: server.Addr})
	t.Cleanup(func() { _ = client.Close() })
	return client
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

func wkPrefix() string { return "wk-" + watermill.NewShortUUID() }

// wkManager runs a Manager with config (Client is set here) and logger,
// closed when the test ends.
func wkManager(t *testing.T, client redis.UniversalClient, config redisdelay.ManagerConfig, log watermill.LoggerAdapter) *redisdelay.Manager {
	t.Helper()
	config.Client = client
	mgr, err := redisdelay.NewManager(config, log)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	<-mgr.Running()
	return mgr
}

// wkCommandsPerSecond is how many commands Redis processed per second over d.
func wkCommandsPerSecond(t *testing.T, client *redis.Client, d time.Duration) float64 {
	t.Helper()
	count := func() int64 {
		info, err := client.Info(context.Background(), "stats").Result()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				return n
			}
		}
		t.Fatal("no total_commands_processed in INFO stats")
		return 0
	}
	start := count()
	time.Sleep(d)
	return float64(count()-start-1) / d.Seconds()
}

func ptPublisher(t *testing.T, client redis.UniversalClient, parts int) *redisdelay.Publisher {
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

// gateProxy is a TCP proxy to the test server that can hold what clients
// send (nothing is lost: it goes on when the gate opens), so a test can keep
// one Publish call's script in flight while others queue behind it.
type gateProxy struct {
	addr string
	mu   sync.Mutex
	gate chan struct{} // closed while open
	held atomic.Int64  // reads waiting at the closed gate
}

// hold keeps what clients send from here on until open.
func (p *gateProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

func (p *gateProxy) open() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// scriptCounter counts the scripts a client runs.
type scriptCounter struct{ n atomic.Int64 }

func (*scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			s.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// gatedPublisher returns a Publisher whose connections go through a gate
// proxy, the proxy, and a count of the scripts it has run. The topic is
// registered and the script loaded already, so each Publish round trip
// runs exactly one script.
func gatedPublisher(t *testing.T, topic string, config redisdelay.PublisherConfig) (*redisdelay.Publisher, *gateProxy, *scriptCounter) {
	proxy := newGateProxy(t)
	client := redis.NewClient(&redis.Options{Addr: proxy.addr})
	t.Cleanup(func() { _ = client.Close() })
	config.Client = client
	pub, err := redisdelay.NewPublisher(config, logger)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), nil)))
	counter := &scriptCounter{}
	client.AddHook(counter)
	return pub, proxy, counter
}

// inFlight starts publish in a goroutine and returns once its round trip is
// held at the gate (the gate must be held).
func inFlight(t *testing.T, proxy *gateProxy, publish func() error) <-chan error {
	t.Helper()
	before := proxy.held.Load()
	errc := make(chan error, 1)
	go func() { errc <- publish() }()
	require.Eventually(t, func() bool { return proxy.held.Load() > before }, 5*time.Second, time.Millisecond,
		"the first Publish never reached Redis")
	return errc
}

// awaitQueued waits until n Publish calls to topic wait in pub's queue.
func awaitQueued(t *testing.T, pub *redisdelay.Publisher, topic string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return redisdelay.QueuedCalls(pub, topic) == n }, 5*time.Second, time.Millisecond,
		"%d Publish call(s) should be queued", n)
}

type topicContent struct {
	waiting []string // UUIDs in due order
	bodies  int
	ready   int64
}

func content(t *testing.T, topic string) topicContent {
	t.Helper()
	ctx := context.Background()
	client := newClient(t)
	sh := shardOf(topic, 0)
	// in due order, the far tier's messages included (see far.go)
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	require.NoError(t, err)
	ws, err := insp.Waiting(ctx, topic, 0, 10000)
	require.NoError(t, err)
	waiting := []string{}
	for _, w := range ws {
		waiting = append(waiting, w.Message.UUID)
	}
	bodies, err := client.HLen(ctx, sh.Bodies()).Result()
	require.NoError(t, err)
	far, _ := client.HGet(ctx, sh.FarMeta(), "n").Int64()
	bodies += far
	ready, err := client.XLen(ctx, sh.Stream()).Result()
	require.NoError(t, err)
	return topicContent{waiting: waiting, bodies: int(bodies), ready: ready}
}

// twoInFlight holds the gate and starts two Publish calls of an immediate
// message each, returning once both round trips are held: a Publisher
// keeps at most two in flight per topic, so later calls queue.
func twoInFlight(t *testing.T, proxy *gateProxy, pub *redisdelay.Publisher, topic string) (<-chan error, <-chan error) {
	t.Helper()
	proxy.hold()
	publish := func() error { return pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("in flight"))) }
	return inFlight(t, proxy, publish), inFlight(t, proxy, publish)
}

// topicState is everything a topic holds in Redis, to show that a rejected
// call changed nothing.
func topicState(t *testing.T, topic string) string {
	t.Helper()
	ctx := context.Background()
	client := newClient(t)
	keys, err := client.Keys(ctx, shardKey(topic, 0, "*")).Result()
	require.NoError(t, err)
	sort.Strings(keys) // KEYS answers in no particular order
	var b strings.Builder
	for _, k := range keys {
		switch typ := client.Type(ctx, k).Val(); typ {
		case "zset":
			fmt.Fprintln(&b, k, client.ZRangeWithScores(ctx, k, 0, -1).Val())
		case "hash":
			fmt.Fprintln(&b, k, client.HGetAll(ctx, k).Val())
		case "stream":
			fmt.Fprintln(&b, k, client.XRange(ctx, k, "-", "+").Val())
		case "list":
			fmt.Fprintln(&b, k, client.LRange(ctx, k, 0, -1).Val())
		default:
			fmt.Fprintln(&b, k, typ)
		}
	}
	return b.String()
}

// ptKeepBusy publishes a message due in an hour to every partition of the
// topic, so their scheduler loops run (and hold their leases) for the
// test: a loop with nothing to schedule retires, releasing its lease.
func ptKeepBusy(t *testing.T, client redis.UniversalClient, pub message.Publisher, tp string, parts int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		busy := 0
		for p := range parts {
			// in the waiting set or the far tier (due in an hour): either way
			// the partition has something to schedule
			if client.ZCard(ctx, shardOf(tp, p).Waiting()).Val()+client.ZCard(ctx, shardOf(tp, p).Far()).Val() > 0 {
				busy++
			}
		}
		if busy == parts {
			return
		}
		require.Less(t, i, 1000, "no message reached some partition")
		msg := delayed(delay.For(time.Hour), "keeps the scheduler busy")
		msg.Metadata.Set(redisdelay.PartitionKey, strconv.Itoa(i))
		require.NoError(t, pub.Publish(tp, msg))
	}
}
