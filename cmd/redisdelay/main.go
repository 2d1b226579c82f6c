// Command redisdelay shows what the topics of watermill-redisdelay hold and
// lets an operator act on them: list topics, count messages (and see when
// no scheduler moves them), list a group's messages in every state and its
// consumers, show the Redis server, measure throughput, check health,
// search messages by metadata, business key or time, cancel, reschedule or
// run delayed messages now, requeue, delete or purge dead letters (one, or
// all a filter selects), delete a group, or serve all that as a web
// dashboard ("ui", with a login from a file or the environment).
//
//	redisdelay [flags] <command> [arguments]
//
// It connects to one server (--addr, --db), a Redis Cluster (--cluster) or
// a master found through Sentinels (--sentinel, --master), as an ACL user
// (--user; the password from $REDISDELAY_PASSWORD), over TLS if asked
// (--tls, --tls-ca, --tls-cert, --tls-key). "show" and --payload print
// payloads, escaped or as a hex dump.
//
// Run "redisdelay -h" for the commands and flags, "redisdelay --version"
// for the build. Exit status: 0 done, 1 operational error (Redis
// unreachable, unknown topic, ...), 2 usage error, 3 not found (show,
// cancel, reschedule or run-now of a message that is not there).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// quietLogger drops go-redis's own log lines (pool dial failures): the
// command reports the error itself, once.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // operational: Redis unreachable, unknown topic, a library error
	exitUsage = 2 // bad flags or arguments
	// exitNotFound: the message (or group) the command names is not
	// there, so a script can tell a typo or a message gone from a failure.
	exitNotFound = 3
)

// notFoundError is a command's "no such message" (or group): exit status
// exitNotFound, with its message on stderr.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

func notFoundf(format string, args ...any) error {
	return &notFoundError{msg: fmt.Sprintf(format, args...)}
}

// errNotFound is the not found of a command that printed its own report
// (on stdout, as its JSON or its "not cancelled: ..." line): exit status
// exitNotFound, nothing more printed.
var errNotFound = &notFoundError{}

const defaultAddr = "127.0.0.1:6379"

// options are the global flags; every command accepts them too, before or
// after its own arguments.
type options struct {
	url      string
	addr     string
	cluster  string
	sentinel string
	master   string
	db       int
	user     string
	password string
	prefix   string
	json     bool
	timeout  time.Duration
	version  bool

	tls         bool
	tlsCA       string
	tlsCert     string
	tlsKey      string
	tlsInsecure bool

	// getenv reads the environment (os.Getenv; tests replace it).
	getenv func(string) string
	// tlsConfig is built by check from the --tls flags; nil without TLS.
	tlsConfig *tls.Config
	// urlOpts is --url (or $REDISDELAY_URL) as go-redis's ParseURL read
	// it, set by check; nil without a URL. from names where the URL or
	// the address came from, for messages: "--url", "$REDISDELAY_URL",
	// "$REDISDELAY_ADDR", or "" (--addr, or the default).
	urlOpts *redis.Options
	from    string
}

func newOptions() *options {
	return &options{addr: defaultAddr, prefix: redisdelay.DefaultKeyPrefix, timeout: 10 * time.Second, getenv: os.Getenv}
}

func (o *options) register(fs *flag.FlagSet) {
	// The current values are the defaults, so registering the flags again on
	// a command's flag set keeps what the global flags set.
	fs.StringVar(&o.url, "url", o.url, "Redis `URL`, redis://[user[:password]@]host[:port][/db] or rediss:// for TLS (instead of --addr; default $REDISDELAY_URL); prefer the password in $REDISDELAY_PASSWORD")
	fs.StringVar(&o.addr, "addr", o.addr, "Redis `address` (host:port; default $REDISDELAY_ADDR, else 127.0.0.1:6379)")
	fs.StringVar(&o.cluster, "cluster", o.cluster, "comma-separated seed `addresses` of a Redis Cluster (instead of --addr)")
	fs.StringVar(&o.sentinel, "sentinel", o.sentinel, "comma-separated `addresses` of Redis Sentinels (instead of --addr; with --master)")
	fs.StringVar(&o.master, "master", o.master, "`name` of the master the Sentinels monitor")
	fs.IntVar(&o.db, "db", o.db, "logical database `number` (not with --cluster)")
	fs.StringVar(&o.user, "user", o.user, "ACL user `name` (default: the default user)")
	fs.StringVar(&o.password, "password", o.password, "`password`; prefer $REDISDELAY_PASSWORD, which other users cannot see in the process list")
	fs.BoolVar(&o.tls, "tls", o.tls, "connect with TLS (implied by the other --tls flags)")
	fs.StringVar(&o.tlsCA, "tls-ca", o.tlsCA, "PEM `file` of the CA certificates to verify the server with (default: the system's)")
	fs.StringVar(&o.tlsCert, "tls-cert", o.tlsCert, "PEM `file` of the client certificate, for servers that verify clients (with --tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", o.tlsKey, "PEM `file` of the client certificate's private key")
	fs.BoolVar(&o.tlsInsecure, "tls-insecure", o.tlsInsecure, "do not verify the server's certificate (INSECURE: for tests only)")
	fs.BoolVar(&o.version, "version", o.version, "print the version and exit")
	fs.StringVar(&o.prefix, "prefix", o.prefix, "key `prefix` of the Publishers and Subscribers")
	fs.BoolVar(&o.json, "json", o.json, "machine-readable JSON output")
	durationVar(fs, &o.timeout, "timeout", o.timeout, "bound on the whole command, including connecting (a bulk action's run: on each batch of 1,000 messages)")
}

// target names the Redis deployment in messages, credentials redacted
// (the ui prints it in its banner).
func (o *options) target() string {
	switch {
	case o.cluster != "":
		return o.redact("Redis Cluster (seeds " + o.cluster + ")")
	case o.sentinel != "":
		return o.redact(fmt.Sprintf("Redis master %q (Sentinels %s)", o.master, o.sentinel))
	case o.urlOpts != nil:
		// The address only: the URL may hold a password.
		return "Redis at " + o.urlOpts.Addr + " (from " + o.from + ")"
	case o.from != "":
		return o.redact("Redis at " + o.addr + " (from " + o.from + ")")
	}
	return o.redact("Redis at " + o.addr)
}

// passwordInURL matches the password of a URL's user information, to
// redact it from messages.
// It runs to the last "@" of the word, so a password holding "/" or ":"
// (which does not parse) is still hidden; hiding too much is harmless.
var passwordInURL = regexp.MustCompile(`(://[^/@:\s"]*:)[^@\s"]*@`)

// redactURL replaces the password in s (a URL, or a message quoting one)
// with "xxxxx", as net/url's URL.Redacted does, but for text that may not
// parse as a URL at all.
func redactURL(s string) string { return passwordInURL.ReplaceAllString(s, "${1}xxxxx@") }

// redactURLError hides the password of the URL raw in a parse error: the
// URL as quoted, and the password or its parts wherever else the error
// repeats them (net/url names the bad port, which is the password when
// it holds a "/").
func redactURLError(msg, raw string) string {
	msg = redactURL(msg)
	_, rest, ok := strings.Cut(raw, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return msg
	}
	_, pw, ok := strings.Cut(rest[:at], ":")
	if !ok || pw == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, pw, "xxxxx")
	for _, part := range strings.FieldsFunc(pw, func(r rune) bool { return strings.ContainsRune("/:?#", r) }) {
		if len(part) > 1 {
			msg = strings.ReplaceAll(msg, part, "xxxxx")
		}
	}
	return msg
}

// resolveTarget settles where to connect, in this order: --url, --addr,
// --cluster or --sentinel given on the command line; else $REDISDELAY_URL;
// else $REDISDELAY_ADDR; else 127.0.0.1:6379 (docs/cli.md).
func (o *options) resolveTarget() error {
	explicit := o.addr != defaultAddr || o.cluster != "" || o.sentinel != ""
	switch {
	case o.url != "" && explicit:
		return errors.New("--url excludes --addr, --cluster and --sentinel: give the server once")
	case o.url != "":
		o.from = "--url"
	case explicit:
	case o.getenv("REDISDELAY_URL") != "":
		o.url, o.from = o.getenv("REDISDELAY_URL"), "$REDISDELAY_URL"
	case o.getenv("REDISDELAY_ADDR") != "":
		o.addr, o.from = o.getenv("REDISDELAY_ADDR"), "$REDISDELAY_ADDR"
	}
	if o.url == "" {
		return nil
	}
	opts, err := redis.ParseURL(o.url)
	if err != nil {
		return fmt.Errorf("%s %s: %s: give redis://[user[:password]@]host[:port][/db], or rediss:// for TLS", o.from, redactURL(o.url), redactURLError(err.Error(), o.url))
	}
	o.urlOpts = opts
	return nil
}

// usageError is a mistake in the command line: exit status 2 with usage.
type usageError struct {
	cmd *command // nil: the global usage
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd *command, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// errReported is returned by a command that printed its own error
// report: exit status 1, nothing more printed.
var errReported = errors.New("redisdelay: error reported")

// env is what a command runs with.
type env struct {
	ctx context.Context
	// signals is done on SIGINT or SIGTERM only: the context of what runs
	// longer than --timeout (ui, a bulk action's run).
	signals context.Context
	opts    *options
	insp    *redisdelay.Inspector
	stdout  io.Writer
	stderr  io.Writer
	now     func() time.Time
	flags   *cmdFlags
}

// run runs the command line args (without the program name) and returns
// the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(ctx, newOptions(), args, stdout, stderr)
}

func runWith(ctx context.Context, opts *options, args []string, stdout, stderr io.Writer) int {
	stderr = redactingWriter{w: stderr, opts: opts}
	top := flag.NewFlagSet("redisdelay", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	opts.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, nil)
			return exitOK
		}
		return usageFail(stderr, usagef(nil, "%v", err))
	}
	rest := top.Args()
	if opts.version {
		if len(rest) > 0 {
			return usageFail(stderr, usagef(nil, "--version takes no command (got %q)", rest[0]))
		}
		fmt.Fprintln(stdout, version())
		return exitOK
	}
	if len(rest) == 0 {
		return usageFail(stderr, usagef(nil, "no command given"))
	}
	if rest[0] == "help" {
		var cmd *command
		if len(rest) > 2 {
			return usageFail(stderr, usagef(nil, "help takes one command at most (got %d arguments)", len(rest)-1))
		}
		if len(rest) > 1 {
			if cmd = lookup(rest[1]); cmd == nil {
				return usageFail(stderr, usagef(nil, "help: unknown command %q", rest[1]))
			}
		}
		printUsage(stdout, cmd)
		return exitOK
	}
	cmd := lookup(rest[0])
	if cmd == nil {
		return usageFail(stderr, usagef(nil, "unknown command %q", rest[0]))
	}
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts.register(fs)
	cf := &cmdFlags{}
	if cmd.flags != nil {
		cmd.flags(fs, cf)
	}
	pos, err := parseInterspersed(fs, rest[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, cmd)
			return exitOK
		}
		return usageFail(stderr, usagef(cmd, "%v", err))
	}
	if len(pos) < cmd.minArgs || (cmd.maxArgs >= 0 && len(pos) > cmd.maxArgs) {
		return usageFail(stderr, usagef(cmd, "%s: wrong number of arguments (%d)", cmd.name, len(pos)))
	}
	if opts.version {
		return usageFail(stderr, usagef(cmd, "--version takes no command (got %q)", cmd.name))
	}
	if err := opts.check(); err != nil {
		return usageFail(stderr, usagef(cmd, "%v", err))
	}
	if opts.password != "" {
		fmt.Fprintln(stderr, "redisdelay: warning: --password on the command line is visible to the other users of this machine (ps, /proc) "+
			"and kept in the shell's history: give it in $REDISDELAY_PASSWORD instead")
	}
	if opts.tlsInsecure {
		fmt.Fprintln(stderr, "redisdelay: warning: --tls-insecure: the server's certificate is not verified, so anyone on the network path can impersonate the server and read the password and the messages")
	}
	if cmd.check != nil {
		if err := cmd.check(pos, cf); err != nil {
			return usageFail(stderr, usagef(cmd, "%s: %v", cmd.name, err))
		}
	}

	serveCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()
	client := opts.client()
	defer client.Close()
	if err := ping(ctx, client); err != nil {
		hint := ""
		if opts.sentinel != "" && ctx.Err() == nil {
			hint = " (is --master the name the Sentinels monitor?)"
		}
		fmt.Fprintf(stderr, "redisdelay: cannot reach %s: %v%s%s\n", opts.target(), err, hint, timedOut(ctx, opts))
		return exitError
	}
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: opts.prefix})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError
	}
	e := &env{ctx: ctx, signals: serveCtx, opts: opts, insp: insp, stdout: stdout, stderr: stderr, now: time.Now, flags: cf}
	if cmd.serve {
		e.ctx = serveCtx // --timeout bounded connecting only
	}
	if err := cmd.run(e, pos); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return usageFail(stderr, err)
		}
		if errors.Is(err, errReported) {
			return exitError
		}
		code := exitError
		var nf *notFoundError
		if errors.As(err, &nf) {
			if nf.msg == "" {
				return exitNotFound
			}
			code = exitNotFound
		}
		msg := err.Error() + timedOut(ctx, opts)
		if !strings.HasPrefix(msg, "redisdelay") {
			msg = "redisdelay: " + msg
		}
		fmt.Fprintln(stderr, msg)
		return code
	}
	return exitOK
}

// timedOut says when the command ran out of time.
func timedOut(ctx context.Context, opts *options) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf(" (gave up after --timeout %s)", opts.timeout)
	}
	return ""
}

// usageFail prints a usage error on one line, and on the next where to
// read the usage (rather than all of it: the error would scroll away).
func usageFail(stderr io.Writer, err error) int {
	var ue *usageError
	hint := `run "redisdelay -h" for the commands and global flags`
	if errors.As(err, &ue) && ue.cmd != nil {
		hint = fmt.Sprintf(`usage: redisdelay [flags] %s %s (run "redisdelay help %s" for its flags)`, ue.cmd.name, ue.cmd.args, ue.cmd.name)
	}
	fmt.Fprintf(stderr, "redisdelay: %s\n%s\n", strings.TrimPrefix(oneLine(err.Error()), "redisdelay: "), hint)
	return exitUsage
}

func (o *options) check() error {
	// Addresses are host:port. A URL (redis://user:password@host) would
	// fail to connect with an error that echoes it, password included.
	for _, a := range []struct{ flag, value string }{{"--addr", o.addr}, {"--cluster", o.cluster}, {"--sentinel", o.sentinel}} {
		if strings.Contains(a.value, "://") {
			return fmt.Errorf("%s takes host:port, not a URL (%s): give a URL to --url (or $REDISDELAY_URL)", a.flag, o.redact(a.value))
		}
	}
	if err := o.resolveTarget(); err != nil {
		return err
	}
	if o.cluster != "" && o.addr != defaultAddr {
		return errors.New("--cluster and --addr exclude each other: give the cluster's seed addresses to --cluster only")
	}
	if o.cluster != "" && len(splitAddrs(o.cluster)) == 0 {
		return errors.New("--cluster has no address")
	}
	if err := o.checkSentinel(); err != nil {
		return err
	}
	if o.db < 0 {
		return fmt.Errorf("--db is %d: use 0 or more", o.db)
	}
	if o.db != 0 && o.cluster != "" {
		return fmt.Errorf("--db %d with --cluster: a Redis Cluster has database 0 only", o.db)
	}
	tc, err := o.buildTLS()
	if err != nil {
		return err
	}
	o.tlsConfig = tc
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout is %s: give a positive duration, e.g. 10s", o.timeout)
	}
	if o.prefix == "" {
		return errors.New("--prefix is empty")
	}
	return nil
}

func (o *options) checkSentinel() error {
	switch {
	case o.sentinel == "" && o.master != "":
		return errors.New("--master without --sentinel: give the Sentinels' addresses to --sentinel too")
	case o.sentinel == "":
		return nil
	case o.cluster != "":
		return errors.New("--sentinel and --cluster exclude each other")
	case o.addr != defaultAddr:
		return errors.New("--sentinel and --addr exclude each other: the Sentinels tell where the master is")
	case len(splitAddrs(o.sentinel)) == 0:
		return errors.New("--sentinel has no address")
	case o.master == "":
		return errors.New("--sentinel needs --master, the name of the master the Sentinels monitor (as in \"sentinel monitor <name> ...\")")
	}
	return nil
}

// buildTLS makes the TLS configuration the --tls flags ask for (nil for
// none), reading the files now so that a wrong path is a usage error
// rather than a failure to connect.
func (o *options) buildTLS() (*tls.Config, error) {
	if !o.tls && o.tlsCA == "" && o.tlsCert == "" && o.tlsKey == "" && !o.tlsInsecure {
		return nil, nil
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give the client certificate and its private key")
	}
	if o.tlsInsecure && o.tlsCA != "" {
		return nil, errors.New("--tls-insecure and --tls-ca exclude each other: --tls-insecure verifies nothing, so the CA would be ignored")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.tlsInsecure} //nolint:gosec // asked for, with a warning
	if o.tlsCA != "" {
		pem, err := os.ReadFile(o.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", o.tlsCA)
		}
		tc.RootCAs = pool
	}
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// secret returns the password: --password, else $REDISDELAY_PASSWORD, else
// $REDIS_PASSWORD (read by earlier versions).
func (o *options) secret() string {
	if o.password != "" {
		return o.password
	}
	if p := o.getenv("REDISDELAY_PASSWORD"); p != "" {
		return p
	}
	return o.getenv("REDIS_PASSWORD")
}

func splitAddrs(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// client connects as the options say (check has run). Reads honour the
// context, so --timeout bounds a server that accepts connections but never
// answers.
func (o *options) client() redis.UniversalClient {
	password := o.secret()
	dial := min(o.timeout, 5*time.Second)
	if u := o.urlOpts; u != nil {
		// The flags and $REDISDELAY_PASSWORD override the URL's parts;
		// rediss:// has set TLSConfig, which the --tls flags replace.
		c := *u
		if o.user != "" {
			c.Username = o.user
		}
		if password != "" && (o.password != "" || o.getenv("REDISDELAY_PASSWORD") != "" || c.Password == "") {
			c.Password = password
		}
		if o.db != 0 {
			c.DB = o.db
		}
		if o.tlsConfig != nil {
			c.TLSConfig = o.tlsConfig
		}
		c.DialTimeout, c.MaxRetries, c.ContextTimeoutEnabled = dial, 1, true
		return redis.NewClient(&c)
	}
	switch {
	case o.cluster != "":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: splitAddrs(o.cluster), Username: o.user, Password: password, TLSConfig: o.tlsConfig,
			DialTimeout: dial, MaxRetries: 1, ContextTimeoutEnabled: true,
		})
	case o.sentinel != "":
		// The Sentinels are reached with the same TLS settings; their own
		// password, if any, comes from $REDISDELAY_SENTINEL_PASSWORD.
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: o.master, SentinelAddrs: splitAddrs(o.sentinel), SentinelPassword: o.getenv("REDISDELAY_SENTINEL_PASSWORD"),
			Username: o.user, Password: password, DB: o.db, TLSConfig: o.tlsConfig,
			DialTimeout: dial, MaxRetries: 1, ContextTimeoutEnabled: true,
		})
	}
	return redis.NewClient(&redis.Options{
		Addr: o.addr, Username: o.user, Password: password, DB: o.db, TLSConfig: o.tlsConfig,
		DialTimeout: dial, MaxRetries: 1, ContextTimeoutEnabled: true,
	})
}

// version describes the build: the library's release and storage level,
// the module version (a tag when installed
// with go install ...@version, "(devel)" from a checkout), the VCS
// revision when built from one, and the Go version.
func version() string {
	v := fmt.Sprintf("redisdelay %s (storage level %d)", redisdelay.Version, redisdelay.StorageLevel)
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v += " module " + info.Main.Version
	var rev, when, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev != "" {
		v += fmt.Sprintf(" (%.12s %s%s)", rev, when, dirty)
	}
	return v + " " + info.GoVersion
}

func ping(ctx context.Context, c redis.UniversalClient) error {
	return c.Ping(ctx).Err()
}

// parseInterspersed parses flags anywhere among the positional arguments
// (flag.Parse stops at the first positional one) and returns those. After
// "--" everything is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func printUsage(w io.Writer, cmd *command) {
	if cmd != nil {
		fmt.Fprintf(w, "usage: redisdelay [flags] %s %s\n\n%s\n", cmd.name, cmd.args, cmd.help)
		fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
		if cmd.flags != nil {
			cmd.flags(fs, &cmdFlags{})
			fs.SetOutput(w)
			fmt.Fprintln(w, "\nflags of "+cmd.name+":")
			fs.PrintDefaults()
		}
		fmt.Fprintln(w, "\nglobal flags (before or after the command): see redisdelay -h")
		return
	}
	fmt.Fprint(w, `usage: redisdelay [flags] <command> [arguments]

Shows and manages the topics of watermill-redisdelay.

commands:
`)
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprint(w, `
global flags (before or after the command):
`)
	fs := flag.NewFlagSet("redisdelay", flag.ContinueOnError)
	fs.SetOutput(w)
	newOptions().register(fs)
	fs.PrintDefaults()
	fmt.Fprint(w, `
environment:
  REDISDELAY_URL                Redis URL, as --url, when no --url, --addr, --cluster or --sentinel is given
  REDISDELAY_ADDR               Redis address, as --addr, when none of those and no REDISDELAY_URL is given
  REDISDELAY_PASSWORD           password of the Redis server, cluster or master (unless --password; it overrides a
                                URL's password; REDIS_PASSWORD is read too)
  REDISDELAY_SENTINEL_PASSWORD  password of the Sentinels, with --sentinel

exit status: 0 done, 1 operational error (Redis unreachable, unknown topic, ...), 2 usage error,
3 not found (show, cancel, reschedule or run-now of a message that is not there; pause of an unknown group).
Run "redisdelay help <command>" for a command's flags.
`)
}
