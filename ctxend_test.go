package redisdelay_test

// A subscription ended by its context, the Subscriber never closed: a
// Router stopped through its context, then the program returning from
// main (as the README's quick start did before it closed its Subscriber).

import (
	"context"
	"fmt"
	"log"
	"os"
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
)

// lateCommands is a go-redis hook recording the commands of a client that
// finish once mark was called: commands in flight then, or sent after.
type lateCommands struct {
	at    atomic.Int64 // UnixNano of the mark; 0 before
	mu    sync.Mutex
	names []string
}

func (l *lateCommands) mark() { l.at.Store(time.Now().UnixNano()) }

func (l *lateCommands) note(cmds ...redis.Cmder) {
	if at := l.at.Load(); at == 0 || time.Now().UnixNano() < at {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cmds {
		name := c.Name()
		if args := c.Args(); len(args) > 1 && (name == "evalsha" || name == "eval") && len(args) > 3 {
			name += fmt.Sprintf(" %v", args[3]) // its first key
		} else if len(args) > 1 {
			name += fmt.Sprintf(" %v", args[1])
		}
		l.names = append(l.names, name)
	}
}

func (l *lateCommands) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.names...)
}

func (l *lateCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lateCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		l.note(cmd)
		return err
	}
}

func (l *lateCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		l.note(cmds...)
		return err
	}
}

// redisLog captures go-redis's own log lines (the process-wide logger:
// the tests using it do not run in parallel) until the test ends.
type redisLog struct {
	mu    sync.Mutex
	lines []string
}

func (r *redisLog) Printf(_ context.Context, format string, v ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, v...))
}

func (r *redisLog) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := r.lines
	r.lines = nil
	return lines
}

func captureRedisLog(t *testing.T) *redisLog {
	r := &redisLog{}
	redis.SetLogger(r)
	t.Cleanup(func() { redis.SetLogger(stderrRedisLog{log.New(os.Stderr, "redis: ", log.LstdFlags|log.Lshortfile)}) })
	return r
}

// stderrRedisLog is go-redis's default logger, put back after a capture.
type stderrRedisLog struct{ l *log.Logger }

func (s stderrRedisLog) Printf(_ context.Context, format string, v ...any) {
	_ = s.l.Output(2, fmt.Sprintf(format, v...))
}

// ctxEndedRun runs a Router with a handler on a Subscriber of client,
// waits until it handled a delayed message (so the topic's scheduler loop
// works and holds the lease), then cancels the Router's context and
// returns once Run returned. The Subscriber is not closed.
func ctxEndedRun(t *testing.T, client redis.UniversalClient, tp string, logs watermill.LoggerAdapter) *redisdelay.Subscriber {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, logs)
	require.NoError(t, err)
	defer pub.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "g"}, logs)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{}, logs)
	require.NoError(t, err)
	handled := make(chan struct{}, 1)
	router.AddNoPublisherHandler("h", tp, sub, func(*message.Message) error {
		select {
		case handled <- struct{}{}:
		default:
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	<-router.Running()
	require.NoError(t, pub.Publish(tp, delayed(delay.For(50*time.Millisecond), "x")))
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the delayed message was not handled")
	}
	cancel()
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Router.Run did not return")
	}
	return sub
}

// When Router.Run returns after its context ended, the topic's scheduling
// lease is released and nothing of the Subscriber talks to Redis any more:
// no command is in flight or sent after, so closing the client at once is
// quiet (no go-redis "conn state changed" line, no closed-client error).
// The leak was a race (the lease was left in 4 rounds of 30), hence the
// rounds.
func TestLifecycle_ContextEndedSubscriptionLeavesNothing(t *testing.T) {
	redisLines := captureRedisLog(t)
	env := setup(t)
	for round := range 30 {
		client := openClient("")
		late := &lateCommands{}
		client.AddHook(late)
		// recLogger, not watermill's capture logger: the Router may still
		// log (Info) after Run returned, and reading the capture logger's
		// map then is a data race.
		logs := &recLogger{}
		tp := topic()
		sub := ctxEndedRun(t, client, tp, logs)
		late.mark()

		n, err := env.client.Exists(context.Background(), shardKey(tp, 0, "lease")).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "round %d: the scheduling lease is left in Redis", round)
		require.NoError(t, client.Close())
		assert.Empty(t, late.list(), "round %d: commands in flight or sent after Router.Run returned", round)
		assert.Zero(t, redisdelay.SchedulerLoops(sub), "round %d: scheduler loops left", round)

		require.NoError(t, sub.Close()) // on the closed client: quiet too
		assert.Empty(t, late.list(), "round %d: commands sent by Close", round)
		for _, l := range logs.logged() {
			t.Errorf("round %d: logged %q", round, l)
		}
		for _, l := range redisLines.take() {
			t.Errorf("round %d: go-redis logged %q", round, l)
		}
		if t.Failed() {
			return
		}
	}
}

// A new process's first due message after such an exit is on time: the
// lease was released, so the new scheduler takes it at once instead of
// waiting for it to expire (1.5 × CheckInterval: 3 s by default). Each
// round's first process closes its client right after Run returned, as a
// program returning from main would end its connections.
func TestLifecycle_RestartAfterContextEndIsOnTime(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		env := setup(t)
		client := openClient("")
		old := ctxEndedRun(t, client, env.topic, logger)
		require.NoError(t, client.Close())
		_ = old.Close()

		due := time.Now().Add(300 * time.Millisecond)
		require.NoError(t, env.pub.Publish(env.topic, delayed(delay.Until(due), "after the restart")))
		sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
		msg := receive(t, subscribe(t, sub, env.topic), 10*time.Second)
		late := time.Since(due)
		msg.Ack()
		// Generous for a busy CI host, well under the lease's 3 s.
		assert.Less(t, late, time.Second, "round %d: the first due message was %s late", round, late)
		require.NoError(t, sub.Close())
	}
}

// While Redis refuses the client the notification channels, the Subscriber
// probes the grant every second; that too ends with its last subscription,
// however it ended (here its context), not only at Close.
func TestLifecycle_ContextEndedSubscriptionStopsProbingChannels(t *testing.T) {
	t.Parallel()
	needSingle(t, "it creates Redis users")
	env := setup(t)
	restricted, _ := newACLUser(t, "~"+redisdelay.DefaultKeyPrefix+":*", "resetchannels", "+@all", "-@dangerous")
	late := &lateCommands{}
	restricted.AddHook(late)
	// Registering a topic tells the Managers on a channel: done by a
	// user who may.
	require.NoError(t, newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"}).SubscribeInitialize(env.topic))
	logs := &recLogger{}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: restricted, ConsumerGroup: "g", DisableScheduler: true}, logs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, env.topic)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(logs.logged()) > 0 }, 5*time.Second, 10*time.Millisecond,
		"the refusal of the channels was not logged")
	cancel()
	for range ch {
	}
	late.mark()
	time.Sleep(2500 * time.Millisecond) // over two probe periods (store.ProbeEvery)
	assert.Empty(t, late.list(), "commands sent after the subscription ended")
}
