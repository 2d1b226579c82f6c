package main

import (
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// TopicStep is scenario 11 at one topic count.
type TopicStep struct {
	Topics int `json:"topics"`
	// Connections of the subscribing process (CLIENT LIST, by client
	// name): the most seen while idle and while messages flowed.
	IdleConns int `json:"idle_connections"`
	LoadConns int `json:"load_connections"`
	PoolSize  int `json:"pool_size"`
	// Idle cost over the idle window, % of one core: the Redis server,
	// and the bench process (which then runs only the Subscriber).
	RedisCPU       float64   `json:"idle_redis_cpu_percent"`
	ClientCPU      float64   `json:"idle_client_cpu_percent"`
	CallsPerSecond float64   `json:"idle_calls_per_second"`
	Subscribe      float64   `json:"subscribe_seconds"` // to subscribe every topic
	Lateness       *Lateness `json:"lateness"`
	// Redis commands while messages flowed, per message (those scripts
	// run included).
	CallsPerMsg float64       `json:"calls_per_message"`
	Commands    []CommandStat `json:"commands"`
}

// topicsClient names the connections of the subscribing client.
const topicsClient = "bench-topics"

// topicsWarmup lets subscriptions settle before the idle measurement: the
// schedulers' loops retire at their first tick with nothing to do, and a
// subscription's first lease renewal (a third of VisibilityTimeout, 10s,
// after it starts) finds nothing to renew.
const topicsWarmup = 12 * time.Second

// topicsDelay is the delay of scenario 11's messages.
const topicsDelay = 50 * time.Millisecond

// topicScaling measures scenario 11: one Subscriber with the defaults (its
// embedded scheduler included) on a client with go-redis's defaults, as a
// new user creates them, subscribed to each of n topics, for each topic
// count: the connections the process holds, what the idle topics cost
// Redis and the process, and the lateness of messages delayed 50ms
// published at a steady rate round-robin over the topics (from a client of
// their own: publishing is the application's load).
func (b *bench) topicScaling() {
	for _, n := range b.opts.TopicCounts {
		step, err := b.topicStep(n)
		if b.failed(fmt.Sprintf("%d topics", n), err) {
			continue
		}
		b.rep.Topics = append(b.rep.Topics, step)
		label := fmt.Sprintf("%s topics on one Subscriber", count(n))
		b.rep.row("11", label+": connections of the process, idle / under load", "connections", "≤ 4",
			ptr(float64(max(step.IdleConns, step.LoadConns))))
		b.rep.row("11", label+": idle cost, Redis and the process", "% of a core", "< 1%",
			ptr(step.RedisCPU+step.ClientCPU))
		if l := step.Lateness; l != nil {
			b.rep.row("11", fmt.Sprintf("%s: lateness p99 at %d msg/s", label, b.opts.TopicsRate), "ms",
				"≤ 5 ms", ptr(l.P99))
		}
	}
}

func (b *bench) topicStep(n int) (*TopicStep, error) {
	if err := b.flush(); err != nil {
		return nil, err
	}
	client := redis.NewClient(&redis.Options{Addr: b.addr, ClientName: topicsClient})
	defer client.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: consumerGroup}, b.logger)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	step := &TopicStep{Topics: n, PoolSize: client.Options().PoolSize}
	total := b.opts.TopicsRate * int(b.opts.Steady.Seconds())
	t := newTracker(total)
	topics := make([]string, n)
	start := time.Now()
	for i := range topics {
		topics[i] = fmt.Sprintf("topic-%d", i)
		ch, err := sub.Subscribe(b.ctx, topics[i])
		if err != nil {
			return nil, err
		}
		go func() {
			for msg := range ch {
				t.deliver(msg.Payload)
				msg.Ack()
			}
		}()
	}
	step.Subscribe = time.Since(start).Seconds()
	progress("%-60s subscribed in %.1fs", fmt.Sprintf("topics · %s", count(n)), step.Subscribe)
	if err := b.awaitArmed(topics); err != nil {
		return nil, err
	}
	time.Sleep(topicsWarmup)

	// Idle: the process runs nothing but the Subscriber. Connections are
	// counted at the start and end only: CLIENT LIST would be most of the
	// load measured.
	b.countConns(&step.IdleConns)
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	cpu, calls := b.redisLoad(fmt.Sprintf("%s idle topics, one Subscriber", count(n)), b.opts.TopicsIdle)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	b.countConns(&step.IdleConns)
	if cpu == nil {
		return nil, fmt.Errorf("idle measurement failed")
	}
	step.RedisCPU, step.CallsPerSecond = *cpu, *calls
	used := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	step.ClientCPU = used.Seconds() / b.opts.TopicsIdle.Seconds() * 100
	progress("%-60s Redis %.2f%% + process %.2f%% of a core, %d connections", fmt.Sprintf("topics · %s idle", count(n)),
		step.RedisCPU, step.ClientCPU, step.IdleConns)

	// Lateness at a steady rate.
	pubClient := newClient(b.addr, poolSize)
	defer pubClient.Close()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: pubClient}, b.logger)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	q := &topicsQueue{pub: pub, topics: topics}
	stopLoad := b.sampleConns(&step.LoadConns)
	if err := b.admin.ConfigResetStat(b.ctx).Err(); err != nil {
		return nil, err
	}
	err = paced(total, b.opts.TopicsRate, func(i int) error {
		return t.schedule(q, i, time.Now().Add(topicsDelay))
	})
	if err == nil {
		err = waitFor(t.done, t.delivered.Load, total)
	}
	stopLoad()
	if err != nil {
		return nil, err
	}
	if stats, err := commandStats(b.ctx, b.admin); err == nil {
		for _, c := range stats {
			if c.Command != "client|list" && c.Command != "config|resetstat" && c.Command != "info" {
				step.CallsPerMsg += float64(c.Calls) / float64(total)
				c.PerMsg, c.UsecMsg = float64(c.Calls)/float64(total), float64(c.Usec)/float64(total)
				step.Commands = append(step.Commands, c)
			}
		}
	}
	step.Lateness, _ = t.lateness()
	l := step.Lateness
	progress("%-60s p50 %.2f ms, p99 %.2f ms, max %.1f ms, %d connections, %.1f commands/msg", fmt.Sprintf("topics · %s lateness at %d/s", count(n), b.opts.TopicsRate),
		l.P50, l.P99, l.Max, step.LoadConns, step.CallsPerMsg)
	for _, c := range step.Commands[:min(len(step.Commands), 8)] {
		progress("%-60s %s %.2f calls, %.1f µs", "", c.Command, c.PerMsg, c.UsecMsg)
	}
	return step, nil
}

// awaitArmed waits until every topic's subscription waits for its bell
// (a read armed it), at most 30s.
func (b *bench) awaitArmed(topics []string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pipe := b.admin.Pipeline()
		cmds := make([]*redis.IntCmd, len(topics))
		for i, tp := range topics {
			cmds[i] = pipe.Exists(b.ctx, redisdelay.DefaultKeyPrefix+":{"+tp+"}:bell")
		}
		if _, err := pipe.Exec(b.ctx); err != nil {
			return err
		}
		armed := 0
		for _, c := range cmds {
			armed += int(c.Val())
		}
		if armed == len(topics) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d subscriptions idle after 30s", armed, len(topics))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// countConns records in most the connections of the subscribing client,
// if more than it holds.
func (b *bench) countConns(most *int) {
	if list, err := b.admin.ClientList(b.ctx).Result(); err == nil {
		*most = max(*most, strings.Count(list, " name="+topicsClient+" "))
	}
}

// sampleConns runs countConns every 50ms until the returned func is called.
func (b *bench) sampleConns(most *int) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			b.countConns(most)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// topicsQueue publishes message i to topic i mod the topic count.
type topicsQueue struct {
	pub    message.Publisher
	topics []string
}

func (q *topicsQueue) schedule(due time.Time, payload []byte) error {
	i := binary.BigEndian.Uint64(payload)
	msg := message.NewMessage(fmt.Sprint(i), payload)
	delay.Message(msg, delay.Until(due))
	return q.pub.Publish(q.topics[i%uint64(len(q.topics))], msg)
}

func (q *topicsQueue) close() {}

// topicCharts draws scenario 11 against the topic count.
func (r *Report) topicCharts(dir string) error {
	if len(r.Topics) == 0 {
		return nil
	}
	var conns, cost, late []barGroup
	for _, s := range r.Topics {
		label := count(s.Topics) + " topics"
		conns = append(conns, barGroup{label: label, bars: []bar{
			{"idle", float64(s.IdleConns)},
			{"under load", float64(s.LoadConns)},
			{"pool size (go-redis default)", float64(s.PoolSize)},
		}})
		cost = append(cost, barGroup{label: label, bars: []bar{
			{"Redis", s.RedisCPU},
			{"the process", s.ClientCPU},
		}})
		if l := s.Lateness; l != nil {
			late = append(late, barGroup{label: label, bars: []bar{{"p50", l.P50}, {"p99", l.P99}, {"max", l.Max}}})
		}
	}
	return drawLinearCharts(dir, []namedChart{
		{"topics-connections.png", "Connections of a process with one Subscriber, default client", conns},
		{"topics-idle.png", "Idle cost (% of a core)", cost},
		{"topics-lateness.png", "Lateness of messages delayed 50 ms (ms)", late},
	})
}
