// Recurring schedules, their API: Schedule, its validation and
// Publisher.Schedule; the Inspector's schedule methods are in
// inspector_schedules.go. recurring_ticks.go publishes their ticks. Not to be confused with the scheduler (internal/scheduling), which moves
// due messages to the consumer groups; it only runs the tick loop beside it.

package redisdelay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/robfig/cron/v3"

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
