package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// opTimeout bounds one Redis operation of a subscription that must not
// hang (lease renewal, a flush of queued acknowledgements, a hand-back), and
// the flush and the hand-back a subscription makes after its context is
// gone (while closing).
const opTimeout = 5 * time.Second

// Subscriber consumes messages of a consumer group. Each Subscribe call is an
// independent consumer in the group: it receives one message at a time and
// the next only after the previous one is acked or nacked (acks reach Redis
// asynchronously, in batches: see "Delivery" in the package documentation).
// Safe for concurrent use.
type Subscriber struct {
	config SubscriberConfig
	keys   store.Keys
	logger watermill.LoggerAdapter
	now    func() time.Time

	closing   context.Context // cancelled by Close
	close     context.CancelFunc
	closeOnce sync.Once
	subs      sync.WaitGroup

	policy []any // the group's policy, as init.lua stores it for reclaim

	mu          sync.Mutex
	closed      bool
	initialized map[string]bool
	sched       *scheduler
	scheduled   map[string]int // topic -> subscriptions that need its scheduling

	ticks <-chan struct{} // closed when the schedule ticks stopped (see startTicks)

	limiter  *logLimiter // repeated errors of all subscriptions
	goneOnce sync.Once   // the client was closed: logged once

	// The connections shared with the other components on the client
	// (internal/store/conns.go): background commands go through redis.
	hub         *store.Hub
	redis       *store.Gated
	bellsDenied atomic.Bool // Redis refuses them: subscriptions poll (see pollEvery)

	// Subscriptions waiting for their bell -> when they last read or were
	// peeked at (see sweep).
	idleMu sync.Mutex
	idle   map[*subscription]time.Time
	// The sweep runs while subscriptions run (active of them, under mu):
	// quiet ends it, and sweepDone is closed once it returned (see
	// activate), so that nothing of a Subscriber whose subscriptions all
	// ended talks to Redis, closed or not.
	active    int
	quiet     context.CancelFunc
	sweepDone chan struct{}

	// Test hooks (export_test.go): ackGate runs before each flush of the
	// acker goroutine; unheld counts lease renewals that found entries
	// pending for a subscription that it does not hold, renewals those
	// that ran (skipped ones excluded).
	ackGate  func(context.Context)
	unheld   atomic.Int64
	renewals atomic.Int64
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber. A nil logger logs nothing.
func NewSubscriber(config SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	s := &Subscriber{
		config:      config,
		keys:        store.Keys{Prefix: config.KeyPrefix},
		logger:      logger,
		now:         time.Now,
		initialized: map[string]bool{},
		scheduled:   map[string]int{},
		idle:        map[*subscription]time.Time{},
		policy:      groupPolicy(config),
		limiter:     newLogLimiter(),
		hub:         store.AcquireHub(config.Client),
	}
	s.redis = store.NewGated(s.hub)
	s.closing, s.close = context.WithCancel(context.Background())
	return s, nil
}

// groupPolicy is what schedulers need to reclaim the group's messages on
// their own (they may run in a Manager that never saw this config): the
// limits and the retry delays per attempt, with RetryDelay evaluated for
// the first attempts (the last value repeats).
func groupPolicy(c SubscriberConfig) []any {
	var delays []string
	if c.RetryDelay != nil {
		n := 64
		if c.MaxAttempts > 0 {
			n = min(c.MaxAttempts, n)
		}
		for attempt := 1; attempt <= n; attempt++ {
			delays = append(delays, strconv.FormatInt(roundUpMs(c.RetryDelay(attempt)).Milliseconds(), 10))
		}
	}
	rate := ""
	if c.GroupRateLimit.Messages > 0 {
		rate = strconv.Itoa(c.GroupRateLimit.Messages) + "/" + strconv.FormatInt(c.GroupRateLimit.Per.Milliseconds(), 10)
	}
	return []any{
		max(c.MaxAttempts, 0),
		c.VisibilityTimeout.Milliseconds(),
		max(c.MaxDeadLetters, 0),
		c.ConsumerIdleTimeout.Milliseconds(),
		strings.Join(delays, ","),
		c.GroupConcurrency,
		rate,
	}
}

// SubscribeInitialize creates the consumer group for the topic if it does not
// exist, so messages published from now on are kept for it. A new group
// starts with the messages still in the topic's ready stream.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return s.initialize(context.Background(), topic)
}

// initialize registers the topic with its partition count (failing on a
// mismatch) and creates the consumer group on every partition, once per
// topic, or again after forget.
func (s *Subscriber) initialize(ctx context.Context, topic string) error {
	s.mu.Lock()
	done := s.initialized[topic]
	s.mu.Unlock()
	if done {
		return nil
	}
	parts := s.partitions(topic)
	if _, err := registerTopic(ctx, s.redis, s.keys, topic, parts, "SubscriberConfig"); err != nil {
		return err
	}
	group := s.config.ConsumerGroup
	for part := range parts {
		sh := s.keys.Shard(topic, part)
		if _, err := store.InitGroup(ctx, s.redis, sh, group, s.policy); err != nil {
			return wrap(err, "create consumer group %q for partition %d of topic %q", group, part, topic)
		}
	}
	s.mu.Lock()
	s.initialized[topic] = true
	s.mu.Unlock()
	return nil
}

// partitions is the configured partition count of a topic.
func (s *Subscriber) partitions(topic string) int {
	return partitionCount(s.config.Partitions, s.config.TopicPartitions, topic)
}

// Subscribe starts a consumer of the topic in the subscriber's consumer
// group, one per partition of the topic, all delivering to the returned
// channel. The channel is closed when ctx is cancelled or the Subscriber is
// closed; messages it fetched but did not get acked by then are handed back
// to the group at once. Either way, once the channel is closed nothing of
// the subscription uses Redis: the topic's scheduling, unless another
// subscription of the Subscriber needs it, has ended and released its
// lease, so another process takes the topic over at once.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.subs.Add(1)
	s.mu.Unlock()

	if err := s.initialize(ctx, topic); err != nil {
		s.subs.Done()
		return nil, err
	}
	parts := s.partitions(topic)
	s.activate()
	if !s.config.DisableScheduler {
		s.schedule(topic, parts)
	}

	out := make(chan *message.Message)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	var wg sync.WaitGroup
	consumer := s.config.Consumer + "-" + watermill.NewUUID()
	var order *balance
	if s.config.Ordered {
		order = newBalance(parts)
		heartbeat := s.join(ctx, order, topic, consumer)
		wg.Add(1)
		go func() {
			defer wg.Done()
			heartbeat()
		}()
	}
	for part := range parts {
		sub := &subscription{
			s:        s,
			topic:    topic,
			part:     part,
			shard:    s.keys.Shard(topic, part),
			consumer: consumer,
			out:      out,
			ackWake:  make(chan struct{}, 1),
			order:    order,
			unstick:  unstick(order),
			bell:     make(chan struct{}, 1),
			flowWake: make(chan struct{}, 1),
			slotWake: make(chan struct{}, 1),
			renewNow: make(chan struct{}, 1),
			m:        newSubMetrics(s.config.Metrics, topic, s.config.ConsumerGroup),
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub.run(ctx)
		}()
	}
	go func() {
		defer s.subs.Done()
		wg.Wait()
		// Before the channel closes, however the subscription ended
		// (Close, or its ctx): its scheduling ends, leases released.
		if !s.config.DisableScheduler {
			s.unschedule(topic)
		}
		s.deactivate()
		stop()
		cancel()
		close(out)
	}()
	return out, nil
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

// schedule starts scheduling the topic for a subscription, unless another
// subscription already needs it; unschedule ends that.
func (s *Subscriber) schedule(topic string, parts int) {
	// Under mu, so an unschedule cannot remove what this adds.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sched == nil {
		config := ManagerConfig{Client: s.config.Client, KeyPrefix: s.config.KeyPrefix, CheckInterval: s.config.CheckInterval, Metrics: s.config.Metrics}
		config.setDefaults()
		s.sched = newScheduler(config, s.logger)
		s.sched.gone = s.clientGone
		s.sched.start(s.closing, false, s.hub)
		// The schedules' ticks end with the scheduler (see unschedule).
		s.ticks = startTicks(s.sched.ctx, s.sched, s.logger)
	}
	s.scheduled[topic]++
	s.sched.add(topic, parts)
}

// unschedule ends the scheduling of the topic when the last subscription
// that needed it ended, and returns once its loops ended, their leases
// released, so a process that ends then leaves none behind (another
// scheduler would wait for it to expire). After the Subscriber's last
// scheduled topic the scheduler stops: its schedule ticks and ACL watch
// too. A subscription starting meanwhile starts another.
func (s *Subscriber) unschedule(topic string) {
	s.mu.Lock()
	if s.scheduled[topic]--; s.scheduled[topic] > 0 {
		s.mu.Unlock()
		return
	}
	delete(s.scheduled, topic)
	sched, ticks := s.sched, s.ticks
	wait := sched.remove(topic)
	last := len(s.scheduled) == 0
	if last {
		s.sched, s.ticks = nil, nil
	}
	s.mu.Unlock()
	wait()
	if last {
		sched.stop()
		<-ticks
	}
}

// clientGone stops every subscription and the scheduler when the Redis
// client was closed under them (nothing would work again), logging it once.
func (s *Subscriber) clientGone(topic string) {
	s.goneOnce.Do(func() {
		s.logger.Error(fmt.Sprintf("redisdelay: the Redis client was closed while subscribed to topic %q; "+
			"close the Subscriber before its client. Subscriptions stopped", topic), redis.ErrClosed, nil)
	})
	s.close()
}

// Close stops every subscription, hands back the messages they hold, and
// returns once all their channels are closed. It does not close the Redis
// client. Calling it again is a no-op.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.close()
		s.subs.Wait()
		s.mu.Lock()
		sched, ticks := s.sched, s.ticks
		s.mu.Unlock()
		if sched != nil {
			sched.stop()
			<-ticks
		}
		s.hub.Release()
	})
	return nil
}

// subscription is one consumer of a consumer group.
type subscription struct {
	s        *Subscriber
	topic    string
	part     int         // partition of the topic
	shard    store.Shard // its keys
	consumer string
	out      chan *message.Message // shared by the topic's partitions

	// What the subscription holds, for lease renewal and for handing back
	// what waits behind a slow handler. mu serialises handing out the next
	// message with that hand-back.
	mu       sync.Mutex
	batch    []entry   // fetched, not settled; batch[0] is handled or next
	handling bool      // a handler has batch[0]
	since    time.Time // when it got it
	recheck  bool      // Redis holds entries for this consumer it did not receive
	// Acked entries not yet acknowledged in Redis (see acker.go): ids in
	// the ready and in the redelivery stream, still held, queued since
	// ackSince (zero while none is).
	ackReady, ackRedo []string
	ackSince          time.Time

	ackWake chan struct{} // wakes the acker; capacity 1
	flushMu sync.Mutex    // one flush of the ack queue at a time

	// Lease renewal (see extendLeases): renewals were skipped since the
	// last one (and the ticker stopped); renewNow (capacity 1) starts it
	// again. storedVis is the group's stored visibility timeout as last
	// read (renewal, or a read of new entries: see readNew), 0 before.
	skipped   atomic.Bool
	renewNow  chan struct{}
	storedVis atomic.Int64

	deadline *time.Timer // the handler's (see startDeadline; run goroutine only)

	// Ordered subscriptions only (see ordered.go): shared with the
	// topic's other partitions; whether this one owns its partition; set
	// by lease renewal when the ownership ran out.
	order      *balance
	owns, lost atomic.Bool
	declined   bool // own skipped a take last time (run goroutine only)
	// What the run goroutine is doing, and since when (see enter and
	// stuck); unstick (capacity 1) wakes a send to out once the partition
	// is lost, so that it is given up.
	phase   atomic.Int64
	unstick chan struct{}

	// Reads of new messages (reader.go), run goroutine only: the last
	// read found fewer than it asked for, so the next arms the bell; that
	// read found fewer too, so the next waits for it (unarmed: Redis
	// refused to arm it, so it polls). bell (capacity 1) is rung by the
	// hub. visRead is when a read last read the stored visibility timeout.
	drained, armed, unarmed bool
	waiting                 atomic.Bool // waiting for the bell (waitBell), read by the acker
	bell                    chan struct{}
	visRead                 time.Time
	// Grouped messages (see fair.lua): groupsRung, set by the bell's
	// listener, says a group may be served; groupMore that the last pick
	// left groups to serve; groupWake when a group asleep under its rate
	// limit wakes; groupsChecked when a read last picked (see
	// groupCheckEvery).
	groupsRung    atomic.Bool
	groupMore     bool
	groupWake     time.Time
	groupsChecked time.Time

	// Flow control (flowcontrol.go). Run goroutine only: the group was
	// paused at the last check, made at flowChecked; messages of the last
	// rate-limit reservation not fetched (negative: fetched beyond it).
	// flowNotified: a pause or resume was published (or the notifications
	// resubscribed) since; flowWake wakes a paused subscription for it.
	paused       bool
	flowChecked  time.Time
	unused       int
	holdsSlot    atomic.Bool   // a concurrency slot (flowcontrol.go)
	slotWake     chan struct{} // a slot was released; capacity 1
	reserved     int64         // the end of the rate limiter's reservation unused is of (gate.lua)
	flowNotified atomic.Bool
	flowWake     chan struct{}

	m *subMetrics // nil without SubscriberConfig.Metrics
}

// entry is a message read from one of the two streams a consumer reads:
// the topic's ready stream and its group's redelivery stream.
type entry struct {
	stream string
	redo   bool
	msg    redis.XMessage
}

// run reads and delivers the subscription's messages until ctx ends or
// the client is closed, then hands back what it holds.
func (sub *subscription) run(ctx context.Context) {
	sub.s.logger.Debug("redisdelay: subscribed", sub.fields())
	defer sub.listen()()
	defer sub.startBackground().stop()

	pos := readPos{cursor: fromStart}
	for ctx.Err() == nil {
		if sub.order != nil {
			sub.enter(phaseStep)
			owns, stop := sub.takeOwnership(ctx, &pos)
			if stop {
				return
			}
			if !owns {
				sleep(ctx, sub.s.orderedPace())
				continue
			}
		}
		if pos.history && sub.flushBeforeHistory(ctx) {
			return
		}
		if sub.armed && !pos.history {
			// Read all there was: wait until there is more, then check
			// the ownership and the gate again.
			sub.armed = false
			sub.waitBell(ctx)
			continue
		}
		count := sub.s.config.BatchSize
		if !pos.history {
			// Pause and rate limit (flowcontrol.go): only new messages.
			var err error
			count, err = sub.gate(ctx)
			sub.enter(phaseStep)
			if err != nil {
				if sub.readFailed(ctx, err, &pos) {
					return
				}
				continue
			}
			if count == 0 {
				continue
			}
		}
		entries, err := sub.read(ctx, pos.history, pos.cursor, count)
		if !pos.history {
			// A read takes up to count from each of its two streams: an
			// excess is charged to the next reservation.
			sub.unused -= len(entries)
		}
		if err != nil {
			if sub.readFailed(ctx, err, &pos) {
				return
			}
			continue
		}
		pos.failures = 0
		if pos.history && len(entries) == 0 {
			pos.history = false
		}
		if !sub.deliverAll(ctx, entries, &pos) {
			return
		}
		if sub.takeRecheck() {
			// A read whose reply was lost (go-redis retried it on a new
			// connection) left entries pending for this consumer.
			pos.rewind()
		}
	}
}

// readPos is where a subscription reads next. After a connection error, or
// when lease renewal finds entries pending for this consumer that it never
// received (a read whose reply was lost and which go-redis retried), the
// consumer reads its own pending entries ("history", from cursor: an id
// per stream) before new ones.
type readPos struct {
	history  bool
	cursor   [2]string
	failures int // consecutive failed reads
}

// fromStart is the cursor of a history read from the first pending entry.
var fromStart = [2]string{"0", "0"}

func (r *readPos) rewind() { r.history, r.cursor = true, fromStart }

// ended reports whether the subscription must stop after err: its ctx
// ended, or the client was closed under it (the Subscriber is told).
func (sub *subscription) ended(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	if store.IsClientClosed(err) {
		sub.s.clientGone(sub.topic)
		return true
	}
	return false
}

// background is the lease renewal and the acker of a subscription, which
// run beside its reads.
type background struct {
	sub                 *subscription
	stopLease, stopAcks context.CancelFunc
	leaseDone, ackDone  chan struct{}
}

// startBackground starts the lease renewal and the acker. The lease
// outlives the subscription's ctx: a handler finishing during Close keeps
// its message until the final hand-back, which waits for the renewals to
// stop so none runs after it.
func (sub *subscription) startBackground() *background {
	b := &background{sub: sub, leaseDone: make(chan struct{}), ackDone: make(chan struct{})}
	var leaseCtx, ackCtx context.Context
	leaseCtx, b.stopLease = context.WithCancel(context.Background())
	go func() {
		defer close(b.leaseDone)
		sub.extendLeases(leaseCtx)
	}()
	ackCtx, b.stopAcks = context.WithCancel(context.Background())
	go func() {
		defer close(b.ackDone)
		sub.ackLoop(ackCtx)
	}()
	return b
}

// stop ends the acker and the lease renewal, then hands back what the
// subscription holds. The acks go to Redis before the hand-back, which
// would otherwise return acked messages to the group.
func (b *background) stop() {
	sub, s := b.sub, b.sub.s
	b.stopAcks()
	<-b.ackDone
	flushCtx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err := sub.drainAcks(flushCtx)
	cancel()
	if err != nil && !store.IsClientClosed(err) {
		s.logger.Error("redisdelay: cannot write acknowledgements to Redis before closing; those messages stay pending and are delivered again", err,
			sub.fields().Add(watermill.LogFields{"count": sub.queuedAcks()}))
	}
	b.stopLease()
	<-b.leaseDone
	if sub.owns.Load() {
		sub.disown()
	} else {
		_ = sub.release("", "")
	}
}

// takeOwnership makes an ordered subscription own its partition before it
// reads (see own); a partition just taken over is read from its pending
// entries first.
func (sub *subscription) takeOwnership(ctx context.Context, pos *readPos) (owns, stop bool) {
	owns, taken, err := sub.own(ctx)
	if err != nil {
		if sub.ended(ctx, err) {
			return false, true
		}
		sub.s.limiter.errorf(sub.s.logger, "redisdelay: cannot take the ownership of a partition; retrying", err, sub.fields())
	}
	if owns && taken {
		pos.rewind()
	}
	return owns, false
}

// flushBeforeHistory writes the queued acks before a history read: what is
// pending for this consumer includes acked entries until their
// acknowledgement is in Redis. It reports whether the subscription must
// stop.
func (sub *subscription) flushBeforeHistory(ctx context.Context) (stop bool) {
	err := sub.drainAcks(ctx)
	if err == nil {
		return false
	}
	if sub.ended(ctx, err) {
		return true
	}
	sub.s.limiter.errorf(sub.s.logger, "redisdelay: cannot write acknowledgements to Redis; acked messages may be delivered again", err, sub.fields())
	return false
}

// readFailed handles a failed read: it recreates a vanished consumer
// group, and pauses before the next read, which reads the history. It
// reports whether the subscription must stop.
func (sub *subscription) readFailed(ctx context.Context, err error, pos *readPos) (stop bool) {
	s := sub.s
	if sub.ended(ctx, err) {
		return true
	}
	pos.failures++
	wait := backoff(pos.failures, 2*time.Second)
	s.limiter.errorf(s.logger, "redisdelay: read failed; retrying", err, sub.fields().Add(watermill.LogFields{"retry_in": wait.String()}))
	if strings.HasPrefix(err.Error(), "NOGROUP") {
		// The group vanished (Redis restarted without persistence, or
		// someone deleted the keys): create it again.
		s.mu.Lock()
		delete(s.initialized, sub.topic)
		s.mu.Unlock()
		if err := s.initialize(ctx, sub.topic); err != nil {
			s.limiter.errorf(s.logger, "redisdelay: cannot recreate consumer group", err, sub.fields())
		}
	}
	pos.rewind()
	sub.enter(phaseWait)
	sleep(ctx, wait)
	return false
}

// deliverAll delivers the entries of a read one by one, moving the history
// cursor past each. It returns false when the subscription must stop.
func (sub *subscription) deliverAll(ctx context.Context, entries []entry, pos *readPos) bool {
	sub.mu.Lock()
	sub.batch = entries
	sub.mu.Unlock()
	if len(entries) > 0 {
		// Once held (see extendLeases).
		sub.fetched()
	}
	for {
		e, ok := sub.next()
		if !ok {
			return true
		}
		if pos.history {
			pos.cursor[e.streamIndex()-1] = e.msg.ID
		}
		sub.enter(phaseStep)
		ok, acked := sub.deliver(ctx, e)
		sub.settled(e, acked)
		if !ok {
			return false
		}
	}
}

// fields identify the subscription in logs.
func (sub *subscription) fields() watermill.LogFields {
	f := watermill.LogFields{"topic": sub.topic, "consumer_group": sub.s.config.ConsumerGroup, "consumer": sub.consumer}
	if sub.part > 0 {
		f["partition"] = sub.part
	}
	return f
}

// next hands out the first message of the batch, if any is left (none
// once an ordered subscription lost its partition: the new owner took the
// rest over).
func (sub *subscription) next() (entry, bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.lost.Load() {
		clear(sub.batch)
		sub.batch = nil
	}
	if len(sub.batch) == 0 {
		return entry{}, false
	}
	sub.handling, sub.since = true, time.Now()
	return sub.batch[0], true
}

// settled records that the handled message was acked or nacked (or
// handed back); an acked one moves to the ack queue, still held.
func (sub *subscription) settled(e entry, acked bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.handling = false
	if len(sub.batch) > 0 {
		sub.batch[0] = entry{}
		sub.batch = sub.batch[1:]
	}
	if acked {
		sub.queueAck(e)
	}
}

func (sub *subscription) takeRecheck() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	r := sub.recheck
	sub.recheck = false
	return r
}

// renewLeases extends the lease of what the subscription holds and returns
// the group's stored visibility timeout. First, if a handler has run longer
// than slow, the messages fetched behind it go back to the group (attempt
// unchanged) for other consumers to take while it runs on.
func (sub *subscription) renewLeases(ctx context.Context, slow time.Duration) (time.Duration, error) {
	s := sub.s
	sub.mu.Lock()
	// An ordered subscription keeps what waits behind a slow handler:
	// nobody else may handle its partition's messages meanwhile.
	slowNow := sub.order == nil && sub.handling && len(sub.batch) > 1 && time.Since(sub.since) >= slow
	queued := len(sub.ackReady)+len(sub.ackRedo) > 0
	sub.mu.Unlock()
	if slowNow && queued {
		// The hand-back returns everything pending but the handled entry:
		// acked ones must be acknowledged in Redis first. If that fails,
		// the hand-back waits for the next renewal.
		_, _ = sub.flushAcks(ctx)
	}
	sub.mu.Lock()
	// Acks queued meanwhile mean the handler moved on (since changed).
	if slowNow && sub.handling && len(sub.batch) > 1 && time.Since(sub.since) >= slow && len(sub.ackReady)+len(sub.ackRedo) == 0 {
		if sub.release(strconv.Itoa(sub.batch[0].streamIndex()), sub.batch[0].msg.ID) != nil {
			// Some may have gone back before the error: whatever is still
			// pending for this consumer is read again after this message.
			sub.recheck = true
		}
		sub.batch = sub.batch[:1]
	}
	// Held: the batch (unless the partition was lost: the new owner took
	// it over), and acked entries whose acknowledgement is not in Redis
	// yet.
	var ready, redo []any
	held := sub.batch
	if sub.lost.Load() {
		held = nil
	}
	for _, e := range held {
		if e.redo {
			redo = append(redo, e.msg.ID)
		} else {
			ready = append(ready, e.msg.ID)
		}
	}
	for _, id := range sub.ackReady {
		ready = append(ready, id)
	}
	for _, id := range sub.ackRedo {
		redo = append(redo, id)
	}
	sub.mu.Unlock()

	group := s.config.ConsumerGroup
	r, err := store.Extend(ctx, s.redis, sub.shard, group, sub.consumer, ready, redo)
	if err != nil {
		return 0, fmt.Errorf("extend the lease of %d held message(s): %w", len(ready)+len(redo), err)
	}
	if sub.holdsSlot.Load() {
		group := s.config.ConsumerGroup
		if _, err := store.Slot(ctx, s.redis, s.keys.Shard(sub.topic, 0), group, "renew", sub.slotHolder(), 0, 3*sub.renewEvery()); err != nil {
			return 0, fmt.Errorf("renew the lease of a concurrency slot: %w", err)
		}
	}
	if sub.owns.Load() && !sub.lost.Load() {
		if since, stuck := sub.stuck(); stuck {
			sub.abandon(ctx, since)
			return r.Vis, nil
		}
		if n, err := sub.ownOp(ctx, "renew"); err != nil {
			return 0, fmt.Errorf("renew the ownership of the partition: %w", err)
		} else if n == 0 {
			sub.loseOwnership()
		}
	}
	if r.Unheld > 0 {
		s.unheld.Add(1)
		sub.mu.Lock()
		sub.recheck = true
		sub.mu.Unlock()
	}
	return r.Vis, nil
}

// extendLeases renews the lease of every message the subscription holds
// three times per VisibilityTimeout, until ctx ends. Reclaim uses the
// group's stored timeout, written by the subscriber of the group that
// started last; when that is shorter (a rollout changing it), renewals
// follow it (see renewEvery), so live consumers keep their messages
// either way.
//
// A renewal with nothing to do is skipped (see needless), and the ticker
// stopped, so an idle subscription costs nothing here; the first read that
// fetches messages after a skipped renewal starts it again (renewNow), at
// the pace of the stored timeout reads follow (see readNew).
func (sub *subscription) extendLeases(ctx context.Context) {
	every := sub.renewEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now() // the last renewal that ran (the start counts as one)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// skipped is set before needless looks: a fetch either finds
			// it set (and starts the ticker) or is seen by needless.
			sub.skipped.Store(true)
			if sub.needless(last) {
				t.Stop()
				continue
			}
			sub.skipped.Store(false)
		case <-sub.renewNow:
			every = sub.renewEvery()
			t.Reset(every)
			continue
		}
		sub.s.renewals.Add(1)
		last = time.Now()
		opCtx, cancel := context.WithTimeout(ctx, opTimeout)
		stored, err := sub.renewLeases(opCtx, every)
		cancel()
		if err != nil && ctx.Err() == nil && !store.IsClientClosed(err) {
			sub.s.limiter.errorf(sub.s.logger, "redisdelay: cannot extend the lease of held messages; they are reclaimed if this lasts beyond VisibilityTimeout", err,
				sub.fields())
		}
		if stored > 0 {
			sub.storedVis.Store(int64(stored))
		}
		if want := sub.renewEvery(); want != every {
			every = want
			t.Reset(every)
		}
	}
}

// renewEvery is how often held messages' leases are renewed: three times
// per visibility timeout, the group's stored one when that is shorter.
func (sub *subscription) renewEvery() time.Duration {
	vis := sub.s.config.VisibilityTimeout
	if stored := time.Duration(sub.storedVis.Load()); stored > 0 {
		vis = min(vis, stored)
	}
	return vis / 3
}

// needless reports whether a lease renewal has nothing to do: the
// subscription is not ordered (those renew their ownership with it), holds
// nothing (no lease to extend, no slow handler to unburden), and renewed
// within BlockTime (last). A renewal also finds entries pending for the
// consumer that it does not hold, which a read whose reply was lost (and
// which go-redis retried) left: so a subscription that fetches looks at
// least once per BlockTime plus a renewal period, and an idle one is
// looked at by the Subscriber's sweep (peek.lua).
func (sub *subscription) needless(last time.Time) bool {
	if sub.order != nil || time.Since(last) >= sub.s.config.BlockTime {
		return false
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return len(sub.batch) == 0 && len(sub.ackReady)+len(sub.ackRedo) == 0
}

// fetched is called once the entries of a read are held: the renewals
// start again if they were skipped meanwhile (see extendLeases).
func (sub *subscription) fetched() {
	if sub.skipped.Swap(false) {
		select {
		case sub.renewNow <- struct{}{}:
		default:
		}
	}
}

// read reads new entries (waiting for them, see reader.go) or, with history, the
// consumer's own pending entries from cursor on.
func (sub *subscription) read(ctx context.Context, history bool, cursor [2]string, count int) ([]entry, error) {
	var res []redis.XStream
	var err error
	if history {
		res, err = sub.readGroup(ctx, count, cursor[1], cursor[0])
	} else {
		res, err = sub.readNew(ctx, count)
	}
	if err != nil {
		return nil, err
	}
	redo := sub.shard.Redelivery(sub.s.config.ConsumerGroup)
	entries := make([]entry, 0, entryCount(res))
	// Redeliveries come first: they were due earlier.
	for _, xs := range res {
		for _, m := range xs.Messages {
			entries = append(entries, entry{stream: xs.Stream, redo: xs.Stream == redo, msg: m})
		}
	}
	return entries, nil
}

// deliver hands one entry to the subscriber's channel and settles it when the
// handler acks or nacks. It returns false when the subscription is closing,
// and acked when the entry is to be acknowledged (queued by the caller). A
// nack is settled here, synchronously.
func (sub *subscription) deliver(ctx context.Context, e entry) (ok, acked bool) {
	s := sub.s
	fields := func() watermill.LogFields {
		return sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID})
	}
	if e.msg.Values == nil {
		// The entry is pending but its content is gone (deleted by hand):
		// nothing can be delivered, so stop it blocking the pending list.
		s.logger.Error("redisdelay: pending entry has no content; acknowledging it", nil, fields())
		return ctx.Err() == nil, true
	}
	attempt := e.attempt()
	raw, hasBody := store.EntryBody(e.msg)
	// store.Decode only reads its input and copies what it keeps, so the
	// string's bytes serve without a copy.
	body := unsafe.Slice(unsafe.StringData(raw), len(raw))
	msg, err := store.Decode(body)
	if err != nil {
		// Poison input (another tool or version wrote it): it can never be
		// delivered, so it goes to the dead letters, where it can be seen.
		if !hasBody {
			err = fmt.Errorf("%w: entry has no field m, only %v (written by another tool?)", store.ErrCorrupt, fieldNames(e.msg.Values))
		}
		s.logger.Error("redisdelay: cannot decode entry; moving it to the dead letters", err, fields())
		sub.settle(ctx, func(ctx context.Context) error {
			return sub.settleNack(ctx, e, attempt, 0, []byte(raw), err.Error(), nackFailed)
		})
		return ctx.Err() == nil, false
	}
	for {
		if expired, acked := sub.expire(ctx, e, msg, attempt); expired {
			return ctx.Err() == nil, acked
		}
		ok, acked, nacked, deliveredUntil := sub.handle(ctx, e, msg, attempt)
		if nacked == nil {
			return ok, acked
		}
		// An ordered subscription retries a nacked message here, before any
		// later message of the partition: the entry stays pending, its lease
		// renewed, while the retry delay runs. A snoozed one keeps its attempt.
		if d, snoozed := takeSnooze(nacked.Metadata); snoozed {
			sleep(ctx, d)
			if ctx.Err() != nil {
				return false, false
			}
			msg = nacked.Copy()
			continue
		}
		d, err := nackDelay(nacked.Metadata, deliveredUntil, attempt, s.now(), s.config.RetryDelay)
		if errors.Is(err, errDelayTooFar) {
			sub.settle(ctx, func(ctx context.Context) error { return sub.nack(ctx, e, nacked, attempt, deliveredUntil) })
			return ctx.Err() == nil, false
		}
		if err != nil {
			s.logger.Error("redisdelay: nacked message has invalid delay metadata; using RetryDelay", err,
				fields().Add(watermill.LogFields{"message_uuid": nacked.UUID}))
		}
		sleep(ctx, d)
		if ctx.Err() != nil {
			return false, false // handed back on close: delivered again, attempt unchanged
		}
		msg = nacked.Copy()
		attempt++
	}
}

// handle delivers one attempt of a message and waits until it is settled.
// A nacked message that an ordered subscription retries in place is
// returned, with its delivery mark (see markDelivered), instead of being
// settled.
func (sub *subscription) handle(ctx context.Context, e entry, msg *message.Message, attempt int) (ok, acked bool, retry *message.Message, deliveredUntil string) {
	s := sub.s
	deliveredUntil = markDelivered(msg.Metadata, strconv.Itoa(attempt), s.now())
	delete(msg.Metadata, snoozeKey) // only a Snooze of this delivery counts

	msgCtx := newMsgContext(ctx)
	defer msgCtx.end()
	msg.SetContext(msgCtx)
	limit := sub.handlerTimeout(msg.Metadata)
	if !sub.takeSlot(ctx) {
		return false, false, nil, ""
	}
	defer sub.releaseSlot()

	if !sub.handOut(ctx, msg) {
		return ctx.Err() == nil, false, nil, ""
	}
	sub.m.delivered(attempt, e.msg.ID)
	sub.enter(phaseWait) // bounded by the handler timeout
	// Until ctx ends, wait for the handler. Then (closing) its context is
	// cancelled: hand back what was fetched but not delivered at once, give
	// the handler CloseTimeout to finish, and let run's release hand back
	// the message if it does not.
	closing := ctx.Done()
	var timeout, deadline <-chan time.Time
	if limit > 0 {
		deadline = sub.startDeadline(limit)
		defer sub.deadline.Stop()
	}
	for {
		select {
		case <-msg.Acked():
			return timeout == nil, true, nil, ""
		case <-msg.Nacked():
			if timeout == nil && (sub.retriesInPlace(attempt) || sub.order != nil && msg.Metadata.Get(snoozeKey) != "") {
				return true, false, msg, deliveredUntil
			}
			sub.settle(ctx, func(ctx context.Context) error { return sub.nack(ctx, e, msg, attempt, deliveredUntil) })
			return timeout == nil, false, nil, ""
		case <-deadline:
			return sub.timedOut(ctx, e, msg, attempt, limit)
		case <-closing:
			closing, deadline = nil, nil // CloseTimeout bounds the handler now
			// The hand-back returns everything pending but this entry, so
			// the queued acks go to Redis first; if they cannot, the final
			// release hands back after another try.
			flushCtx, cancelFlush := context.WithTimeout(context.Background(), opTimeout)
			if sub.drainAcks(flushCtx) == nil {
				_ = sub.release(strconv.Itoa(e.streamIndex()), e.msg.ID)
				sub.mu.Lock()
				sub.batch = sub.batch[:1] // the rest was handed back (or, on error, is reclaimed)
				sub.mu.Unlock()
			}
			cancelFlush()
			wait := time.NewTimer(s.config.CloseTimeout)
			defer wait.Stop()
			timeout = wait.C
		case <-timeout:
			s.logger.Info("redisdelay: handler did not finish within CloseTimeout; handing its message back to the group",
				sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "message_uuid": msg.UUID}))
			return false, false, nil, ""
		}
	}
}

// handlerTimeout is how long a handler may take with a message (see
// SubscriberConfig.HandlerTimeout); negative: no bound.
func (sub *subscription) handlerTimeout(md message.Metadata) time.Duration {
	d, err := messageHandlerTimeout(md)
	if err != nil {
		// Publish refuses it: another writer stored it.
		sub.s.limiter.errorf(sub.s.logger, "redisdelay: message has an invalid handler timeout; using SubscriberConfig.HandlerTimeout", err, sub.fields())
	}
	if d == 0 {
		d = sub.s.config.HandlerTimeout
	}
	return d
}

// startDeadline starts the subscription's handler deadline timer, one
// reused for every delivery (a timer per message would allocate on the hot
// path).
func (sub *subscription) startDeadline(limit time.Duration) <-chan time.Time {
	if sub.deadline == nil {
		sub.deadline = time.NewTimer(limit)
	} else {
		sub.deadline.Reset(limit)
	}
	return sub.deadline.C
}

// timedOut gives up on a handler that ran past its deadline: the delivery
// is a failed attempt whose error names the timeout, retried in place by an
// ordered subscription (before any later message of its partition) or
// settled as a Nack (a retry, or a dead letter on the last attempt). The
// handler may still be running and still change msg, so the message to
// store is decoded again from the entry; its late Ack or Nack is ignored.
func (sub *subscription) timedOut(ctx context.Context, e entry, msg *message.Message, attempt int, limit time.Duration) (ok, acked bool, retry *message.Message, deliveredUntil string) {
	s := sub.s
	fields := sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "message_uuid": msg.UUID, "attempt": attempt, "handler_timeout": limit.String()})
	s.logger.Error("redisdelay: handler did not Ack or Nack within its timeout; the delivery counts as a failed attempt (the handler may still be running)", nil, fields)
	sub.m.timedOut()
	sub.recordTimeout(ctx)
	go ignoreLate(ctx, msg, s.logger, fields)

	raw, _ := store.EntryBody(e.msg)
	failed, err := store.Decode([]byte(raw))
	if err != nil { // decoded before it was delivered: cannot happen
		return ctx.Err() == nil, false, nil, ""
	}
	delete(failed.Metadata, snoozeKey)
	deliveredUntil = markDelivered(failed.Metadata, strconv.Itoa(attempt), s.now())
	failed.Metadata.Set(ErrorKey, fmt.Sprintf("handler timed out after %s (SubscriberConfig.HandlerTimeout, or metadata %s)", limit, HandlerTimeoutKey))
	if sub.retriesInPlace(attempt) {
		return true, false, failed, deliveredUntil
	}
	sub.settle(ctx, func(ctx context.Context) error { return sub.nack(ctx, e, failed, attempt, deliveredUntil) })
	return ctx.Err() == nil, false, nil, ""
}

// recordTimeout counts a handler timeout in the group's meta hash, where
// Inspector.Health finds it; a failure is logged, the timeout's handling
// goes on.
func (sub *subscription) recordTimeout(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	err := store.CountTimeout(ctx, sub.s.redis, sub.shard, sub.s.config.ConsumerGroup, sub.s.now().UnixMilli())
	if err != nil && ctx.Err() == nil {
		sub.s.limiter.errorf(sub.s.logger, "redisdelay: cannot record a handler timeout for Inspector.Health", err, sub.fields())
	}
}

// ignoreLate logs the Ack or Nack of a handler that had timed out, until
// the subscription ends: the message was retried or dead-lettered already.
func ignoreLate(ctx context.Context, msg *message.Message, logger watermill.LoggerAdapter, fields watermill.LogFields) {
	what := "Ack"
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
		what = "Nack"
	case <-ctx.Done():
		return
	}
	logger.Info("redisdelay: "+what+" of a message after its handler timeout, ignored (its delivery counted as failed)", fields)
}

// settle runs a nack (or dead-lettering) until Redis takes it, so the next
// message is delivered only after the previous one is settled (acks are
// queued instead: see acker.go). It tries at least once;
// if the subscription ends (ctx) or the client is closed first, the entry
// stays pending and is handed back or reclaimed: delivered again, never lost.
func (sub *subscription) settle(ctx context.Context, op func(context.Context) error) {
	for failures := 1; ; failures++ {
		opCtx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := op(opCtx)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
			sub.s.limiter.errorf(sub.s.logger, "redisdelay: cannot settle message; it stays pending and is delivered again", err,
				sub.fields())
			return
		}
		wait := backoff(failures, 2*time.Second)
		sub.s.limiter.errorf(sub.s.logger, "redisdelay: cannot settle message; retrying", err,
			sub.fields().Add(watermill.LogFields{"retry_in": wait.String()}))
		sleep(ctx, wait)
	}
}

// notPending logs a settlement of an entry that was no longer pending for
// the group: reclaimed after its lease ran out, handed back, or settled by a
// retry whose first reply was lost. In the first two cases it is delivered
// again.
func (sub *subscription) notPending(e entry, what string) {
	sub.s.logger.Info("redisdelay: "+what+" of a message no longer pending (reclaimed or handed back; it may be delivered again)",
		sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID}))
}

func (sub *subscription) nack(ctx context.Context, e entry, msg *message.Message, attempt int, deliveredUntil string) error {
	s := sub.s
	if d, snoozed := takeSnooze(msg.Metadata); snoozed {
		return sub.settleNack(ctx, e, attempt, d, store.Encode(msg), "", nackSnoozed)
	}
	d, err := nackDelay(msg.Metadata, deliveredUntil, attempt, s.now(), s.config.RetryDelay)
	reason := ""
	switch {
	case errors.Is(err, errDelayTooFar):
		reason = err.Error()
	case err != nil:
		s.logger.Error("redisdelay: nacked message has invalid delay metadata; using RetryDelay", err,
			sub.fields().Add(watermill.LogFields{"message_uuid": msg.UUID}))
	}
	if max := s.config.MaxAttempts; reason == "" && max > 0 && attempt >= max {
		reason = msg.Metadata.Get(ErrorKey)
		if reason == "" {
			reason = fmt.Sprintf("nacked on attempt %d of %d (set metadata %s, e.g. with the RecordError middleware, to record why)",
				attempt, max, ErrorKey)
		}
	}
	return sub.settleNack(ctx, e, attempt, d, store.Encode(msg), reason, nackFailed)
}

// nackKind is why an entry is nacked.
type nackKind int

const (
	nackFailed  nackKind = iota // a failed attempt (or an undecodable entry)
	nackSnoozed                 // Snooze: requeued with its attempt unchanged
	nackExpired                 // past its deadline: buried, never delivered
)

// settleNack requeues a delivered entry for the group, or buries it in the
// dead letters when reason is set.
func (sub *subscription) settleNack(ctx context.Context, e entry, attempt int, delay time.Duration, body []byte, reason string, kind nackKind) error {
	s := sub.s
	a := store.NackArgs{
		Group: s.config.ConsumerGroup, Stream: e.stream, Id: e.msg.ID, Redo: e.redo,
		Attempt: attempt, Delay: delay, Body: body, Reason: reason, MaxDead: s.config.MaxDeadLetters,
		KeepAttempt: kind == nackSnoozed,
	}
	if kind == nackExpired {
		a.Attempt-- // the dead letter counts the deliveries it had: not this one
	}
	r, err := store.Nack(ctx, s.redis, sub.shard, a)
	if err != nil {
		return fmt.Errorf("nack entry %s: %w", e.msg.ID, err)
	}
	switch kind {
	case nackFailed:
		sub.m.nacked(r.Status)
	case nackExpired:
		if r.Status == 2 {
			sub.m.expired(true)
		}
	}
	fields := sub.fields().Add(watermill.LogFields{"entry_id": e.msg.ID, "attempt": attempt})
	switch {
	case r.Status == 0:
		sub.notPending(e, "Nack")
	case r.Status == 2 && kind == nackExpired:
		s.logger.Info("redisdelay: message expired; moved to the dead letters", fields.Add(watermill.LogFields{"reason": reason}))
	case r.Status == 2:
		s.logger.Error("redisdelay: message moved to the dead letters", errors.New(reason), fields)
	}
	if r.Evicted > 0 {
		s.logger.Error("redisdelay: dead letters full (MaxDeadLetters); evicted the oldest", nil,
			fields.Add(watermill.LogFields{"evicted": r.Evicted}))
	}
	return nil
}

// release hands back to the group everything still pending for this
// consumer (prefetched, or delivered and not acked) and removes the
// consumer; or, given an entry to keep (stream index and id), everything
// but that entry, leaving the consumer in place. Errors are logged.
// releaseBatch is how many entries per stream one release.lua call hands
// back: a bounded call (grouped messages cost more, see fair.lua).
const releaseBatch = 256

func (sub *subscription) release(keepStream, keepID string) error {
	s := sub.s
	group := s.config.ConsumerGroup
	fields := sub.fields()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for {
		r, err := store.Release(ctx, s.redis, sub.shard, group, sub.consumer, releaseBatch, keepStream, keepID)
		if err != nil {
			if !store.IsClientClosed(err) {
				s.logger.Error("redisdelay: cannot hand back pending messages; they stay with this consumer until read again or reclaimed", err, fields)
			}
			return err
		}
		if r.Missing > 0 {
			s.logger.Error("redisdelay: pending entries without content were dropped", nil, fields.Add(watermill.LogFields{"count": r.Missing}))
		}
		if r.Released > 0 {
			s.logger.Debug("redisdelay: handed back pending messages", fields.Add(watermill.LogFields{"count": r.Released}))
		}
		if r.Done {
			return nil
		}
	}
}

// streamIndex is 1 for the ready stream and 2 for the redelivery stream, as
// scripts number them.
func (e entry) streamIndex() int {
	if e.redo {
		return 2
	}
	return 1
}

// attempt is the delivery attempt the entry stands for: field a on
// redeliveries, 1 otherwise.
func (e entry) attempt() int { return store.EntryAttempt(e.msg) }

func fieldNames(values map[string]any) []string {
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
