package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/redisdelay/watermill-redisdelay/dashboard"
)

// The dashboard's credentials come from a file or the environment, never
// from the command line, where other users of the machine read them in the
// process list.
const (
	basicAuthEnv = "REDISDELAY_UI_BASIC_AUTH" // user:password
	tokenEnv     = "REDISDELAY_UI_TOKEN"
)

// cmdUI serves the dashboard until the context ends (Ctrl-C, SIGTERM).
func cmdUI(e *env, _ []string) error {
	f := e.flags
	users, tokens, sources, err := uiCredentials(f, e.opts.getenv)
	if err != nil {
		return usagef(lookup("ui"), "ui: %v", err)
	}
	auth := len(users) > 0 || len(tokens) > 0
	opts := dashboard.Options{ReadOnly: f.readOnly, BasicAuth: users, BearerTokens: tokens}
	if err := opts.Validate(); err != nil {
		return usagef(lookup("ui"), "ui: %v", strings.TrimPrefix(err.Error(), "dashboard: "))
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("redisdelay: cannot listen on --addr-listen %s: %v", f.listen, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() {
		switch {
		case !auth && !f.readOnly && !f.insecure:
			_ = ln.Close()
			return usagef(lookup("ui"), "ui: --addr-listen %s is not a loopback address, and the dashboard would have no login: anyone who reaches it "+
				"could read the payloads and cancel, reschedule, run, requeue or delete messages. Give it users (--basic-auth-file, or $%s) or "+
				"tokens (--token-file, or $%s), or --read-only; or --insecure if something else protects it (a firewall, an authenticating proxy)",
				f.listen, basicAuthEnv, tokenEnv)
		case !auth:
			fmt.Fprintf(e.stderr, "redisdelay: warning: --addr-listen %s is not a loopback address and the dashboard has no login: anyone who can reach it can see the payloads%s\n",
				f.listen, map[bool]string{false: " and act on messages, groups and schedules (--insecure)", true: " (read-only)"}[f.readOnly])
		}
		if auth {
			fmt.Fprintln(e.stderr, "redisdelay: note: the dashboard serves plain http: beyond a trusted network, put a TLS-terminating proxy in front, as credentials travel with every request")
		}
	}
	opts.AllowedHosts = append(listenHosts(addr.IP), f.allowedHosts...)
	srv := &http.Server{Handler: dashboard.New(e.insp, opts), ReadHeaderTimeout: 10 * time.Second}
	mode := ""
	if f.readOnly {
		mode = " (read-only)"
	}
	if auth {
		mode += " (login: " + strings.Join(sources, ", ") + ")"
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

// uiCredentials reads the dashboard's users and tokens from the files
// given and the environment, and says where they came from.
func uiCredentials(f *cmdFlags, getenv func(string) string) (users map[string]string, tokens, sources []string, err error) {
	users = map[string]string{}
	addUser := func(line, where string) error {
		user, pw, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("%s: %q is not user:password", where, strings.Repeat("*", len(line)))
		}
		if _, dup := users[user]; dup {
			return fmt.Errorf("%s: user %q is given twice", where, user)
		}
		users[user] = pw
		return nil
	}
	if v := getenv(basicAuthEnv); v != "" {
		if err := addUser(v, "$"+basicAuthEnv); err != nil {
			return nil, nil, nil, err
		}
		sources = append(sources, "$"+basicAuthEnv)
	}
	if f.basicAuthFile != "" {
		n := 0
		if err := eachLine(f.basicAuthFile, func(line string, at int) error {
			n++
			return addUser(line, fmt.Sprintf("--basic-auth-file %s, line %d", f.basicAuthFile, at))
		}); err != nil {
			return nil, nil, nil, err
		}
		if n == 0 {
			return nil, nil, nil, fmt.Errorf("--basic-auth-file %s holds no user: write lines user:password", f.basicAuthFile)
		}
		sources = append(sources, fmt.Sprintf("%d user(s) of %s", n, f.basicAuthFile))
	}
	if v := strings.TrimSpace(getenv(tokenEnv)); v != "" {
		tokens = append(tokens, v)
		sources = append(sources, "$"+tokenEnv)
	}
	if f.tokenFile != "" {
		n := 0
		if err := eachLine(f.tokenFile, func(line string, _ int) error {
			n++
			tokens = append(tokens, line)
			return nil
		}); err != nil {
			return nil, nil, nil, err
		}
		if n == 0 {
			return nil, nil, nil, fmt.Errorf("--token-file %s holds no token: write one a line", f.tokenFile)
		}
		sources = append(sources, fmt.Sprintf("%d token(s) of %s", n, f.tokenFile))
	}
	return users, tokens, sources, nil
}

// eachLine calls fn with each line of a file that is not blank nor a
// comment (#), trimmed, and its number.
func eachLine(path string, fn func(line string, at int) error) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for at := 1; sc.Scan(); at++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(line, at); err != nil {
			return err
		}
	}
	return sc.Err()
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
