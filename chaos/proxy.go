package main

import (
	"io"
	"net"
	"sync"
	"time"
)

// proxy forwards loopback TCP connections to Redis, so the driver can cut
// every connection of its children (and of its publisher) at once. While
// cut, it accepts and immediately closes new connections: clients see their
// dials fail, as with a network partition that resets connections.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	down  bool
	wg    sync.WaitGroup
}

func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *proxy) handle(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil { // Redis is down (being restarted)
		_ = c.Close()
		return
	}
	if !p.track(c, s) {
		_ = c.Close()
		_ = s.Close()
		return
	}
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = c.Close()
			_ = s.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, s)
			p.mu.Unlock()
		})
	}
	go func() {
		_, _ = io.Copy(s, c)
		closeBoth()
	}()
	_, _ = io.Copy(c, s)
	closeBoth()
}

// track registers a connection pair unless the proxy was cut meanwhile.
func (p *proxy) track(c, s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	p.conns[s] = struct{}{}
	return true
}

// cut closes every connection and refuses new ones until restore.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *proxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.cut()
}
