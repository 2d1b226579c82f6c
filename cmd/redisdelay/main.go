// Command redisdelay shows what the topics of watermill-redisdelay hold and
// lets an operator act on them: list topics, count messages, list delayed
// messages and dead letters, cancel a delayed message, requeue, delete or
// purge dead letters.
//
//	redisdelay [flags] <command> [arguments]
//
// Run "redisdelay -h" for the commands and flags. Exit status: 0 done,
// 1 operational error (Redis unreachable, unknown topic, ...), 2 usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
)

const defaultAddr = "127.0.0.1:6379"

// options are the global flags; every command accepts them too, before or
// after its own arguments.
type options struct {
	addr    string
	cluster string
	prefix  string
	json    bool
	timeout time.Duration
}

func (o *options) register(fs *flag.FlagSet) {
	// The current values are the defaults, so registering the flags again on
	// a command's flag set keeps what the global flags set.
	fs.StringVar(&o.addr, "addr", o.addr, "Redis `address` (host:port)")
	fs.StringVar(&o.cluster, "cluster", o.cluster, "comma-separated seed `addresses` of a Redis Cluster (instead of --addr)")
	fs.StringVar(&o.prefix, "prefix", o.prefix, "key `prefix` of the Publishers and Subscribers")
	fs.BoolVar(&o.json, "json", o.json, "machine-readable JSON output")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "bound on the whole command, including connecting")
}

// target names the Redis deployment in messages.
func (o *options) target() string {
	if o.cluster != "" {
		return "Redis Cluster (seeds " + o.cluster + ")"
	}
	return "Redis at " + o.addr
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

// env is what a command runs with.
type env struct {
	ctx    context.Context
	opts   *options
	insp   *redisdelay.Inspector
	stdout io.Writer
	stderr io.Writer
	now    func() time.Time
	flags  *cmdFlags
}

// run runs the command line args (without the program name) and returns
// the exit status. The password comes from $REDIS_PASSWORD.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts := &options{addr: defaultAddr, prefix: redisdelay.DefaultKeyPrefix, timeout: 10 * time.Second}
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
	if len(rest) == 0 {
		return usageFail(stderr, usagef(nil, "no command given"))
	}
	if rest[0] == "help" {
		var cmd *command
		if len(rest) > 1 {
			cmd = lookup(rest[1])
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
	if err := opts.check(); err != nil {
		return usageFail(stderr, usagef(cmd, "%v", err))
	}
	if cmd.check != nil {
		if err := cmd.check(pos, cf); err != nil {
			return usageFail(stderr, usagef(cmd, "%s: %v", cmd.name, err))
		}
	}

	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()
	client := opts.client()
	defer client.Close()
	if err := ping(ctx, client); err != nil {
		fmt.Fprintf(stderr, "redisdelay: cannot reach %s: %v%s\n", opts.target(), err, timedOut(ctx, opts))
		return exitError
	}
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: opts.prefix})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError
	}
	e := &env{ctx: ctx, opts: opts, insp: insp, stdout: stdout, stderr: stderr, now: time.Now, flags: cf}
	if err := cmd.run(e, pos); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return usageFail(stderr, err)
		}
		msg := err.Error() + timedOut(ctx, opts)
		if !strings.HasPrefix(msg, "redisdelay") {
			msg = "redisdelay: " + msg
		}
		fmt.Fprintln(stderr, msg)
		return exitError
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

// usageFail prints a usage error with the relevant usage text.
func usageFail(stderr io.Writer, err error) int {
	var ue *usageError
	var cmd *command
	if errors.As(err, &ue) {
		cmd = ue.cmd
	}
	fmt.Fprintf(stderr, "redisdelay: %v\n\n", err)
	printUsage(stderr, cmd)
	return exitUsage
}

func (o *options) check() error {
	if o.cluster != "" && o.addr != defaultAddr {
		return errors.New("--cluster and --addr exclude each other: give the cluster's seed addresses to --cluster only")
	}
	if o.cluster != "" && len(o.seeds()) == 0 {
		return errors.New("--cluster has no address")
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout is %s: give a positive duration, e.g. 10s", o.timeout)
	}
	if o.prefix == "" {
		return errors.New("--prefix is empty")
	}
	return nil
}

func (o *options) seeds() []string {
	var out []string
	for _, a := range strings.Split(o.cluster, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// client connects as the options say; the password comes from
// $REDIS_PASSWORD. Reads honour the context, so --timeout bounds a server
// that accepts connections but never answers.
func (o *options) client() redis.UniversalClient {
	password := os.Getenv("REDIS_PASSWORD")
	dial := min(o.timeout, 5*time.Second)
	if o.cluster != "" {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: o.seeds(), Password: password, DialTimeout: dial, MaxRetries: 1, ContextTimeoutEnabled: true,
		})
	}
	return redis.NewClient(&redis.Options{Addr: o.addr, Password: password, DialTimeout: dial, MaxRetries: 1, ContextTimeoutEnabled: true})
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
	for _, c := range commands {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
global flags (before or after the command):
`)
	fs := flag.NewFlagSet("redisdelay", flag.ContinueOnError)
	fs.SetOutput(w)
	(&options{addr: defaultAddr, prefix: redisdelay.DefaultKeyPrefix, timeout: 10 * time.Second}).register(fs)
	fs.PrintDefaults()
	fmt.Fprint(w, `
environment:
  REDIS_PASSWORD  password of the Redis server or cluster

exit status: 0 done, 1 operational error (Redis unreachable, unknown topic, ...), 2 usage error.
Run "redisdelay help <command>" for a command's flags.
`)
}
