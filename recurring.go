// Recurring schedules: their API (Schedule, its validation and
// Publisher.Schedule) and the tick loop every scheduler runs beside its
// work. The Inspector's schedule methods are in inspector_groups.go. Not
// to be confused with the scheduler (internal/scheduling), which moves due
// messages to the consumer groups.

package redisdelay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/redisdelay/watermill-redisdelay/internal/loglimit"
	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Schedule is a recurring publish: at each tick of Spec, a scheduler
// publishes a message with Payload and Metadata to Topic. Every scheduler
// publishes ticks: each Manager, and each Subscriber (unless
// DisableScheduler is set) while it has a subscription. One message per
// tick however many run (a tick is claimed by a compare-and-set in Redis);
// ticks missed while none ran, or while Redis was unreachable, are
// published when one runs again, within CatchUpWindow. See
// docs/schedules.md.
type Schedule struct {
	// ID names the schedule, unique under a KeyPrefix. Registering an ID
	// again replaces its definition and keeps its next tick, unless Spec or
	// Timezone changed.
	ID string `json:"id"`

	// Spec is a cron expression of 5 fields (minute hour day-of-month
	// month day-of-week) or 6 (seconds first), a descriptor (@yearly,
	// @monthly, @weekly, @daily, @hourly), or "@every <duration>" (Go
	// syntax, at least 1ms), whose ticks are the multiples of the duration
	// since the Unix epoch, so "@every 1h" ticks on the hour, UTC.
	Spec string `json:"spec"`

	// Timezone is the IANA time zone of a cron Spec ("" is UTC), e.g.
	// "America/New_York": "0 9 * * *" ticks at 9:00 there, daylight saving
	// included. Hosts without a zoneinfo database need import _ "time/tzdata".
	Timezone string `json:"timezone,omitempty"`

	// Topic receives the messages.
	Topic string `json:"topic"`

	// Payload and Metadata are copied into each tick's message, which also
	// carries ScheduleIDKey and ScheduleTickKey.
	Payload  []byte            `json:"payload,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`

	// CatchUpWindow bounds how late a tick is still published (default
	// DefaultCatchUpWindow): after a restart or an outage, every missed
	// tick within it is published, oldest first, each with its own tick
	// instant; older ones are skipped (logged).
	CatchUpWindow time.Duration `json:"catch_up_window,omitempty"`

	// Jitter delays each tick's message by up to this long (0: none), so
	// that schedules ticking at the same instant do not all fall due at
	// once: by a duration in [0, Jitter) to the millisecond, the same in
	// every process for a given tick (derived from the tick's UUID), added
	// to the delay the Metadata sets. ScheduleTickKey keeps the tick.
	Jitter time.Duration `json:"jitter,omitempty"`

	// Overlap is what a tick does while the message of the previous tick
	// published is still in flight: OverlapAllow (the default) publishes
	// it all the same, OverlapSkip skips it (see Overlap).
	Overlap Overlap `json:"overlap,omitempty"`

	// Next is the next tick not yet published, as Inspector.Schedules reads
	// it (zero while paused). Publisher.Schedule ignores it.
	Next time.Time `json:"-"`

	// Paused is when Inspector.PauseSchedule paused the schedule (zero:
	// running), as Inspector.Schedules reads it. Publisher.Schedule ignores
	// it: registering a paused schedule again keeps it paused.
	Paused time.Time `json:"-"`

	// Skipped counts the ticks skipped by the overlap policy, and
	// LastSkipped is the last of them (zero: none), as Inspector.Schedules
	// reads them. Publisher.Schedule ignores them.
	Skipped     int64     `json:"-"`
	LastSkipped time.Time `json:"-"`

	// LastTick is the tick published last, by a tick loop or
	// Inspector.TriggerSchedule (its ScheduleTickKey), as
	// Inspector.Schedules reads it; zero when none was recorded (none
	// published yet, or only by processes of versions before it was).
	// Publisher.Schedule ignores it.
	LastTick time.Time `json:"-"`
}

// Overlap is a schedule's overlap policy: what a tick does while the
// message of the previous tick published is still in flight.
type Overlap string

const (
	// OverlapAllow publishes every tick, whatever became of the previous
	// ones' messages: the default.
	OverlapAllow Overlap = ""
	// OverlapSkip skips a tick (not published, never caught up later;
	// logged at Info level and counted in Schedule.Skipped) while the
	// message of the previous tick published is in flight: waiting for
	// its due time, or not yet acknowledged or dead-lettered by every
	// consumer group of the topic, retries included. A tick's message is
	// finished once each group registered for the topic has acknowledged
	// it or moved it to its dead letters, or once it was cancelled while
	// waiting; on a topic with no group, once it left the waiting set. The
	// ticks of such a schedule all go to one partition of the topic (that
	// of the schedule's ID, unless its Metadata sets PartitionKey or
	// BusinessKey), where the check reads the message's state as stored.
	// Like Temporal's ScheduleOverlapPolicy SKIP; see docs/schedules.md.
	OverlapSkip Overlap = "skip"
)

// DefaultCatchUpWindow is how late a tick may be published when
// Schedule.CatchUpWindow is not set.
const DefaultCatchUpWindow = time.Hour

// ScheduleIDKey is the metadata key holding the ID of the schedule that
// published a message, and ScheduleTickKey its tick instant (RFC 3339,
// UTC, milliseconds). A tick's message has a UUID derived from both, so a
// deduplicating consumer (the Deduplicator middleware with
// NewDedupRepository) drops the rare second copy (see docs/schedules.md).
const (
	ScheduleIDKey   = "_redisdelay_schedule"
	ScheduleTickKey = "_redisdelay_schedule_tick"
)

// ErrInvalidSchedule is wrapped by Publisher.Schedule errors for a schedule
// that cannot work: a bad ID, Spec, Timezone, Topic or CatchUpWindow.
var ErrInvalidSchedule = errors.New("redisdelay: invalid schedule")

// cronParser reads 5 or 6 field specs and descriptors; "@every" is ours,
// for sub-second intervals (robfig/cron rounds them to seconds).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ticker computes a schedule's ticks.
type ticker interface {
	// next returns the first tick strictly after t (zero: none).
	next(t time.Time) time.Time
}

type everyTicker time.Duration

func (e everyTicker) next(t time.Time) time.Time {
	d := time.Duration(e).Milliseconds()
	ms := t.UnixMilli()
	return time.UnixMilli((ms/d + 1) * d)
}

type cronTicker struct{ s cron.Schedule }

func (c cronTicker) next(t time.Time) time.Time { return c.s.Next(t) }

// parseSpec returns the ticker of a spec in a time zone.
func parseSpec(spec, timezone string) (ticker, error) {
	loc, err := time.LoadLocation(timezone)
	if err != nil || timezone == "Local" {
		return nil, fmt.Errorf("time zone %q is unknown: use an IANA name such as \"Europe/Paris\" (\"\" for UTC); a host without a zoneinfo database needs import _ \"time/tzdata\"", timezone)
	}
	if rest, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < time.Millisecond {
			return nil, fmt.Errorf("spec %q: \"@every\" takes a Go duration of at least 1ms, e.g. \"@every 90s\"", spec)
		}
		return everyTicker(d), nil
	}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, fmt.Errorf("spec %q: set the time zone in Schedule.Timezone, not in the spec", spec)
	}
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("spec %q: %v (use 5 fields \"min hour dom month dow\", 6 with seconds first, @daily or \"@every 10s\")", spec, err)
	}
	if ss, ok := s.(*cron.SpecSchedule); ok {
		ss.Location = loc
	}
	return cronTicker{s}, nil
}

// validate checks a schedule and returns its ticker.
func (s *Schedule) validate() (ticker, error) {
	if p := nameProblem("schedule ID", s.ID); p != "" || strings.Contains(s.ID, "@") {
		if p == "" {
			p = fmt.Sprintf("schedule ID %q contains \"@\": use another character", s.ID)
		}
		return nil, fmt.Errorf("%w: %s", ErrInvalidSchedule, p)
	}
	if err := validateTopic(s.Topic); err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %v", ErrInvalidSchedule, s.ID, err)
	}
	if s.Jitter < 0 {
		return nil, fmt.Errorf("%w: schedule %q: Jitter is %s: use 0 (none) or more", ErrInvalidSchedule, s.ID, s.Jitter)
	}
	if s.Overlap != OverlapAllow && s.Overlap != OverlapSkip {
		return nil, fmt.Errorf("%w: schedule %q: Overlap is %q: use OverlapAllow (\"\", the default: publish every tick) or OverlapSkip (%q: skip a tick while the previous one's message is in flight)",
			ErrInvalidSchedule, s.ID, s.Overlap, OverlapSkip)
	}
	if s.Overlap == OverlapSkip && (s.Metadata[GroupKey] != "" || BusinessKeyPolicy(s.Metadata[BusinessKeyPolicyKey]) == KeepLastIfActive) {
		// recurringoverlap.lua finds a tick's message in the streams and sets
		// where ungrouped messages go, not in the groups' queues.
		return nil, fmt.Errorf("%w: schedule %q: Overlap %q does not combine with grouped ticks (metadata %s or business key policy %q): leave Overlap empty and give the ticks a business key with policy %q, which runs one at a time and keeps the latest tick while one runs",
			ErrInvalidSchedule, s.ID, OverlapSkip, GroupKey, KeepLastIfActive, KeepLastIfActive)
	}
	if s.CatchUpWindow < 0 {
		return nil, fmt.Errorf("%w: schedule %q: CatchUpWindow is %s: use 0 (the default, %s) or more", ErrInvalidSchedule, s.ID, s.CatchUpWindow, DefaultCatchUpWindow)
	}
	t, err := parseSpec(s.Spec, s.Timezone)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %v", ErrInvalidSchedule, s.ID, err)
	}
	return t, nil
}

func (s *Schedule) catchUp() time.Duration {
	if s.CatchUpWindow == 0 {
		return DefaultCatchUpWindow
	}
	return s.CatchUpWindow
}

// Schedule registers a recurring publish, or replaces the one with its ID
// (keeping its next tick unless Spec or Timezone changed), so every
// process may register its schedules at start. The schedulers (Managers,
// and Subscribers while subscribed) publish the ticks (see Schedule);
// remove it with Inspector.RemoveSchedule. It fails with
// ErrInvalidSchedule, storing nothing, for a schedule that cannot work.
func (p *Publisher) Schedule(ctx context.Context, s Schedule) error {
	if p.closed.Load() {
		return ErrClosed
	}
	t, err := s.validate()
	if err != nil {
		return err
	}
	if s.Overlap != OverlapSkip {
		// Under OverlapSkip a tick is never published while the
		// previous one's message waits, so it never finds its key held
		// by it.
		if err := s.checkKeyOverlap(t); err != nil {
			return err
		}
	}
	now, err := store.RedisTime(ctx, p.config.Client)
	if err != nil {
		return fmt.Errorf("redisdelay: register schedule %q: %w", s.ID, err)
	}
	first := t.next(now)
	if first.IsZero() {
		return fmt.Errorf("%w: schedule %q: spec %q never ticks", ErrInvalidSchedule, s.ID, s.Spec)
	}
	// The tick loop publishes with a default PublisherConfig: a message it
	// would refuse (too large, bad delay metadata) is refused here, once,
	// rather than at every tick. Level 1 encodes largest: checked at it,
	// a message fits at every level.
	check := &Publisher{config: PublisherConfig{KeyPrefix: p.keys.Prefix}, keys: p.keys, now: time.Now}
	check.config.setDefaults()
	if _, err := check.prepare(s.Topic, []*message.Message{tickMessage(p.keys.Prefix, &s, first)}, make([]*pubCall, 1), store.Level1); err != nil {
		return fmt.Errorf("%w: schedule %q: its messages cannot be published: %w", ErrInvalidSchedule, s.ID, err)
	}
	def, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("redisdelay: register schedule %q: %w", s.ID, err)
	}
	// The ticks are published with the count stored for the topic: store
	// this Publisher's now, or refuse a count that differs, rather than let
	// the first tick fix the topic at one partition.
	parts := partitionCount(p.config.Partitions, p.config.TopicPartitions, s.Topic)
	if _, err := registerTopic(ctx, p.config.Client, p.keys, s.Topic, parts, "PublisherConfig.Partitions"); err != nil {
		return fmt.Errorf("redisdelay: register schedule %q: %w", s.ID, err)
	}
	if _, err := store.RecurringAdd(ctx, p.config.Client, p.keys, s.ID, def, s.Spec, s.Timezone, first); err != nil {
		return fmt.Errorf("redisdelay: register schedule %q: %w", s.ID, err)
	}
	return nil
}

// tickUUID is the UUID of a tick's message: the same in every process.
func tickUUID(prefix, id string, tick int64) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("redisdelay:"+prefix+"\n"+id+"\n"+strconv.FormatInt(tick, 10))).String()
}

// The tick loop of the recurring schedules: every scheduler runs one, and
// a compare-and-set in Redis claims each tick for one process.

// claimTTL is how long a claimed tick is left to its claimer before another
// process publishes it (the claimer died or lost Redis): three default
// PublishTimeouts.
const claimTTL = 30 * time.Second

// scheduleBatch is the most schedules read per pass.
const scheduleBatch = 64

// startTicks publishes the ticks of the recurring schedules beside a
// scheduler (a Manager's, or a Subscriber's own) until ctx ends; the
// channel is closed then.
func startTicks(ctx context.Context, sched *scheduler, logger watermill.LoggerAdapter) <-chan struct{} {
	done := make(chan struct{})
	l := &tickLoop{client: sched.client, redis: sched.Redis(), keys: sched.keys, logger: logger, limiter: sched.limiter,
		idle: scheduleRefresh, wake: sched.Ticks(), mine: map[string]time.Time{}, overlaps: map[string]*overlapView{},
		denied: sched.Denied, interval: sched.config.CheckInterval}
	go func() {
		defer close(done)
		l.run(ctx)
	}()
	return done
}

// scheduleRefresh is the longest a tick loop sleeps when it knows of no
// earlier tick: a schedule registered or changed wakes the loops (a
// wake-up published by recurringadd.lua, or the resubscription after a lost
// connection), so this only bounds what a wake-up that never came (a
// schedule registered by a version that sent none) delays.
const scheduleRefresh = time.Minute

// tickLoop publishes the ticks of the schedules: run by every scheduler.
type tickLoop struct {
	client   redis.UniversalClient // as configured; commands go through redis
	redis    *store.Gated
	keys     store.Keys
	logger   watermill.LoggerAdapter
	limiter  *loglimit.Limiter
	idle     time.Duration           // longest sleep (scheduleRefresh): new schedules wake the loop
	interval time.Duration           // the longest while Redis refuses the wake-ups (the check interval)
	denied   func() bool             // Redis refuses the wake-ups
	wake     <-chan struct{}         // a schedule's next tick was set
	mine     map[string]time.Time    // claims this loop holds and has not published -> expiry
	pub      *Publisher              // publishes the ticks; made at the first, closed when run returns
	overlaps map[string]*overlapView // OverlapSkip schedules (by ID): what the loop knows of their partition
}

func (l *tickLoop) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	defer func() {
		if l.pub != nil {
			_ = l.pub.Close()
			l.pub = nil
		}
	}()
	for {
		wait, err := l.pass(ctx)
		if err != nil {
			if ctx.Err() != nil || store.IsClientClosed(err) {
				// A closed client is reported (once) by the scheduler
				// beside this loop, which stops it.
				return
			}
			l.limiter.Errorf(l.logger, "redisdelay: cannot publish schedule ticks; retrying", err, nil)
			wait = 100 * time.Millisecond
		}
		if l.denied() {
			wait = min(wait, l.interval)
		}
		timer.Reset(min(max(wait, 0), l.idle))
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// pass publishes what is due and returns how long until the next work.
func (l *tickLoop) pass(ctx context.Context) (time.Duration, error) {
	// Own claims first: a publish that failed (Redis unreachable) is
	// retried as soon as Redis answers, well before the claim expires.
	for member, exp := range l.mine {
		e, err := store.RecurringRetry(ctx, l.redis, l.keys, member, exp, claimTTL)
		if err != nil {
			return 0, err
		}
		delete(l.mine, member)
		if !e.IsZero() {
			if err := l.publishClaim(ctx, member, e); err != nil {
				return 0, err
			}
		}
	}
	now, next, claims, err := store.ScheduleHeads(ctx, l.redis, l.keys, scheduleBatch)
	if err != nil {
		return 0, err
	}
	wait := l.idle
	for _, c := range claims {
		member, exp := c.Member, c.At
		if exp.After(now) {
			wait = min(wait, exp.Sub(now))
			continue
		}
		e, err := store.RecurringRetry(ctx, l.redis, l.keys, member, time.Time{}, claimTTL)
		if err != nil {
			return 0, err
		}
		if !e.IsZero() {
			if err := l.publishClaim(ctx, member, e); err != nil {
				return 0, err
			}
		}
	}
	var due []string
	for _, n := range next {
		id, at := n.Member, n.At
		if at.After(now) {
			wait = min(wait, at.Sub(now))
			break
		}
		due = append(due, id)
	}
	if len(l.mine) > 0 {
		wait = min(wait, publishRetry)
	}
	if len(due) == 0 {
		return wait, nil
	}
	defs, err := store.ScheduleDefsOf(ctx, l.redis, l.keys, due)
	if err != nil {
		return 0, err
	}
	broken := 0
	for i, id := range due {
		js := defs[i]
		if js == "" {
			// removed between the two reads; RemoveSchedule deletes both
			continue
		}
		w, err := l.fire(ctx, id, js)
		if errors.Is(err, errBrokenSchedule) {
			broken++
			continue
		}
		if err != nil {
			return 0, err
		}
		wait = min(wait, w)
	}
	if len(due) == scheduleBatch && broken < len(due) {
		// More may be due beyond the batch: read again at once (unless
		// the batch is all broken definitions, which stay due).
		wait = 0
	}
	return wait, nil
}

// fire publishes the due ticks of one schedule, oldest first, and returns
// how long until its next one.
func (l *tickLoop) fire(ctx context.Context, id, js string) (time.Duration, error) {
	var s Schedule
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		l.limiter.Errorf(l.logger, "redisdelay: a schedule does not decode; remove it with Inspector.RemoveSchedule", err, watermill.LogFields{"schedule": id})
		return 0, errBrokenSchedule
	}
	s.ID = id
	t, err := s.validate()
	if err != nil {
		l.limiter.Errorf(l.logger, "redisdelay: a stored schedule cannot work; register it again or remove it", err, watermill.LogFields{"schedule": id})
		return 0, errBrokenSchedule
	}
	for range 1000 {
		tick, ok, err := store.NextTick(ctx, l.redis, l.keys, id)
		if err != nil {
			return 0, err
		}
		if !ok {
			return l.idle, nil
		}
		now, err := store.RedisTime(ctx, l.redis)
		if err != nil {
			return 0, err
		}
		if tick.After(now) {
			return tick.Sub(now), nil
		}
		ttl := claimTTL
		after := t.next(tick)
		if oldest := now.Add(-s.catchUp()); tick.Before(oldest) {
			// Too late: skip to the first tick within the window.
			ttl, after = 0, t.next(oldest.Add(-time.Millisecond))
			l.logger.Info("redisdelay: schedule ticks skipped: later than the catch-up window",
				watermill.LogFields{"schedule": id, "from": tick, "to": after, "window": s.catchUp()})
		}
		if after.IsZero() {
			after = time.UnixMilli(maxScheduleMs)
		}
		status, exp, err := store.RecurringClaim(ctx, l.redis, l.keys, id, tick, after, ttl)
		if err != nil {
			return 0, err
		}
		if status != 1 {
			return 0, nil // another process moved it, or Redis's clock is behind: read again
		}
		if ttl == 0 {
			continue
		}
		// A claimed tick is published even when the Manager is closing:
		// Close waits for it (PublishTimeout at most) rather than leave the
		// tick to another process after claimTTL.
		pctx := context.WithoutCancel(ctx)
		member := store.ClaimMember(id, tick)
		l.mine[member] = exp
		err = l.publish(pctx, &s, tick)
		switch {
		case errors.Is(err, errTickSkipped):
			// skipped by the overlap policy: the claim is dropped already
		case err != nil && !refused(err):
			l.publishFailed(err, id)
			return publishRetry, nil
		default:
			if err != nil {
				l.tickRefused(err, id, tick)
			}
			if err := store.TickDone(pctx, l.redis, l.keys, member, id, tick, err == nil); err != nil {
				delete(l.mine, member)
				return 0, err
			}
		}
		delete(l.mine, member)
		if after.After(now) {
			// The claim moved the next tick to after: no need to read it
			// back (a change meanwhile wakes the loop).
			return after.Sub(now), nil
		}
	}
	return 0, nil
}

// errBrokenSchedule is what fire returns for a stored definition it cannot
// use (logged there): its ticks stay due until it is fixed or removed.
var errBrokenSchedule = errors.New("broken schedule definition")

// publishRetry is how soon a tick whose publish failed is tried again (its
// claim is kept meanwhile).
const publishRetry = 100 * time.Millisecond

// publishFailed logs a tick not published: it stays claimed by this loop,
// which tries it again before anything else.
func (l *tickLoop) publishFailed(err error, id string) {
	l.limiter.Errorf(l.logger, "redisdelay: cannot publish a schedule tick; retrying", err, watermill.LogFields{"schedule": id})
}

// refused reports a Publish error that publishing again cannot cure: the
// tick's message is refused as it is (a business key still held, a full
// queue, an invalid message), so the tick is skipped rather than retried,
// which would pile up claims as later ticks come due.
func refused(err error) bool {
	for _, target := range []error{ErrDuplicateBusinessKey, ErrQueueFull, ErrDuplicateMessage, ErrInvalidMessage,
		ErrMessageTooLarge, ErrInvalidDelay, ErrInvalidTopic, ErrPartitionMismatch} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// tickRefused logs a tick Publish refused, which is skipped.
func (l *tickLoop) tickRefused(err error, id string, tick time.Time) {
	l.limiter.Errorf(l.logger, "redisdelay: a schedule tick was refused by Publish and is skipped", err,
		watermill.LogFields{"schedule": id, "tick": tick})
}

// maxScheduleMs parks a schedule that never ticks again (year 9999).
const maxScheduleMs = 253402300799000

// publishClaim publishes a claimed tick taken over from a claims entry.
func (l *tickLoop) publishClaim(ctx context.Context, member string, exp time.Time) error {
	id, tick, ok := store.ParseClaim(member)
	if !ok {
		return store.DropClaim(ctx, l.redis, l.keys, member)
	}
	js, ok, err := store.ScheduleDef(ctx, l.redis, l.keys, id)
	if err != nil {
		return err
	}
	if !ok {
		return store.DropClaim(ctx, l.redis, l.keys, member) // removed meanwhile
	}
	var s Schedule
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		return store.DropClaim(ctx, l.redis, l.keys, member)
	}
	s.ID = id
	l.mine[member] = exp
	err = l.publish(context.WithoutCancel(ctx), &s, tick)
	switch {
	case errors.Is(err, errTickSkipped):
		delete(l.mine, member) // the claim is dropped already
		return nil
	case err != nil && !refused(err):
		l.publishFailed(err, id)
		return nil
	case err != nil:
		l.tickRefused(err, id, tick)
	}
	delete(l.mine, member)
	return store.DropClaim(ctx, l.redis, l.keys, member)
}

// tickMessage is the message of one tick of a schedule.
func tickMessage(prefix string, s *Schedule, tick time.Time) *message.Message {
	msg := message.NewMessage(tickUUID(prefix, s.ID, tick.UnixMilli()), s.Payload)
	for key, v := range s.Metadata {
		msg.Metadata.Set(key, v)
	}
	msg.Metadata.Set(ScheduleIDKey, s.ID)
	msg.Metadata.Set(ScheduleTickKey, tick.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	if s.Overlap == OverlapSkip && msg.Metadata.Get(PartitionKey) == "" && msg.Metadata.Get(BusinessKey) == "" {
		// Every tick in one partition, where its overlap is checked.
		msg.Metadata.Set(PartitionKey, s.ID)
	}
	if ms := s.Jitter.Milliseconds(); ms > 0 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(msg.UUID))
		addDelay(msg.Metadata, time.Duration(h.Sum64()%uint64(ms))*time.Millisecond)
	}
	return msg
}

// addDelay delays a message j longer than its delay metadata says: both
// of Watermill's keys move, as a message is due at whichever of them comes
// first. A value that does not parse is left for Publish to refuse.
func addDelay(md message.Metadata, j time.Duration) {
	forV, untilV := md.Get(delay.DelayedForKey), md.Get(delay.DelayedUntilKey)
	if forV == "" && untilV == "" {
		md.Set(delay.DelayedForKey, j.String())
		return
	}
	if d, err := time.ParseDuration(forV); err == nil && forV != "" {
		md.Set(delay.DelayedForKey, (d + j).String())
	}
	if u, err := time.Parse(time.RFC3339Nano, untilV); err == nil && untilV != "" {
		md.Set(delay.DelayedUntilKey, u.Add(j).Format(time.RFC3339Nano))
	}
}

// publish publishes one tick's message with the topic's stored partition
// count (a Manager is not configured with it).
func (l *tickLoop) publish(ctx context.Context, s *Schedule, tick time.Time) error {
	parts, err := storedPartitions(ctx, l.redis, l.keys, s.Topic)
	if err != nil {
		return err
	}
	if l.pub == nil {
		pub, err := NewPublisher(PublisherConfig{Client: l.client, KeyPrefix: l.keys.Prefix, TopicPartitions: map[string]int{}}, l.logger)
		if err != nil {
			return err
		}
		pub.redis, pub.inline = l.redis, false // the scheduler's lanes, whose pipelines wait for the latest of their jobs' deadlines
		l.pub = pub
	}
	// The loop alone publishes with it, and Publish reads the count here,
	// on this goroutine: each topic gets the count stored in Redis.
	l.pub.config.TopicPartitions[s.Topic] = parts[0]
	msg := tickMessage(l.keys.Prefix, s, tick)
	if s.Overlap == OverlapSkip {
		skip, err := l.overlapSkips(ctx, s, tick, msg, parts[0])
		if err != nil {
			return fmt.Errorf("check the overlap of tick %s of schedule %q: %w", tick.UTC().Format(time.RFC3339Nano), s.ID, err)
		}
		if skip {
			return errTickSkipped
		}
	}
	msg.SetContext(ctx)
	if err := l.pub.Publish(s.Topic, msg); err != nil {
		return fmt.Errorf("publish tick %s of schedule %q to topic %q: %w", tick.UTC().Format(time.RFC3339Nano), s.ID, s.Topic, err)
	}
	return nil
}

// errTickSkipped is what publish returns for a claimed tick that the
// schedule's overlap policy skipped: its claim is dropped, the skip
// counted and logged.
var errTickSkipped = errors.New("tick skipped by the overlap policy")

// overlapSkips applies the overlap policy OverlapSkip to a claimed tick
// whose message is msg, in a topic of parts partitions: it reports true
// when the tick is skipped (its claim dropped, the skip counted and
// logged), false when it is to be published (recorded as the tick let
// through). While the claim of the tick let through last is held, that
// tick is being published; otherwise recurringoverlap.lua tells from what is
// stored whether its message is finished. The claim is read before the
// script runs: once it is gone, that tick's message is stored (or never
// will be). The loop keeps what it last learnt of the partition (the tick
// let through, the groups), which the script corrects when another process
// changed it.
func (l *tickLoop) overlapSkips(ctx context.Context, s *Schedule, tick time.Time, msg *message.Message, parts int) (bool, error) {
	sh := l.keys.Shard(s.Topic, meta.Partition(msg, msg.UUID, parts))
	v := l.overlaps[s.ID]
	if v == nil || v.shard != sh {
		if len(l.overlaps) >= maxOverlapViews {
			clear(l.overlaps) // schedules removed meanwhile: start afresh
		}
		v = &overlapView{shard: sh}
		l.overlaps[s.ID] = v
	}
	// When it falls due, as Publish will compute it: no stream entry of
	// it is older, so the next tick's check looks from there on.
	d, err := meta.Delay(msg.Metadata, time.Now())
	if err != nil {
		d = 0 // Publish refuses it
	}
	prio, _ := meta.Priority(msg.Metadata)
	next := store.OverlapTick{UUID: msg.UUID, Tick: tick, Delay: d, High: prio == "1"}
	for range 5 {
		prev := v.Prev
		reason := ""
		if prev.UUID != "" && prev.UUID != msg.UUID {
			held, err := store.ClaimHeld(ctx, l.redis, l.keys, store.ClaimMember(s.ID, prev.Tick))
			if err != nil {
				return false, err
			}
			if held {
				reason = "publishing"
			}
		}
		if reason == "" {
			status, why, err := store.RecurringOverlap(ctx, l.redis, sh, s.ID, &v.OverlapView, next)
			if err != nil {
				return false, err
			}
			if status == "again" {
				continue // another process let a tick through, or a group was created or deleted
			}
			if status != "skip" {
				return false, nil
			}
			reason = why
		}
		n, err := store.RecurringSkip(ctx, l.redis, l.keys, s.ID, tick)
		if err != nil {
			return false, err
		}
		l.logger.Info("redisdelay: schedule tick skipped: the previous tick's message is still in flight (Overlap skip)",
			watermill.LogFields{"schedule": s.ID, "tick": tick.UTC(), "previous": prev.Tick.UTC(), "reason": reason, "skipped": n})
		return true, nil
	}
	return false, errors.New("the topic's consumer groups or the schedule's last tick kept changing")
}

// overlapView is what a tick loop last learnt of the partition an
// OverlapSkip schedule's ticks go to.
type overlapView struct {
	shard store.Shard
	store.OverlapView
}

// maxOverlapViews bounds a tick loop's overlapViews.
const maxOverlapViews = 4096

// checkKeyOverlap refuses a schedule whose ticks would refuse one another:
// a tick's message holds its BusinessKey while it waits, and under
// RejectDuplicateKey (the ticks' policy unless their metadata names
// another) a message delayed as long as the gap between two ticks makes
// Publish refuse the next tick, and so every other one.
func (s *Schedule) checkKeyOverlap(t ticker) error {
	key := s.Metadata[BusinessKey]
	if key == "" {
		return nil
	}
	if p := s.Metadata[BusinessKeyPolicyKey]; p != "" && BusinessKeyPolicy(p) != RejectDuplicateKey {
		return nil
	}
	now := time.Now()
	d, err := meta.Delay(message.Metadata(s.Metadata), now)
	if err != nil {
		return nil // a bad delay is refused by the check of the message itself
	}
	if d = max(d, 0) + s.Jitter; d <= 0 {
		return nil
	}
	// The shortest gap among the next ticks: a cron spec's gaps vary.
	gap, prev := time.Duration(math.MaxInt64), t.next(now)
	for range 16 {
		if prev.IsZero() {
			return nil // never ticks: refused by Schedule's own check
		}
		next := t.next(prev)
		if next.IsZero() {
			break
		}
		gap, prev = min(gap, next.Sub(prev)), next
	}
	if d < gap {
		return nil
	}
	return fmt.Errorf("%w: schedule %q: each tick's message holds business key %q while it waits, %s, at least as long as the %s between ticks, so Publish would refuse the next tick (RejectDuplicateKey): shorten the delay, set metadata %s to another policy (e.g. %q), or drop the business key",
		ErrInvalidSchedule, s.ID, key, d, gap, BusinessKeyPolicyKey, ReplaceWaiting)
}
