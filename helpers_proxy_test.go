package redisdelay_test

// TCP proxies in front of the test server: faultProxy cuts and stalls
// connections (outages), gateProxy holds what clients send (a Publish call
// kept in flight, for the capacity tests of Publish).

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// faultProxy is a TCP proxy to the test server that can refuse connections
// (cut), swallow traffic (stall) and come back (restore), so clients lose
// Redis while the shared server keeps running for the other tests.
type faultProxy struct {
	target, addr string

	mu      sync.Mutex
	ln      net.Listener // nil while cut
	stalled bool
	pipes   map[*proxyPipe]struct{}
	held    map[net.Conn]struct{} // client connections that get no answer
}

type proxyPipe struct{ down, up net.Conn }

// newFaultProxy starts a faultProxy to the test server, closed when the
// test ends.
func newFaultProxy(t *testing.T) *faultProxy {
	needSingle(t, "it cuts and stalls connections through a TCP proxy in front of the test server")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &faultProxy{target: redisAddr, addr: ln.Addr().String(), ln: ln,
		pipes: map[*proxyPipe]struct{}{}, held: map[net.Conn]struct{}{}}
	go p.accept(ln)
	t.Cleanup(func() { p.cut(0) })
	return p
}

// client returns a go-redis client through the proxy, with default options.
func (p *faultProxy) client(t *testing.T) *redis.Client {
	return p.clientWith(t, redis.Options{})
}

// clientWith returns a go-redis client through the proxy with opts.
func (p *faultProxy) clientWith(t *testing.T, opts redis.Options) *redis.Client {
	opts.Addr = p.addr
	c := redis.NewClient(&opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (p *faultProxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *faultProxy) serve(down net.Conn) {
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
	pipe := &proxyPipe{down: down, up: up}
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
func (p *faultProxy) cut(linger time.Duration) {
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
	p.pipes, p.held, p.stalled = map[*proxyPipe]struct{}{}, map[net.Conn]struct{}{}, false
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
func (p *faultProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	for pipe := range p.pipes {
		_ = pipe.up.Close()
		p.held[pipe.down] = struct{}{}
	}
	p.pipes = map[*proxyPipe]struct{}{}
}

func (p *faultProxy) restore(t *testing.T) {
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

// isUnreachableCause reports whether err wraps a network or context error:
// the cause of a failed call to an unreachable Redis.
func isUnreachableCause(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.Is(err, io.EOF)
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

func newGateProxy(t *testing.T) *gateProxy {
	needSingle(t, "it holds replies in a TCP proxy in front of the test server")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &gateProxy{addr: ln.Addr().String(), gate: make(chan struct{})}
	close(p.gate)
	var conns sync.Map
	t.Cleanup(func() {
		_ = ln.Close()
		p.open()
		conns.Range(func(k, _ any) bool { _ = k.(net.Conn).Close(); return true })
	})
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", redisAddr)
			if err != nil {
				_ = down.Close()
				continue
			}
			conns.Store(down, nil)
			conns.Store(up, nil)
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := down.Read(buf)
					if n > 0 {
						p.mu.Lock()
						g := p.gate
						p.mu.Unlock()
						p.held.Add(1)
						<-g
						p.held.Add(-1)
						if _, werr := up.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = up.Close()
						return
					}
				}
			}()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 {
						if _, werr := down.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = down.Close()
						return
					}
				}
			}()
		}
	}()
	return p
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
	loadPublishScripts(t, pub)
	counter := &scriptCounter{}
	client.AddHook(counter)
	return pub, proxy, counter
}

// gatedEnv is an env whose pub is a gatedPublisher of its topic: the tests
// of Publish calls queued behind round trips in flight start with it.
type gatedEnv struct {
	*env
	proxy   *gateProxy
	counter *scriptCounter
}

// setupGated returns a test's env with a gatedPublisher of config as pub.
func setupGated(t *testing.T, config redisdelay.PublisherConfig) *gatedEnv {
	t.Helper()
	e := setup(t)
	pub, proxy, counter := gatedPublisher(t, e.topic, config)
	e.pub = pub
	return &gatedEnv{env: e, proxy: proxy, counter: counter}
}

// loadPublishScripts has Redis load every script a Publish may run
// (publish.lua and the short ones for plain messages: see store.Publish),
// publishing a message of each kind to a topic of its own, so that the
// test's first Publish of each kind runs its script once (no NOSCRIPT and
// EVAL).
func loadPublishScripts(t *testing.T, pub *redisdelay.Publisher) {
	t.Helper()
	warm := topic()
	for _, d := range []time.Duration{0, time.Second, time.Hour} {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		if d > 0 {
			delay.Message(msg, delay.For(d))
		}
		require.NoError(t, pub.Publish(warm, msg))
	}
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

// twoInFlight holds the gate and starts two Publish calls of an immediate
// message each, returning once both round trips are held: a Publisher
// keeps at most two in flight per topic, so later calls queue.
func twoInFlight(t *testing.T, proxy *gateProxy, pub *redisdelay.Publisher, topic string) (<-chan error, <-chan error) {
	t.Helper()
	proxy.hold()
	publish := func() error { return pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("in flight"))) }
	return inFlight(t, proxy, publish), inFlight(t, proxy, publish)
}
