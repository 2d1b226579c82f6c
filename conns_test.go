package redisdelay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// The connection model (internal/store/hub.go) with the client a new user creates:
// redis.NewClient(&redis.Options{Addr: addr}), go-redis's default pool of
// 10 connections per GOMAXPROCS. Before it, each subscription held a
// pooled connection per partition for its blocking reads, and the
// library stalled for good once subscriptions × partitions reached the
// pool size (20 topics at GOMAXPROCS 2, 10 at GOMAXPROCS 1).

// defaultClient is a client of the test deployment with go-redis's
// defaults, its pool sized as under GOMAXPROCS procs (the pool is sized
// when the client is created).
func defaultClient(t testing.TB, procs int) redis.UniversalClient {
	t.Helper()
	prev := runtime.GOMAXPROCS(procs)
	c := openClient("")
	runtime.GOMAXPROCS(prev)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ctFlow publishes perTopic messages to each topic, delayed 0-30ms, from a
// few goroutines at once, and checks that every one is received once on
// the topic's channel, none before its delay passed.
type ctFlow struct {
	t        *testing.T
	pub      message.Publisher
	topics   []string
	perTopic int

	mu      sync.Mutex
	sentAt  map[string]time.Time // UUID -> when its delay was set
	delayOf map[string]time.Duration
	topicOf map[string]string
	got     map[string]int
	early   []string
	left    atomic.Int64
	done    chan struct{}
}

func newCtFlow(t *testing.T, pub message.Publisher, topics []string, perTopic int) *ctFlow {
	f := &ctFlow{t: t, pub: pub, topics: topics, perTopic: perTopic,
		sentAt: map[string]time.Time{}, delayOf: map[string]time.Duration{}, topicOf: map[string]string{}, got: map[string]int{}, done: make(chan struct{})}
	f.left.Store(int64(len(topics) * perTopic))
	return f
}

// consume acks what comes on ch until it closes.
func (f *ctFlow) consume(ch <-chan *message.Message) {
	go func() {
		for msg := range ch {
			now := time.Now()
			msg.Ack()
			f.mu.Lock()
			sent, ok := f.sentAt[msg.UUID]
			if ok && now.Sub(sent) < f.delayOf[msg.UUID] {
				f.early = append(f.early, msg.UUID)
			}
			f.got[msg.UUID]++
			first := f.got[msg.UUID] == 1
			f.mu.Unlock()
			if first && f.left.Add(-1) == 0 {
				close(f.done)
			}
		}
	}()
}

// publish publishes everything from 8 goroutines, one message per call.
func (f *ctFlow) publish() {
	type job struct {
		topic string
		msg   *message.Message
		d     time.Duration
		at    time.Time // when its delay was set: delay.For's until second counts from then
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				f.mu.Lock()
				f.sentAt[j.msg.UUID], f.delayOf[j.msg.UUID], f.topicOf[j.msg.UUID] = j.at, j.d, j.topic
				f.mu.Unlock()
				if err := f.pub.Publish(j.topic, j.msg); err != nil {
					errs <- fmt.Errorf("publish to %s: %w", j.topic, err)
					return
				}
			}
		}()
	}
	for i := range f.perTopic {
		for _, tp := range f.topics {
			d := time.Duration(rand.IntN(31)) * time.Millisecond
			msg := newMessage(fmt.Sprintf("%s-%d", tp, i))
			at := time.Now()
			delay.Message(msg, delay.For(d))
			jobs <- job{tp, msg, d, at}
		}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(f.t, err)
	}
}

// await waits until every message came, at most within.
func (f *ctFlow) await(within time.Duration) {
	f.t.Helper()
	select {
	case <-f.done:
	case <-time.After(within):
		f.mu.Lock()
		heard := map[string]bool{}
		for id, n := range f.got {
			if n > 0 {
				heard[f.topicOf[id]] = true
			}
		}
		f.mu.Unlock()
		f.t.Fatalf("%d of %d messages not received within %s; %d of %d topics received none",
			f.left.Load(), len(f.topics)*f.perTopic, within, len(f.topics)-len(heard), len(f.topics))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Empty(f.t, f.early, "messages delivered before their delay passed")
}

// publishToAll publishes the first flow's messages, which every flow (one
// per consumer group of the same topics) awaits.
func publishToAll(flows []*ctFlow) {
	flows[0].publish()
	for _, f := range flows[1:] {
		f.mu.Lock()
		flows[0].mu.Lock()
		for id, at := range flows[0].sentAt {
			f.sentAt[id], f.delayOf[id], f.topicOf[id] = at, flows[0].delayOf[id], flows[0].topicOf[id]
		}
		flows[0].mu.Unlock()
		f.mu.Unlock()
	}
}

// One Subscriber with many topics on a default client, at GOMAXPROCS 1 and
// 2 (pools of 10 and 20): every message comes, none early, and publishing
// on the same client keeps working. Before the connection model, 20 topics
// (GOMAXPROCS 2) and 10 (GOMAXPROCS 1) delivered nothing, ever, and 5
// topics of 4 partitions stalled as 20 of one.
func TestDefaultClient_OneSubscriberManyTopics(t *testing.T) {
	t.Parallel()
	cases := []struct {
		topics, parts, perTopic int
	}{
		{1, 1, 100},
		{20, 1, 100},
		{100, 1, 20},
		{5, 4, 100},
		{1000, 1, 5},
	}
	for _, c := range cases {
		for _, procs := range []int{1, 2} {
			t.Run(fmt.Sprintf("%d topics of %d partitions, pool of GOMAXPROCS %d", c.topics, c.parts, procs), func(t *testing.T) {
				if testing.Short() && c.topics > 100 {
					t.Skip("-short: 1,000 topics are covered by TestDefaultClient_ThousandTopicsThreeSubscribers")
				}
				t.Parallel()
				env := setupOn(t, defaultClient(t, procs))
				pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.client, Partitions: c.parts}, logger)
				require.NoError(t, err)
				sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: c.parts})
				topics := newTopics(c.topics)
				f := newCtFlow(t, pub, topics, c.perTopic)
				for _, tp := range topics {
					f.consume(subscribe(t, sub, tp))
				}
				f.publish()
				f.await(time.Minute)
			})
		}
	}
}

// Three Subscribers (consumer groups a, b, c), a Manager and a Publisher
// share one default client, 1,000 topics each Subscriber: every group
// gets every message. Before the connection model, subscriptions past the
// pool's 20th failed Subscribe after ~16s each, and no publish succeeded.
func TestDefaultClient_ThousandTopicsThreeSubscribers(t *testing.T) {
	t.Parallel()
	n, perTopic := 1000, 2
	if testing.Short() {
		n = 200
	}
	env := setupOn(t, defaultClient(t, 2))
	topics := newTopics(n)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: topics})
	var flows []*ctFlow
	for _, group := range []string{"a", "b", "c"} {
		sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: group, DisableScheduler: group != "a"})
		f := newCtFlow(t, env.pub, topics, perTopic)
		for _, tp := range topics {
			f.consume(subscribe(t, sub, tp))
		}
		flows = append(flows, f)
	}
	publishToAll(flows)
	for _, f := range flows {
		f.await(time.Minute)
	}
}

// A Router with 21 handlers on one Subscriber and a default client runs,
// delivers and closes promptly. Before the connection model Run failed
// ("cannot subscribe topic … connection pool timeout") and Close took 30s.
func TestDefaultClient_RouterWithManyHandlers(t *testing.T) {
	t.Parallel()
	env := setupOn(t, defaultClient(t, 2))
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g"}, logger)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	require.NoError(t, err)
	topics := newTopics(21)
	var got sync.Map
	for _, tp := range topics {
		router.AddConsumerHandler("h-"+tp, tp, sub, func(msg *message.Message) error {
			got.Store(string(msg.Payload), true)
			return nil
		})
	}
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(context.Background()) }()
	select {
	case <-router.Running():
	case err := <-runErr:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the Router was not running within 30s")
	}
	for _, tp := range topics {
		msg := newMessage(tp)
		delay.Message(msg, delay.For(20*time.Millisecond))
		require.NoError(t, env.pub.Publish(tp, msg))
	}
	require.Eventually(t, func() bool {
		n := 0
		got.Range(func(any, any) bool { n++; return true })
		return n == len(topics)
	}, 10*time.Second, 10*time.Millisecond, "every handler gets its message")

	start := time.Now()
	require.NoError(t, router.Close())
	require.NoError(t, <-runErr)
	t.Logf("FIGURE Router of 21 handlers closed in %s", time.Since(start).Round(time.Millisecond))
	assert.Less(t, time.Since(start), 5*time.Second)
}

// namedEnv is what the tests of a process's connections start with: an
// env whose client names its connections (CLIENT SETNAME) with go-redis's
// defaults otherwise, so CLIENT LIST tells them apart, and admin, a client
// of its own to read CLIENT LIST (and publish beside, when publishing is
// the application's load).
type namedEnv struct {
	*env
	name  string
	admin redis.UniversalClient
}

// setupNamed returns a test's namedEnv; its clients are closed when the
// test ends.
func setupNamed(t *testing.T) *namedEnv {
	t.Helper()
	name := "ct-" + watermill.NewShortUUID()
	client := openClient(name)
	t.Cleanup(func() { _ = client.Close() })
	return &namedEnv{env: setupOn(t, client), name: name, admin: newClient(t)}
}

// ctConnections counts the connections Redis has from clients named name:
// on a Cluster, those of the node that has most.
func ctConnections(t *testing.T, admin redis.UniversalClient, name string) int {
	t.Helper()
	count := func(c redis.UniversalClient) int {
		list, err := c.ClientList(context.Background()).Result()
		require.NoError(t, err)
		return strings.Count(list, " name="+name+" ")
	}
	cluster, ok := admin.(*redis.ClusterClient)
	if !ok {
		return count(admin)
	}
	var mu sync.Mutex
	most := 0
	require.NoError(t, cluster.ForEachShard(context.Background(), func(_ context.Context, node *redis.Client) error {
		n := count(node)
		mu.Lock()
		most = max(most, n)
		mu.Unlock()
		return nil
	}))
	return most
}

// The library's connections per process and Redis node stay within the
// pub/sub connection and the lanes (internal/store/hub.go), whatever the number of
// topics, partitions and Subscribers: three Subscribers on 300 topics (50
// of them of 4 partitions, on every node of a Cluster) and a Manager,
// while messages flow and once idle. Publishing goes through a client of
// its own: the Publisher's connections are the application's load.
func TestConnections_BoundedPerProcess(t *testing.T) {
	t.Parallel()
	// The name only tells the connections apart in CLIENT LIST: the pool
	// is go-redis's default.
	env := setupNamed(t)

	single, multi := newTopics(250), newTopics(50)
	parts := map[string]int{}
	for _, tp := range multi {
		parts[tp] = 4
	}
	all := append(append([]string{}, single...), multi...)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: all})
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.admin, TopicPartitions: parts}, logger)
	require.NoError(t, err)
	var flows []*ctFlow
	for _, group := range []string{"a", "b", "c"} {
		sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: group, TopicPartitions: parts})
		f := newCtFlow(t, pub, all, 10)
		for _, tp := range all {
			f.consume(subscribe(t, sub, tp))
		}
		flows = append(flows, f)
	}

	most := 0
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			most = max(most, ctConnections(t, env.admin, env.name))
		}
	}()
	publishToAll(flows)
	for _, f := range flows {
		f.await(time.Minute)
	}
	time.Sleep(500 * time.Millisecond) // idle
	close(stop)
	<-sampled
	t.Logf("FIGURE connections of a process with 3 Subscribers on 300 topics (50 of 4 partitions) and a Manager: at most %d per node", most)
	bound := redisdelay.Lanes + 1 // the lanes and the pub/sub connection
	if _, ok := env.admin.(*redis.ClusterClient); ok {
		// go-redis reloads the cluster's layout every 10 s from a node at
		// random, on a connection of its pool: seen beside the lanes' 3.
		bound++
	}
	assert.LessOrEqual(t, most, bound)
	assert.Positive(t, most)
}

// ctLog records what is logged at error level.
type ctLog struct {
	watermill.LoggerAdapter
	mu    sync.Mutex
	lines [][2]string // message, error
}

func (l *ctLog) Error(msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, [2]string{msg, err.Error()})
}

func (l *ctLog) logged() [][2]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][2]string(nil), l.lines...)
}

// The application's own load takes every connection of the pool: the
// library says so and what to set, each kind of error once, Publish fails
// saying the same, and delivery recovers by itself once connections free
// up.
func TestConnections_PoolExhaustedByTheApplication(t *testing.T) {
	t.Parallel()
	needSingle(t, "it holds the connections of a *redis.Client's pool")
	// A pool of 2 the test can take whole, and a PoolTimeout of 300ms so
	// the test waits less: go-redis's defaults behave the same, slower.
	client := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 2, PoolTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	env := setupOn(t, client)
	log := &ctLog{LoggerAdapter: watermill.NopLogger{}}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g"}, log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	ch := subscribe(t, sub, env.topic)
	awaitIdleSubscriptions(t, newClient(t), env.topic, 1)

	// The application holds both connections.
	ctx := context.Background()
	var held []*redis.Conn
	for range 2 {
		c := client.Conn()
		require.NoError(t, c.Ping(ctx).Err())
		held = append(held, c)
	}
	err = env.pub.Publish(env.topic, newMessage("refused"))
	require.ErrorIs(t, err, redis.ErrPoolTimeout)
	assert.Contains(t, err.Error(), "all 2 connections of the Redis client's pool were in use for PoolTimeout (300ms)")
	assert.Contains(t, err.Error(), "raise the client's PoolSize")

	require.NoError(t, newPublisher(t, newClient(t)).Publish(env.topic, newMessage("m")))
	require.Eventually(t, func() bool { return len(log.logged()) > 0 }, 5*time.Second, 10*time.Millisecond,
		"the failing read is logged")
	time.Sleep(2 * time.Second) // failing reads retried meanwhile, not logged again
	nothing(t, ch, 0)

	for _, c := range held {
		require.NoError(t, c.Close())
	}
	receive(t, ch, 5*time.Second).Ack()
	logged := log.logged()
	t.Logf("logged while the pool was exhausted: %q", logged)
	// A kind is a message and its error, as the log limiter tells them
	// apart: the scheduler may fail in two of its steps (promote, trim),
	// whichever ran while the pool was taken.
	kinds := map[string]int{}
	for _, l := range logged {
		assert.Contains(t, l[1], "raise the client's PoolSize")
		kinds[l[0]+": "+l[1]]++
	}
	for kind, n := range kinds {
		assert.Equal(t, 1, n, "logged more than once: %s", kind)
	}
}

// ctPubSubConns counts the pub/sub connections of clients named name.
func ctPubSubConns(t *testing.T, admin redis.UniversalClient, name string) (ids []int64) {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	require.NoError(t, err)
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") || !strings.Contains(line, " flags=P ") {
			continue
		}
		var id int64
		_, err := fmt.Sscanf(line, "id=%d ", &id)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

// The hub of a client lives while a component uses it: a Subscriber and a
// Manager share its one pub/sub connection, and closing the last of them
// closes it.
func TestConnections_ReleasedWithTheLastComponent(t *testing.T) {
	t.Parallel()
	needSingle(t, "it reads one server's CLIENT LIST")
	env := setupNamed(t)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g"}, logger)
	require.NoError(t, err)
	ch := subscribe(t, sub, env.topic)
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: env.client, Topics: []string{env.topic}}, logger)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	<-mgr.Running()
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(20*time.Millisecond), "m")))
	receive(t, ch, 2*time.Second).Ack()
	assert.Len(t, ctPubSubConns(t, env.admin, env.name), 1, "one pub/sub connection for both")
	assert.True(t, redisdelay.HubShared(env.client))

	require.NoError(t, sub.Close())
	assert.True(t, redisdelay.HubShared(env.client), "the Manager still uses it")
	require.NoError(t, mgr.Close())
	// A Publisher announces its storage level through the hub (its lanes,
	// no pub/sub) from its first Publish until Close.
	assert.True(t, redisdelay.HubShared(env.client), "the Publisher still uses it")
	require.NoError(t, env.pub.Close())
	assert.False(t, redisdelay.HubShared(env.client))
	require.Eventually(t, func() bool { return len(ctPubSubConns(t, env.admin, env.name)) == 0 }, 2*time.Second, 10*time.Millisecond,
		"the pub/sub connection is closed with the last component")
}

// ctUnhashable wraps a client in a type that cannot be a map key (as an
// application's wrapper may): it gets a hub of its own, released on Close.
type ctUnhashable struct {
	redis.UniversalClient
	tags []string
}

func TestConnections_UnhashableClient(t *testing.T) {
	t.Parallel()
	env := setupOn(t, ctUnhashable{UniversalClient: newClient(t), tags: []string{"app"}})
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g"}, logger)
	require.NoError(t, err)
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("m")))
	receive(t, ch, 2*time.Second).Ack()
	require.NoError(t, sub.Close())
}

// Two key prefixes on one client, Redis refusing the channels of one (a
// Manager of it runs beside): the other's notifications keep working, also
// after the pub/sub connection was cut (go-redis then subscribes every
// channel again in one command, which Redis refuses whole for one refused
// channel).
func TestConnections_RefusedPrefixBesideAGrantedOne(t *testing.T) {
	t.Parallel()
	needSingle(t, "it creates Redis users and kills connections")
	granted, refused := uniquePrefix(), uniquePrefix()
	// The env's client is the admin: it creates the user, kills its
	// connections and publishes (the env's pub, under the granted prefix).
	env := setupPrefixed(t, granted)
	name := "ct-" + watermill.NewShortUUID()
	user := "ct-" + watermill.NewShortUUID()
	ctx := context.Background()
	require.NoError(t, env.client.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">pass", "~*", "&"+granted+":*", "+@all", "-@dangerous", "+info").Err())
	t.Cleanup(func() { _ = env.client.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	client := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "pass", ClientName: name})
	t.Cleanup(func() { _ = client.Close() })

	// A Manager of the refused prefix (it starts, and says what to grant).
	runManagerWithLogger(t, client, redisdelay.ManagerConfig{KeyPrefix: refused}, logger)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{KeyPrefix: granted, ConsumerGroup: "g", BlockTime: time.Minute})
	ch := subscribe(t, sub, env.topic)
	await := func(what string) {
		t.Helper()
		require.Eventually(t, func() bool {
			return env.client.Exists(ctx, store.Keys{Prefix: granted}.Shard(env.topic, 0).Bell()).Val() == 1
		}, 5*time.Second, 5*time.Millisecond, "the subscription waits")
		start := time.Now()
		require.NoError(t, env.pub.Publish(env.topic, newMessage(what)))
		receive(t, ch, time.Second).Ack()
		t.Logf("FIGURE %s: received %s after", what, time.Since(start).Round(time.Microsecond))
	}
	await("before the cut")
	time.Sleep(2 * probeWait) // the refusal was found and its channels held back
	for _, id := range ctPubSubConns(t, env.client, name) {
		require.NoError(t, env.client.Do(ctx, "CLIENT", "KILL", "ID", id).Err())
	}
	time.Sleep(300 * time.Millisecond) // go-redis reconnects and subscribes again
	await("after the cut")
}

// probeWait is how long a refused grant takes to be found at most (a
// probe, every second while refused).
const probeWait = time.Second

// A *redis.Ring of two shards: a script's PUBLISH reaches only the
// subscribers of its shard, so notifications are not used: the Subscriber
// says so once and its idle subscriptions read every 100ms, its scheduler
// ticks every CheckInterval. Messages, immediate and delayed, come all the
// same.
func TestConnections_RingPolls(t *testing.T) {
	t.Parallel()
	a, b := redistest.ForTest(t, redistest.Options{}), redistest.ForTest(t, redistest.Options{})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	env := setupOn(t, ring)
	log := &ctLog{LoggerAdapter: watermill.NopLogger{}}
	// A short CheckInterval: without wake-ups the scheduler ticks at it.
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g", CheckInterval: 100 * time.Millisecond}, log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	for i := range 4 {
		tp := topic()
		ch := subscribe(t, sub, tp)
		msg := newMessage("m")
		if i%2 == 1 {
			delay.Message(msg, delay.For(50*time.Millisecond))
		}
		start := time.Now()
		require.NoError(t, env.pub.Publish(tp, msg))
		receive(t, ch, 2*time.Second).Ack()
		t.Logf("FIGURE on a Ring, delayed %t: received %s after", i%2 == 1, time.Since(start).Round(time.Millisecond))
	}
	var ringLines int
	for _, l := range log.logged() {
		if strings.Contains(l[1], "*redis.Ring") {
			ringLines++
		}
	}
	assert.Equal(t, 2, ringLines, "said once by the Subscriber and once by its scheduler: %q", log.logged())
}
