package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
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

// The dashboard's server bounds what a client may hold: a request must
// arrive whole within uiReadTimeout (a client that declares a body and
// never sends it is cut off), an answer is written within uiWriteTimeout
// (past the dashboard's own 15 s bound on Redis work), and a kept-alive
// connection idle for uiIdleTimeout is closed (also after a 401).
// Variables for the tests.
var (
	uiReadHeaderTimeout = 10 * time.Second
	uiReadTimeout       = 30 * time.Second
	uiWriteTimeout      = 60 * time.Second
	uiIdleTimeout       = 60 * time.Second
)

// uiMaxHeaderBytes bounds the request line and headers (net/http's default
// is 1 MiB; the dashboard's requests need a few KiB).
const uiMaxHeaderBytes = 64 << 10

// newUIServer is the dashboard's http.Server.
func newUIServer(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: uiReadHeaderTimeout,
		ReadTimeout:       uiReadTimeout,
		WriteTimeout:      uiWriteTimeout,
		IdleTimeout:       uiIdleTimeout,
		MaxHeaderBytes:    uiMaxHeaderBytes,
		ErrorLog:          errorLog,
	}
}

// cmdUI serves the dashboard until the context ends (Ctrl-C, SIGTERM).
func cmdUI(e *env, _ []string) error {
	f := e.flags
	users, tokens, sources, err := uiCredentials(f, e.opts.getenv)
	if err != nil {
		return usagef(lookup("ui"), "ui: %v", err)
	}
	auth := len(users) > 0 || len(tokens) > 0
	logger := slog.New(slog.NewTextHandler(e.stderr, nil))
	opts := dashboard.Options{ReadOnly: f.readOnly, BasicAuth: users, BearerTokens: tokens, Logger: logger}
	if err := opts.Validate(); err != nil {
		return usagef(lookup("ui"), "ui: %v", strings.TrimPrefix(err.Error(), "dashboard: "))
	}
	var tlsConfig *tls.Config
	if f.uiTLSCert != "" || f.uiTLSKey != "" {
		if tlsConfig, err = uiTLS(f.uiTLSCert, f.uiTLSKey); err != nil {
			return usagef(lookup("ui"), "ui: %v", err)
		}
	}
	for _, h := range f.allowedHosts {
		if h == "*" {
			fmt.Fprintln(e.stderr, "redisdelay: warning: --allowed-host '*' turns off the Host check against DNS rebinding: a page of any site "+
				"whose name its owner points at this address can read the dashboard and act on it. Use it only behind a proxy that forwards "+
				"only the dashboard's own name; otherwise give the names you open the dashboard with")
		}
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("redisdelay: cannot listen on --addr-listen %s: %v", f.listen, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() {
		switch {
		case !auth && !f.insecure:
			// Read-only is no excuse: it still shows every payload to
			// whoever reaches the address.
			_ = ln.Close()
			what := "could read the payloads and cancel, reschedule, run, requeue or delete messages"
			if f.readOnly {
				what = "could read every payload, read-only or not"
			}
			return usagef(lookup("ui"), "ui: --addr-listen %s is not a loopback address, and the dashboard would have no login: anyone who reaches it "+
				"%s. Give it users (--basic-auth-file, or $%s) or tokens (--token-file, or $%s); or --insecure if something else protects it "+
				"(a firewall, an authenticating proxy)",
				f.listen, what, basicAuthEnv, tokenEnv)
		case !auth:
			fmt.Fprintf(e.stderr, "redisdelay: warning: --addr-listen %s is not a loopback address and the dashboard has no login (--insecure): anyone who can reach it can see the payloads%s\n",
				f.listen, map[bool]string{false: " and act on messages, groups and schedules", true: " (read-only)"}[f.readOnly])
		}
		if auth && tlsConfig == nil {
			fmt.Fprintln(e.stderr, "redisdelay: note: the dashboard serves plain http: beyond a trusted network, serve https (--ui-tls-cert, --ui-tls-key) or put a TLS-terminating proxy in front, as credentials travel with every request")
		}
	}
	opts.AllowedHosts = append(listenHosts(addr.IP, addr.Port), f.allowedHosts...)
	srv := newUIServer(dashboard.New(e.insp, opts), slog.NewLogLogger(logger.Handler(), slog.LevelWarn))
	mode := ""
	if f.readOnly {
		mode = " (read-only)"
	}
	if auth {
		mode += " (login: " + strings.Join(sources, ", ") + ")"
	}
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
		srv.TLSConfig = tlsConfig
	}
	fmt.Fprintf(e.stdout, "dashboard of %s on %s://%s/%s; Ctrl-C to stop\n", e.opts.target(), scheme, addr, mode)
	done := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			done <- srv.ServeTLS(ln, "", "")
			return
		}
		done <- srv.Serve(ln)
	}()
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

// uiTLS loads the dashboard's certificate and key, refusing a key file
// others may read.
func uiTLS(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--ui-tls-cert and --ui-tls-key go together: give the dashboard's certificate and its private key")
	}
	if err := privateFile("--ui-tls-key", keyFile); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--ui-tls-cert/--ui-tls-key: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

// privateFile refuses a file of secrets that its group or others may read
// or write, as ssh refuses such a private key: whoever else can read it
// has the dashboard's logins. Windows has no such mode bits.
func privateFile(flagName, path string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if mode := fi.Mode().Perm(); mode&0o077 != 0 {
		return fmt.Errorf("%s %s is accessible by group or others (mode %04o), so other users of the machine may read the secrets in it: "+
			"make it private with chmod 600 %s", flagName, path, mode, path)
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
		if err := privateFile("--basic-auth-file", f.basicAuthFile); err != nil {
			return nil, nil, nil, err
		}
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
		if err := privateFile("--token-file", f.tokenFile); err != nil {
			return nil, nil, nil, err
		}
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
// machine when it listens on all of them, each with the port it listens
// on. An address is no rebinding risk (a page of another site has a name),
// and loopback is allowed anyway. The port counts: the dashboard also
// trusts these as the Origin of its forms, and without a port that would
// be every port of the address, any other server of the machine.
func listenHosts(ip net.IP, port int) []string {
	p := strconv.Itoa(port)
	if !ip.IsUnspecified() {
		return []string{net.JoinHostPort(ip.String(), p)}
	}
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, net.JoinHostPort(n.IP.String(), p))
		}
	}
	return out
}
