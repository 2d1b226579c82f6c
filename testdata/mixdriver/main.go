// Command mixdriver is one process of a mixed-version run (the root
// package's TestMixedVersions): built from the previous release's tree and
// from the checkout, it publishes ("pub"), consumes ("sub") or schedules
// ("mgr") with the version it was built from until SIGTERM, then closes
// gracefully. It logs what it did, one line an event, for the test to
// check: P <uuid> <due ms> <kind> (published), X <uuid> (published, then
// cancelled or replaced: must not be delivered), A <uuid> <attempt> <ms>
// (delivered and acked), N <uuid> <attempt> (nacked on purpose),
// E <what> <error> (an operation that failed), T <ms> (a schedule tick),
// R <uuid> <due ms> (rescheduled). A publisher hands some of its long
// waiting messages to the other version's publishers, which cancel or
// reschedule them (handOver, takeOver): each version acts on what the
// other wrote, whatever far tier format holds it. It compiles against both
// trees: only API both have.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

var (
	logMu sync.Mutex
	logF  *os.File
)

func logf(format string, args ...any) {
	logMu.Lock()
	defer logMu.Unlock()
	fmt.Fprintf(logF, format+"\n", args...)
}

const (
	topicMix  = "mix"
	topicOrd  = "ord"
	topicTick = "tick"
	group     = "g"
)

var policies = []redisdelay.BusinessKeyPolicy{redisdelay.RejectDuplicateKey, redisdelay.KeepFirst,
	redisdelay.ReplaceWaiting, redisdelay.ReplaceKeepDue, redisdelay.KeepLastIfActive}

func main() {
	addr := flag.String("addr", "", "Redis")
	role := flag.String("role", "", "pub, sub or mgr")
	logPath := flag.String("log", "", "event log")
	name := flag.String("name", "", "this process's name, in UUIDs and logs")
	every := flag.Duration("every", 40*time.Millisecond, "pub: a message per this")
	width := flag.Duration("width", 0, "far width")
	lead := flag.Duration("lead", 0, "far lead")
	margin := flag.Duration("margin", 0, "far margin")
	flag.Parse()
	store.FarWidth, store.FarLead, store.FarMargin = *width, *lead, *margin
	var err error
	logF, err = os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	client := redis.NewClient(&redis.Options{Addr: *addr})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := watermill.NewStdLogger(false, false)
	switch *role {
	case "pub":
		err = runPub(ctx, client, logger, *name, *every)
	case "sub":
		err = runSub(ctx, client, logger)
	case "mgr":
		err = runMgr(ctx, client, logger)
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func pubConfig(client redis.UniversalClient) redisdelay.PublisherConfig {
	return redisdelay.PublisherConfig{Client: client, TopicPartitions: map[string]int{topicOrd: 4}}
}

func runPub(ctx context.Context, client redis.UniversalClient, logger watermill.LoggerAdapter, name string, every time.Duration) error {
	pub, err := redisdelay.NewPublisher(pubConfig(client), logger)
	if err != nil {
		return err
	}
	defer pub.Close()
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	if err != nil {
		return err
	}
	err = pub.Schedule(ctx, redisdelay.Schedule{ID: "mixtick", Spec: "@every 1s", Topic: topicTick, Payload: []byte("tick")})
	if err != nil {
		logf("E schedule %q", err.Error())
	}
	rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
	t := time.NewTicker(every)
	defer t.Stop()
	requeue := time.NewTicker(4 * time.Second)
	defer requeue.Stop()
	take := time.NewTicker(200 * time.Millisecond)
	defer take.Stop()
	version, _, _ := strings.Cut(name, "-")
	h := handoff{client: client, mine: handoffKey + version, theirs: handoffKey + "new"}
	if version == "new" {
		h.theirs = handoffKey + "old"
	}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-requeue.C:
			if _, err := insp.RequeueDeadLetters(ctx, topicMix, group); err != nil && ctx.Err() == nil {
				logf("E requeue %q", err.Error())
			}
			continue
		case <-take.C:
			h.takeOver(ctx, pub)
			continue
		case <-t.C:
		}
		publishOne(ctx, pub, &h, rnd, fmt.Sprintf("%s-%d", name, i), i)
	}
}

// handoffKey is the list of long waiting messages a version's publishers
// hand to the other's: "<uuid> <business key or -> <due ms>".
const handoffKey = "mixtest:handoff:"

type handoff struct {
	client       redis.UniversalClient
	mine, theirs string
	n            int
}

func (h *handoff) handOver(ctx context.Context, msg *message.Message, key string, due int64) {
	if key == "" {
		key = "-"
	}
	if err := h.client.RPush(ctx, h.mine, fmt.Sprintf("%s %s %d", msg.UUID, key, due)).Err(); err != nil && ctx.Err() == nil {
		logf("E handoff %q", err.Error())
	}
}

// takeOver cancels or reschedules (by UUID or by business key, in turn) a
// message the other version handed over, unless it is due within 5s (it
// may be on its way to a subscriber).
func (h *handoff) takeOver(ctx context.Context, pub *redisdelay.Publisher) {
	v, err := h.client.LPop(ctx, h.theirs).Result()
	if err != nil {
		if err != redis.Nil && ctx.Err() == nil {
			logf("E takeover %q", err.Error())
		}
		return
	}
	f := strings.Fields(v)
	if len(f) != 3 {
		logf("E takeover %q", "malformed: "+v)
		return
	}
	if due, _ := strconv.ParseInt(f[2], 10, 64); time.Until(time.UnixMilli(due)) < 5*time.Second {
		return
	}
	id, key := f[0], f[1]
	h.n++
	byKey := key != "-" && h.n%4 >= 2
	var ok bool
	if h.n%2 == 0 {
		if byKey {
			ok, err = pub.CancelKey(ctx, topicMix, key)
		} else {
			ok, err = pub.Cancel(ctx, topicMix, id)
		}
		switch {
		case err != nil:
			logf("E takeover-cancel %q", err.Error())
		case ok:
			logf("X %s", id)
		default:
			logf("E takeover-cancel %q", "not found")
		}
		return
	}
	at := time.Now().Add(2 * time.Second)
	if byKey {
		ok, err = pub.RescheduleKey(ctx, topicMix, key, at)
	} else {
		ok, err = pub.Reschedule(ctx, topicMix, id, at)
	}
	switch {
	case err != nil:
		logf("E takeover-reschedule %q", err.Error())
	case ok:
		logf("R %s %d", id, at.UnixMilli())
	default:
		logf("E takeover-reschedule %q", "not found")
	}
}

func newMsg(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
}

func delayed(msg *message.Message, d time.Duration) *message.Message {
	delay.Message(msg, delay.For(d))
	return msg
}

func publish(pub *redisdelay.Publisher, topic, kind string, msg *message.Message, d time.Duration) bool {
	_, ok := publishDue(pub, topic, kind, msg, d)
	return ok
}

func publishDue(pub *redisdelay.Publisher, topic, kind string, msg *message.Message, d time.Duration) (int64, bool) {
	due := time.Now().Add(d).UnixMilli()
	if d > 0 {
		delayed(msg, d)
	}
	if err := pub.Publish(topic, msg); err != nil {
		logf("E publish-%s %q", kind, err.Error())
		return due, false
	}
	logf("P %s %d %s", msg.UUID, due, kind)
	return due, true
}

func jitter(rnd *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rnd.Int63n(int64(hi-lo)))
}

func publishOne(ctx context.Context, pub *redisdelay.Publisher, h *handoff, rnd *rand.Rand, id string, i int) {
	switch i % 16 {
	case 0:
		publish(pub, topicMix, "now", newMsg("ack"), 0)
	case 1:
		publish(pub, topicMix, "near", newMsg("ack"), jitter(rnd, time.Second, 3*time.Second))
	case 2:
		publish(pub, topicMix, "far", newMsg("ack"), jitter(rnd, 6*time.Second, 10*time.Second))
	case 3:
		m := newMsg("ack")
		redisdelay.SetBusinessKey(m, "k-"+id)
		publish(pub, topicMix, "keyed", m, jitter(rnd, 2*time.Second, 9*time.Second))
	case 4:
		// Two messages of one key: the second under a policy.
		policy := policies[(i/16)%len(policies)]
		a := newMsg("ack")
		redisdelay.SetBusinessKey(a, "p-"+id)
		if !publish(pub, topicMix, "keyA", a, jitter(rnd, 5*time.Second, 9*time.Second)) {
			return
		}
		b := newMsg("ack")
		redisdelay.SetBusinessKey(b, "p-"+id)
		redisdelay.SetBusinessKeyPolicy(b, policy)
		ok := publish(pub, topicMix, "keyB-"+string(policy), b, jitter(rnd, 3*time.Second, 8*time.Second))
		switch {
		case !ok:
		case policy == redisdelay.KeepFirst:
			logf("X %s", b.UUID)
		case policy != redisdelay.RejectDuplicateKey:
			logf("X %s", a.UUID)
		}
	case 5:
		m := newMsg("ack")
		redisdelay.SetHighPriority(m)
		publish(pub, topicMix, "prio", m, jitter(rnd, 0, 2*time.Second))
	case 6:
		m := newMsg("ack")
		redisdelay.SetGroup(m, "grp"+strconv.Itoa(i%3))
		publish(pub, topicMix, "grouped", m, jitter(rnd, 0, 2*time.Second))
	case 7:
		m := newMsg("ack")
		redisdelay.SetPartitionKey(m, "k"+strconv.Itoa(i%8))
		publish(pub, topicOrd, "ordered", m, jitter(rnd, 0, 2*time.Second))
	case 8:
		publish(pub, topicMix, "nack", newMsg("nack"), 0)
	case 9:
		publish(pub, topicMix, "dead", newMsg("dead"), 0)
	case 10, 11:
		m := newMsg("ack")
		byKey := i%16 == 11
		if byKey {
			redisdelay.SetBusinessKey(m, "c-"+id)
		}
		if !publish(pub, topicMix, "cancel", m, jitter(rnd, 6*time.Second, 10*time.Second)) {
			return
		}
		var ok bool
		var err error
		if byKey {
			ok, err = pub.CancelKey(ctx, topicMix, "c-"+id)
		} else {
			ok, err = pub.Cancel(ctx, topicMix, m.UUID)
		}
		switch {
		case err != nil:
			logf("E cancel %q", err.Error())
		case ok:
			logf("X %s", m.UUID)
		default:
			logf("E cancel %q", "not found")
		}
	case 12, 13:
		m := newMsg("ack")
		byKey := i%16 == 13
		if byKey {
			redisdelay.SetBusinessKey(m, "r-"+id)
		}
		if !publish(pub, topicMix, "resched", m, jitter(rnd, 8*time.Second, 10*time.Second)) {
			return
		}
		due := time.Now().Add(2 * time.Second)
		var ok bool
		var err error
		if byKey {
			ok, err = pub.RescheduleKey(ctx, topicMix, "r-"+id, due)
		} else {
			ok, err = pub.Reschedule(ctx, topicMix, m.UUID, due)
		}
		switch {
		case err != nil:
			logf("E reschedule %q", err.Error())
		case ok:
			logf("R %s %d", m.UUID, due.UnixMilli())
		default:
			logf("E reschedule %q", "not found")
		}
	case 14, 15:
		// Still waiting a minute on: across the next steps of the
		// order (a rollback's rewrite included), a business key or a
		// high priority on every other one. Half of them are handed to
		// the other version's publishers.
		m := newMsg("ack")
		key := ""
		if i%32 == 14 {
			key = "l-" + id
			redisdelay.SetBusinessKey(m, key)
		} else if i%32 == 15 {
			redisdelay.SetHighPriority(m)
		}
		due, ok := publishDue(pub, topicMix, "long", m, jitter(rnd, 50*time.Second, 70*time.Second))
		if j := i % 64; ok && (j == 14 || j == 15 || j == 30 || j == 46) {
			h.handOver(ctx, m, key, due)
		}
	}
}

func runSub(ctx context.Context, client redis.UniversalClient, logger watermill.LoggerAdapter) error {
	config := redisdelay.SubscriberConfig{Client: client, ConsumerGroup: group, MaxAttempts: 3,
		RetryDelay: func(int) time.Duration { return 300 * time.Millisecond }, TopicPartitions: map[string]int{topicOrd: 4}}
	sub, err := redisdelay.NewSubscriber(config, logger)
	if err != nil {
		return err
	}
	config.Ordered = true
	ord, err := redisdelay.NewSubscriber(config, logger)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	consume := func(s *redisdelay.Subscriber, topic string) error {
		msgs, err := s.Subscribe(ctx, topic)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range msgs {
				handle(ctx, client, topic, msg)
			}
		}()
		return nil
	}
	for _, c := range []struct {
		s     *redisdelay.Subscriber
		topic string
	}{{sub, topicMix}, {ord, topicOrd}, {sub, topicTick}} {
		if err := consume(c.s, c.topic); err != nil {
			return err
		}
	}
	<-ctx.Done()
	err = sub.Close()
	if e := ord.Close(); err == nil {
		err = e
	}
	wg.Wait()
	return err
}

func handle(ctx context.Context, client redis.UniversalClient, topic string, msg *message.Message) {
	attempt, _ := strconv.Atoi(msg.Metadata.Get(redisdelay.AttemptKey))
	now := time.Now().UnixMilli()
	if topic == topicTick {
		logf("T %d", now)
		msg.Ack()
		return
	}
	p := string(msg.Payload)
	nack := false
	switch {
	case strings.HasPrefix(p, "nack"):
		nack = attempt < 2
	case p == "dead":
		// Dies once (three nacks), and is acked once requeued.
		done, _ := client.Exists(context.Background(), "mixtest:dead:"+msg.UUID).Result()
		if done == 0 {
			nack = true
			if attempt >= 3 {
				client.Set(context.Background(), "mixtest:dead:"+msg.UUID, "1", time.Hour)
			}
		}
	}
	if nack {
		logf("N %s %d", msg.UUID, attempt)
		msg.Nack()
		return
	}
	logf("A %s %d %d", msg.UUID, attempt, now)
	msg.Ack()
}

func runMgr(ctx context.Context, client redis.UniversalClient, logger watermill.LoggerAdapter) error {
	m, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: client}, logger)
	if err != nil {
		return err
	}
	return m.Run(ctx)
}
