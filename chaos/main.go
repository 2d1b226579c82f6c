// Command chaos is the chaos suite of watermill-redisdelay: it publishes
// delayed messages to consumers and managers running in processes of their
// own, kills those processes, cuts their connections and restarts Redis, and
// then checks that no message was lost or delivered early and that the ready
// stream stays bounded.
//
//	go run ./chaos                 # CI size: 20,000 messages
//	go run ./chaos -n 1000000      # as large as you like
//
// The same binary plays every part: the driver (default) re-executes itself
// with -role consumer or -role manager for its children. See README.md.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Names shared by the driver and its children.
const (
	keyPrefix = "chaos"
	topic     = "chaos.orders"
	group     = "chaos-workers"
)

type config struct {
	// driver
	n           int
	rate        float64
	publishers  int
	consumers   int
	maxDelay    time.Duration
	zeroDelay   float64
	far         float64
	killMin     time.Duration
	killMax     time.Duration
	graceful    float64
	drain       time.Duration
	liveness    time.Duration
	redisServer string
	keep        bool

	// shared with the consumers
	subs           int
	fail           float64
	hang           float64
	handlerTimeout time.Duration
	work           time.Duration
	maxAttempts    int
	visibility     time.Duration
	retryDelay     time.Duration
	batch          int
	partitions     int
	ordered        bool
	groups         int // driver: messages spread over this many groups (0: none)
	groupConc      int // SubscriberConfig.GroupConcurrency

	// children only
	role string
	addr string
	log  string
	name string
}

func main() {
	var c config
	flag.IntVar(&c.n, "n", 20000, "messages to publish")
	flag.Float64Var(&c.rate, "rate", 0, "most messages published per second (0: n/25s, so publishing takes about 25s; at least 100/s)")
	flag.IntVar(&c.publishers, "publishers", 8, "concurrent publishing goroutines in the driver")
	flag.IntVar(&c.consumers, "consumers", 3, "consumer processes")
	flag.DurationVar(&c.maxDelay, "max-delay", 5*time.Second, "longest message delay (delays are uniform in (0, max-delay], at most 1h)")
	flag.Float64Var(&c.zeroDelay, "zero-delay", 0.1, "fraction of messages published with delay 0 (ready at once)")
	flag.Float64Var(&c.far, "far", 0, "fraction of messages published with a delay of 125-150s instead, so they wait in the far tier through the faults and are unpacked during the drain")
	flag.DurationVar(&c.killMin, "kill-min", 2*time.Second, "shortest pause between two consumer kills")
	flag.DurationVar(&c.killMax, "kill-max", 5*time.Second, "longest pause between two consumer kills")
	flag.Float64Var(&c.graceful, "graceful", 0.2, "fraction of consumer stops done with SIGTERM (graceful: hands messages back) instead of SIGKILL")
	flag.DurationVar(&c.liveness, "liveness", 0, "SIGKILL a consumer whose handler has hung this long, as an external liveness probe would (0: never; the consumers' -handler-timeout gives up on a hung handler by itself)")
	flag.DurationVar(&c.drain, "drain", 3*time.Minute, "how long to wait after publishing for every message to be acked or dead-lettered")
	flag.StringVar(&c.redisServer, "redis-server", "", "server binary (default: $REDISDELAY_REDIS_SERVER, else redis-server or valkey-server from PATH)")
	flag.BoolVar(&c.keep, "keep", false, "keep the temporary directory (Redis data, consumer logs, children's stderr) for inspection")

	flag.IntVar(&c.subs, "subs", 4, "subscriptions (Router handlers) per consumer process")
	flag.Float64Var(&c.fail, "fail", 0.10, "probability that a handler fails (Nack, retried)")
	flag.Float64Var(&c.hang, "hang", 0.0005, "probability that a handler hangs forever, ignoring its context (its delivery is given up on after -handler-timeout)")
	flag.DurationVar(&c.work, "work", 0, "how long a handler works before it acks or fails: uniform in [0, work] (longer runs make overlapping runs of one group likelier to show, see -group-concurrency)")
	flag.DurationVar(&c.handlerTimeout, "handler-timeout", 2*time.Second, "SubscriberConfig.HandlerTimeout (negative: none; a hung handler then holds its message, and with -ordered its partition, until its process dies)")
	flag.IntVar(&c.maxAttempts, "max-attempts", 3, "SubscriberConfig.MaxAttempts (then dead letter)")
	flag.DurationVar(&c.visibility, "visibility", 2*time.Second, "SubscriberConfig.VisibilityTimeout")
	flag.DurationVar(&c.retryDelay, "retry-delay", 100*time.Millisecond, "RetryDelay per failed attempt (attempt × this, at most 3×)")
	flag.IntVar(&c.batch, "batch", 8, "SubscriberConfig.BatchSize")
	flag.IntVar(&c.partitions, "partitions", 1, "partitions of the topic (Publisher and Subscriber Partitions)")
	flag.BoolVar(&c.ordered, "ordered", false, "SubscriberConfig.Ordered: one consumer per partition at a time, nacks retried in place")
	flag.IntVar(&c.groups, "groups", 0, "put message i in group g<i mod groups> (redisdelay.SetGroup); 0: no groups")
	flag.IntVar(&c.groupConc, "group-concurrency", 0, "SubscriberConfig.GroupConcurrency: most messages of one group handled at once (0: no cap; needs -groups)")

	flag.StringVar(&c.role, "role", "driver", "internal: driver, consumer or manager")
	flag.StringVar(&c.addr, "addr", "", "internal: Redis address of a child (the driver's proxy)")
	flag.StringVar(&c.log, "log", "", "internal: event log of a consumer")
	flag.StringVar(&c.name, "name", "", "internal: name of a child")
	flag.Parse()

	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	switch c.role {
	case "driver":
		os.Exit(runDriver(c))
	case "consumer":
		os.Exit(runConsumer(c))
	case "manager":
		os.Exit(runManager(c))
	}
}

func (c *config) validate() error {
	switch c.role {
	case "driver":
	case "consumer", "manager":
		// Children only ever talk to the driver's proxy on loopback.
		host, _, err := net.SplitHostPort(c.addr)
		if err != nil || host != "127.0.0.1" {
			return fmt.Errorf("-addr %q: children only connect to 127.0.0.1", c.addr)
		}
	default:
		return fmt.Errorf("-role %q: use driver, consumer or manager", c.role)
	}
	if c.n < 1 {
		return fmt.Errorf("-n %d: publish at least one message", c.n)
	}
	if c.rate == 0 {
		c.rate = max(float64(c.n)/25, 100)
	}
	if c.rate < 0 || c.publishers < 1 || c.consumers < 1 || c.subs < 1 || c.batch < 1 {
		return fmt.Errorf("-rate, -publishers, -consumers, -subs and -batch must be positive")
	}
	if c.maxDelay <= 0 || c.maxDelay > time.Hour {
		return fmt.Errorf("-max-delay %s: use more than 0 and at most 1h", c.maxDelay)
	}
	if c.far < 0 || c.zeroDelay < 0 || c.far+c.zeroDelay > 1 {
		return fmt.Errorf("-far %g, -zero-delay %g: fractions from 0, at most 1 together", c.far, c.zeroDelay)
	}
	if c.killMin <= 0 || c.killMax < c.killMin {
		return fmt.Errorf("-kill-min %s, -kill-max %s: need 0 < kill-min <= kill-max", c.killMin, c.killMax)
	}
	if c.partitions < 1 || c.partitions > 256 {
		return fmt.Errorf("-partitions %d: use 1 to 256", c.partitions)
	}
	if c.maxAttempts < 1 || c.maxAttempts > 200 {
		return fmt.Errorf("-max-attempts %d: use 1 to 200", c.maxAttempts)
	}
	if c.work < 0 || c.work > time.Second {
		return fmt.Errorf("-work %s: use 0 to 1s", c.work)
	}
	if c.groups < 0 || c.groupConc < 0 || c.groupConc > 1_000_000 {
		return fmt.Errorf("-groups %d, -group-concurrency %d: use 0 or more groups and a concurrency of 0 to 1,000,000", c.groups, c.groupConc)
	}
	if c.role == "driver" && c.groups == 0 && c.groupConc > 0 {
		return fmt.Errorf("-group-concurrency %d without -groups: no message is grouped", c.groupConc)
	}
	return nil
}

// groupOf is the group of message i, "" without -groups: the messages go
// round-robin over the groups, so each group's messages are due spread
// over the whole run.
func (c *config) groupOf(i int) string {
	if c.groups == 0 {
		return ""
	}
	return "g" + strconv.Itoa(i%c.groups)
}

// retryDelayFunc is the consumers' SubscriberConfig.RetryDelay.
func (c *config) retryDelayFunc() func(int) time.Duration {
	step := c.retryDelay
	return func(attempt int) time.Duration {
		return min(time.Duration(attempt)*step, 3*step)
	}
}
