// Package consumption is the consuming half of a redisdelay.Subscriber:
// its subscriptions, one per partition of a subscribed topic, each reading
// the topic's ready stream and its group's redelivery stream, handing
// messages to the Watermill channel one at a time, and writing back Acks
// and Nacks; around them, flow control (pause, rate limit, concurrency
// slots), leases, ordering, and the sweep of idle subscriptions. The root
// package validates the config, creates the consumer groups and runs the
// scheduling; this package starts from a subscribed topic.
//
// One subscription's concerns are types of their own, held as named
// fields of subscription and declared beside their code: acks (acker.go),
// leases (lease.go), reads (fetch.go), flow (flowcontrol.go) and ordering
// (ordered.go). See docs/internals.md.
package consumption

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/balance"
	"github.com/redisdelay/watermill-redisdelay/internal/levels"
	"github.com/redisdelay/watermill-redisdelay/internal/loglimit"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// opTimeout bounds one Redis operation of a subscription that must not
// hang (lease renewal, a flush of queued acknowledgements, a hand-back), and
// the flush and the hand-back a subscription makes after its context is
// gone (while closing).
const opTimeout = 5 * time.Second

// Config is what the subscriptions read of a redisdelay.SubscriberConfig
// (which documents each setting), defaults set and validated.
type Config struct {
	Client            redis.UniversalClient
	Keys              store.Keys
	ConsumerGroup     string
	Consumer          string // the base of the consumer names
	BlockTime         time.Duration
	VisibilityTimeout time.Duration
	HandlerTimeout    time.Duration
	CloseTimeout      time.Duration
	BatchSize         int
	MaxAttempts       int
	MaxDeadLetters    int
	RetryDelay        func(attempt int) time.Duration
	Ordered           bool
	DropExpired       bool // else expired messages go to the dead letters
	Concurrency       int
	TopicConcurrency  map[string]int
	RateLimit         Rate
	TopicRateLimits   map[string]Rate

	// Metrics returns what records a subscription's deliveries (nil:
	// nothing).
	Metrics func(topic string) SubscriptionMetrics
	// ClientGone is called when a subscription finds the Redis client
	// closed: nothing would work again.
	ClientGone func(topic string)
	// Reinitialize creates the topic's consumer group again, when it
	// vanished (Redis restarted without persistence, or someone deleted
	// the keys).
	Reinitialize func(ctx context.Context, topic string) error
}

// Rate is a redisdelay.RateLimit: Messages per Per.
type Rate struct {
	Messages int
	Per      time.Duration
}

// Subscriber runs the subscriptions of one redisdelay.Subscriber and what
// they share: the connections, the log limiter, the sweep of idle
// subscriptions. Safe for concurrent use.
type Subscriber struct {
	config  Config
	logger  watermill.LoggerAdapter
	now     func() time.Time
	closing context.Context // ends with the redisdelay.Subscriber

	limiter *loglimit.Limiter // repeated errors of all subscriptions

	// The connections shared with the other components on the client
	// (internal/store/hub.go): background commands go through redis.
	hub         *store.Hub
	redis       *store.Gated
	ackRedis    *store.Gated // redis, gathering (see ackLoop)
	bellsDenied atomic.Bool  // Redis refuses them: subscriptions poll (see pollEvery)

	// Subscriptions waiting for their bell -> when they last read or were
	// peeked at (see sweep).
	idleMu sync.Mutex
	idle   map[*subscription]time.Time
	idleOf map[store.Shard][]*subscription // the same by partition, for handOff (a scan of idle per due tick was a seventh of a process's CPU at 1,000 topics)
	// The sweep runs while subscriptions run (active of them, under mu):
	// quiet ends it, and sweepDone is closed once it returned (see
	// activate), so that nothing of a Subscriber whose subscriptions all
	// ended talks to Redis, closed or not.
	mu        sync.Mutex
	active    int
	quiet     context.CancelFunc
	sweepDone chan struct{}

	// Test hooks (the root package's export_test.go): AckGate runs before
	// each flush of the acker goroutine; Unheld counts lease renewals that
	// found entries pending for a subscription that it does not hold,
	// Renewals those that ran (skipped ones excluded); Handoffs below.
	AckGate  func(context.Context)
	Unheld   atomic.Int64
	Renewals atomic.Int64
	// Handoffs counts the scheduler ticks subscriptions ran in their
	// reads (see handoff.go).
	Handoffs atomic.Int64
}

// New returns a Subscriber whose background work ends with closing, its
// commands sent through hub (which the caller releases).
func New(closing context.Context, config Config, hub *store.Hub, redis *store.Gated, logger watermill.LoggerAdapter) *Subscriber {
	return &Subscriber{
		config:   config,
		logger:   logger,
		now:      time.Now,
		closing:  closing,
		limiter:  loglimit.New(),
		hub:      hub,
		redis:    redis,
		ackRedis: redis.Gathering(),
		idle:     map[*subscription]time.Time{},
		idleOf:   map[store.Shard][]*subscription{},
	}
}

// Start runs a subscription of each of the topic's parts partitions until
// ctx ends, delivering to out. wait returns once they all ended, having
// handed back what they held; out is the caller's to close then.
func (s *Subscriber) Start(ctx context.Context, topic string, parts int, out chan *message.Message) (wait func()) {
	s.activate()
	var wg sync.WaitGroup
	// The consumer's name says which storage level it reads: the storage
	// level scan (internal/levels) tells a live consumer of an older
	// release by a name without it.
	consumer := store.NameAtLevel(s.config.Consumer+"-"+watermill.NewUUID(), store.LevelNewest)
	lvl := levels.Acquire(s.config.Client, s.config.Keys.Prefix, "subscriber", s.logger)
	var order *balance.Balance
	if s.config.Ordered {
		order = balance.New(parts)
		heartbeat := s.join(ctx, order, topic, consumer)
		wg.Add(1)
		go func() {
			defer wg.Done()
			heartbeat()
		}()
	}
	for part := range parts {
		var m *subMetrics
		if s.config.Metrics != nil {
			m = newSubMetrics(s.config.Metrics(topic))
		}
		sub := &subscription{
			s:        s,
			topic:    topic,
			part:     part,
			shard:    s.config.Keys.Shard(topic, part),
			consumer: consumer,
			lvl:      lvl,
			out:      out,
			leases:   leases{renewNow: make(chan struct{}, 1)},
			reads:    reads{bell: make(chan struct{}, 1), unwaited: make(chan struct{}, 1), handoff: make(chan *handoff)},
			flow:     flow{wake: make(chan struct{}, 1), slotWake: make(chan struct{}, 1)},
			order:    newOrdering(order),
			acks:     acks{m: m, wake: make(chan struct{}, 1)},
			m:        m,
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub.run(ctx)
		}()
	}
	return func() {
		wg.Wait()
		s.deactivate()
		lvl.Release()
	}
}

// activate counts a subscription that starts, starting the sweep and the
// watch of the notification channels' grant (watchGrant) with the first.
func (s *Subscriber) activate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active++; s.active > 1 {
		return
	}
	ctx, quiet := context.WithCancel(s.closing)
	done := make(chan struct{})
	s.quiet, s.sweepDone = quiet, done
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.sweep(ctx)
	}()
	go func() {
		defer wg.Done()
		s.watchGrant(ctx)
	}()
	go func() {
		wg.Wait()
		close(done)
	}()
}

// deactivate counts a subscription that ended; after the last, it ends
// the sweep and the watch of the channels' grant and returns once they
// returned (a peek or a probe under way runs to its end). A subscription
// starting meanwhile starts them again.
func (s *Subscriber) deactivate() {
	s.mu.Lock()
	s.active--
	quiet, done := s.quiet, s.sweepDone
	if s.active > 0 {
		quiet = nil
	} else {
		s.quiet, s.sweepDone = nil, nil
	}
	s.mu.Unlock()
	if quiet != nil {
		quiet()
		<-done
	}
}

const (
	nackFailed  nackKind = iota // a failed attempt (or an undecodable entry)
	nackSnoozed                 // Snooze: requeued with its attempt unchanged
	nackExpired                 // past its deadline: buried, never delivered
)
