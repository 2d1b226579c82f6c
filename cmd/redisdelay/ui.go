package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/redisdelay/watermill-redisdelay/dashboard"
)

// cmdUI serves the dashboard until the context ends (Ctrl-C, SIGTERM).
func cmdUI(e *env, _ []string) error {
	f := e.flags
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("redisdelay: cannot listen on --addr-listen %s: %v", f.listen, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() {
		fmt.Fprintf(e.stderr, "redisdelay: warning: --addr-listen %s is not a loopback address and the dashboard has no login: anyone who can reach it can see the payloads%s\n",
			f.listen, map[bool]string{false: " and cancel, reschedule, requeue or delete messages and pause groups and schedules", true: ""}[f.readOnly])
	}
	srv := &http.Server{
		Handler:           dashboard.New(e.insp, dashboard.Options{ReadOnly: f.readOnly, AllowedHosts: append(listenHosts(addr.IP), f.allowedHosts...)}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	mode := ""
	if f.readOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(e.stdout, "dashboard of %s on http://%s/%s; Ctrl-C to stop\n", e.opts.target(), addr, mode)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("redisdelay: dashboard stopped: %v", err)
	case <-e.ctx.Done():
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// listenHosts are the Hosts the dashboard answers to without
// --allowed-host: the address it listens on, or every address of the
// machine when it listens on all of them. An address is no rebinding risk
// (a page of another site has a name), and loopback is allowed anyway.
func listenHosts(ip net.IP) []string {
	if !ip.IsUnspecified() {
		return []string{ip.String()}
	}
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP.String())
		}
	}
	return out
}
