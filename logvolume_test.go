package redisdelay_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// countingLogger records the Error and Info lines logged.
type countingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *countingLogger) add(msg string, err error) {
	if err != nil {
		msg += ": " + err.Error()
	}
	l.mu.Lock()
	l.lines = append(l.lines, msg)
	l.mu.Unlock()
}
func (l *countingLogger) Error(msg string, err error, _ watermill.LogFields) { l.add(msg, err) }
func (l *countingLogger) Info(msg string, _ watermill.LogFields)             { l.add(msg, nil) }
func (l *countingLogger) Debug(string, watermill.LogFields)                  {}
func (l *countingLogger) Trace(string, watermill.LogFields)                  {}
func (l *countingLogger) With(watermill.LogFields) watermill.LoggerAdapter   { return l }

// since returns the lines logged after the first n.
func (l *countingLogger) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[n:]...)
}

func (l *countingLogger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// While Redis is down, a Subscriber of 20 topics (with its scheduler) logs
// a bounded number of lines, not some per topic per second: repeats of an
// error are counted and logged again every so often.
func TestLogVolume_WhileRedisDown(t *testing.T) {
	t.Parallel()
	proxy := newFaultProxy(t)
	env := setupOn(t, proxy.client(t))
	log := &countingLogger{}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g",
		CheckInterval: 200 * time.Millisecond, BlockTime: 100 * time.Millisecond}, log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	const topics = 20
	for range topics {
		subscribe(t, sub, topic())
	}
	time.Sleep(500 * time.Millisecond)
	before := log.count()
	proxy.cut(0)
	const window = 6 * time.Second
	time.Sleep(window)
	lines := log.since(before)
	kinds := map[string]int{}
	for _, l := range lines {
		kinds[l]++
	}
	t.Logf("%d lines in %s with Redis down and %d topics (%.1f/s); by kind: %v", len(lines), window, topics,
		float64(len(lines))/window.Seconds(), kinds)
	assert.LessOrEqual(t, len(lines), 20, "log lines while Redis is down must not grow with the topics")
	proxy.restore(t)
}

// A Subscriber whose go-redis client was closed under it stops: its
// channel closes and the cause is logged once.
func TestLogVolume_ClosedClientEndsSubscription(t *testing.T) {
	env := setupOn(t, openClient(""))
	log := &countingLogger{}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g",
		CheckInterval: 200 * time.Millisecond, BlockTime: 100 * time.Millisecond}, log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	ch := subscribe(t, sub, env.topic)
	ch2 := subscribe(t, sub, topic())
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, env.client.Close())
	for _, c := range []<-chan *message.Message{ch, ch2} {
		select {
		case _, ok := <-c:
			require.False(t, ok, "no message expected")
		case <-time.After(5 * time.Second):
			t.Fatal("the subscription's channel stayed open after its client was closed")
		}
	}
	time.Sleep(500 * time.Millisecond) // nothing keeps retrying
	var closed []string
	for _, l := range log.since(0) {
		if strings.Contains(l, "client was closed") {
			closed = append(closed, l)
		}
	}
	t.Logf("logged after the close: %q", log.since(0))
	assert.Len(t, closed, 1, "the cause is logged once")
	assert.LessOrEqual(t, log.count(), 3, "no retries logged")
	n := log.count()
	time.Sleep(time.Second)
	assert.Equal(t, n, log.count(), "nothing logged once stopped")
}

// A Manager whose client is closed under it stops Run with an error.
func TestLogVolume_ClosedClientEndsManager(t *testing.T) {
	env := setupOn(t, openClient(""))
	log := &countingLogger{}
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: env.client, Topics: []string{env.topic},
		CheckInterval: 100 * time.Millisecond}, log)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- mgr.Run(context.Background()) }()
	<-mgr.Running()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, env.client.Close())
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "client was closed")
	case <-time.After(5 * time.Second):
		_ = mgr.Close()
		t.Fatalf("Run kept going after its client was closed; logged: %q", log.since(0))
	}
	assert.LessOrEqual(t, log.count(), 2, "logged: %q", log.since(0))
}
