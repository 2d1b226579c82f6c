// One partition's loop of the scheduler (scheduler.go): its tick (promote,
// reclaim, trim), the waits between ticks, failures and retirement.

package scheduling

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/redisdelay/watermill-redisdelay/internal/pause"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// loop schedules one partition until ctx ends, the client is closed
// under it, or it retires (see retire). A quiet loop (one woken after it
// retired) trims and checks for idleness first after a TrimInterval, not
// at its first tick.
func (s *Scheduler) loop(ctx context.Context, topic string, part int, wake chan string, quiet bool) {
	l := &partLoop{
		s: s, topic: topic, part: part, sh: s.keys.Shard(topic, part), fields: partitionFields(topic, part), wake: wake,
		relist: true, nextReclaim: map[string]time.Time{},
	}
	if quiet {
		l.lastTrim, l.lastIdle = time.Now(), time.Now()
	}
	defer l.end()
	// With Go 1.23 timer semantics (go.mod), Stop and Reset leave no stale
	// tick behind, so the timer is reused without draining.
	timer := time.NewTimer(s.interval)
	defer timer.Stop()

	for ctx.Err() == nil {
		t, err := l.tick(ctx)
		wait := t.wait
		if err != nil {
			var stop bool
			if wait, stop = l.failed(ctx, err); stop {
				return
			}
		} else {
			l.failures = 0
		}
		if wait == 0 {
			continue
		}
		if err == nil {
			// A held tick that found something waiting knows the
			// partition is not idle without asking.
			if (t.empty || !t.held) && l.retireIfIdle(ctx) {
				return
			}
			// After the idle check, which this tick may have run: the
			// sleep lasts until the next one, not until this one.
			if t.empty {
				wait = l.emptyWait(wait)
			}
		}
		if !l.sleep(ctx, timer, wait) {
			return
		}
	}
}

// partLoop is the state of a scheduler's loop over one partition.
type partLoop struct {
	s      *Scheduler
	topic  string
	part   int
	sh     store.Shard
	fields watermill.LogFields
	wake   chan string

	groups []string
	// promoteKeys are promote.lua's keys for groups (store.PromoteKeys)
	promoteKeys []string
	listed      time.Time // when groups was read
	relist      bool      // read groups before the next tick
	held        bool      // this scheduler holds the topic's lease
	extended    time.Time // when a tick last took or renewed it (at the tick's start)
	declined    bool      // the last tick declined the free lease (see balance.mayTake)
	// When the partition was last trimmed, and checked for work (see
	// retire): zero at the loop's start, so its first tick trims and
	// checks, and a loop started for a partition with nothing to do (a
	// Subscriber's first subscription to a quiet topic) retires at once.
	lastTrim    time.Time
	lastIdle    time.Time
	lastBeat    time.Time // partition 0: the scheduler's last heartbeat in the topic's list
	nextReclaim map[string]time.Time
	failures    int
	due         time.Time // when the last tick found the next message due (zero: none within the check interval)
}

// end runs when the loop ends. The lease is released even when this
// scheduler does not know it holds it: a tick whose reply was lost
// (cancelled by Close) may have taken it. The script releases only the
// caller's own lease.
func (l *partLoop) end() {
	s := l.s
	if b := s.balanceOf(l.topic); b != nil {
		if l.held {
			b.Owned().Add(-1)
		}
		if l.part == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second) // else it expires
			_ = b.Beat(ctx, s.redis, store.TopicSchedulers(l.sh), s.owner, 0)
			cancel()
		}
	}
	s.metrics.forget(l.sh)
	s.release(l.sh, l.fields)
}

// tick promotes what is due when this scheduler holds (or takes) the
// lease, then reclaims and trims when their time has come.
func (l *partLoop) tick(ctx context.Context) (tick, error) {
	started := time.Now()
	if err := l.listGroups(ctx); err != nil {
		return tick{}, err
	}
	take, err := l.balance(ctx)
	if err != nil {
		return tick{}, err
	}
	// The lease is renewed once half its spare time (beyond the check
	// interval, within which the next tick comes) has passed, not at every
	// tick: a tick within the interval renews it before it expires.
	extend := time.Since(l.extended) >= (l.s.lease-l.s.interval)/2
	// The tick a due message woke is handed to a subscription of this
	// process if one waits (see Readers); one woken otherwise (a check
	// interval, a wake-up) mostly moves nothing, and is not.
	due := l.held && !l.due.IsZero() && !started.Before(l.due)
	t, err := l.s.promote(ctx, l.sh, l.fields, store.PromoteArgs{Groups: l.groups, Keys: l.promoteKeys, MayTake: take, Extend: extend}, due)
	l.due = time.Time{}
	if err != nil {
		return t, err
	}
	if t.due {
		l.due = started.Add(t.wait)
	}
	if t.held && (extend || !l.held) {
		l.extended = started
	}
	if t.held && t.far >= 0 {
		// A failure here must not keep the rest of the tick (reclaim, trim)
		// from running: it is logged, and the next tick tries again.
		done, err := l.s.unpackFar(ctx, l.sh, l.fields, t.farFormat, t.far)
		if err != nil && ctx.Err() == nil {
			l.s.limiter.Errorf(l.s.logger, "redisdelay: cannot unpack far messages; retrying at the next tick", err, l.fields)
		}
		if done {
			t.wait = 0 // promote what came in, unpack the rest
		}
	}
	l.declined = t.declined
	if t.groups != len(l.groups) {
		l.relist = true
		if t.held {
			t.wait = 0 // schedule the new group's retries now
		}
	}
	if !l.holds(t.held) {
		return t, nil
	}
	if err := l.reclaimAndTrim(ctx, started); err != nil {
		return t, err
	}
	return t, nil
}

// emptyWait is how long the loop of a partition with nothing scheduled
// sleeps: until its next reclaim, trim or idle check, since whatever
// schedules something wakes it (a publish, a retry, a new group). It
// ticks every check interval all the same where wake-ups may not come
// (Redis refuses their channel), and in a topic of several partitions,
// where its scheduler's heartbeat (partition 0) and share of the leases
// are kept each check interval. The lease lapses meanwhile: the next tick
// takes it again, or a standby has it by then (it only saves work).
func (l *partLoop) emptyWait(wait time.Duration) time.Duration {
	s := l.s
	if s.denied.Load() || s.balanceOf(l.topic) != nil {
		return wait
	}
	next := l.lastTrim
	if l.lastIdle.Before(next) {
		next = l.lastIdle
	}
	next = next.Add(s.trim)
	for _, g := range l.groups {
		if r := l.nextReclaim[g]; r.Before(next) {
			next = r
		}
	}
	return max(time.Until(next), wait)
}

// listGroups reads the topic's consumer groups when they may have changed,
// and once per groupsRefresh.
func (l *partLoop) listGroups(ctx context.Context) error {
	if !l.relist && time.Since(l.listed) < groupsRefresh {
		return nil
	}
	g, err := store.Groups(ctx, l.s.redis, l.sh)
	if err != nil {
		return fmt.Errorf("list the consumer groups: %w", err)
	}
	// the keys change with the list; made at each listing (once a minute,
	// or when the groups may have changed), not at each tick
	l.groups, l.promoteKeys = g, store.PromoteKeys(l.sh, g)
	l.listed, l.relist = time.Now(), false
	return nil
}

// balance shares the leases of a topic of several partitions among its
// schedulers: it renews this scheduler's heartbeat (partition 0), gives
// the lease up when the scheduler holds more than its share, and reports
// whether the tick may take a free lease.
func (l *partLoop) balance(ctx context.Context) (take bool, err error) {
	s := l.s
	b := s.balanceOf(l.topic)
	if b == nil {
		return true, nil
	}
	if l.part == 0 && time.Since(l.lastBeat) >= s.interval/2 {
		if err := b.Beat(ctx, s.redis, store.TopicSchedulers(l.sh), s.owner, 3*s.interval); err != nil {
			return false, fmt.Errorf("renew the scheduler's membership: %w", err)
		}
		l.lastBeat = time.Now()
	}
	if cur := b.Owned().Load(); l.held && b.Surplus(cur) && b.Owned().CompareAndSwap(cur, cur-1) {
		// the released wake-up makes a standby take over at once
		s.release(l.sh, l.fields)
		l.held = false
		s.logger.Debug("redisdelay: gave the partition up to another scheduler", l.fields)
	}
	return l.held || b.MayTake(b.Owned().Load(), l.declined), nil
}

// holds records whether this scheduler holds the lease after a tick, and
// returns it.
func (l *partLoop) holds(held bool) bool {
	s := l.s
	switch {
	case !held && l.held:
		s.logger.Debug("redisdelay: another scheduler took over the topic", l.fields)
		s.counted(l.topic, -1)
	case held && !l.held:
		s.counted(l.topic, 1)
		clear(l.nextReclaim) // reclaim at once what a previous holder left
		s.logger.Debug("redisdelay: scheduling the topic", l.fields)
	}
	l.held = held
	return held
}

// reclaimAndTrim reclaims the messages of dead consumers of each group
// whose time has come (see reclaimEvery), and once per
// TrimInterval of every group, removing idle consumers, then trims the
// ready stream.
func (l *partLoop) reclaimAndTrim(ctx context.Context, started time.Time) error {
	s := l.s
	cleanup := time.Since(l.lastTrim) >= s.trim
	for _, g := range l.groups {
		if !cleanup && started.Before(l.nextReclaim[g]) {
			continue
		}
		vis, oldest, err := s.reclaim(ctx, l.sh, l.fields, g, cleanup)
		if err != nil {
			return err
		}
		// From the tick's start: the next tick starts later than one
		// interval after it, so a pace of one interval is kept, and the
		// pending entries' idle times were read after it.
		l.nextReclaim[g] = started.Add(reclaimEvery(vis, oldest, s.interval))
	}
	if !cleanup {
		return nil
	}
	l.lastTrim = time.Now()
	return s.trimStream(ctx, l.sh, l.fields)
}

// failed handles a failed tick: it returns the pause before the next, or
// stop when the loop must end (ctx ended, or the client was closed).
func (l *partLoop) failed(ctx context.Context, err error) (wait time.Duration, stop bool) {
	s := l.s
	if ctx.Err() != nil {
		return 0, true
	}
	if store.IsClientClosed(err) && s.gone != nil {
		s.gone(l.topic)
		return 0, true
	}
	l.failures++
	wait = pause.Backoff(l.failures, s.interval)
	s.limiter.Errorf(s.logger, "redisdelay: scheduling failed; retrying", err,
		l.fields.Add(watermill.LogFields{"retry_in": wait.String()}))
	return wait, false
}

// retireIfIdle checks once per TrimInterval, after the tick's trim (same
// pace), whether what reclaim and trim left is nothing to schedule; it
// reports whether the loop retired then. A scheduler that Redis refuses
// the wake-ups retires no loop: none would start again.
func (l *partLoop) retireIfIdle(ctx context.Context) bool {
	s := l.s
	if time.Since(l.lastIdle) < s.trim || s.denied.Load() {
		return false
	}
	l.lastIdle = time.Now()
	idle, err := s.idle(ctx, l.sh, l.groups)
	if err != nil && ctx.Err() == nil {
		s.logger.Error("redisdelay: cannot check whether the partition is idle", err, l.fields)
	}
	if idle {
		if s.retire(l.sh, l.wake) {
			s.logger.Debug("redisdelay: nothing to schedule; the partition's loop retires until a wake-up", l.fields)
			return true
		}
		// A wake-up came meanwhile (at a loop's start, the confirmation
		// of its wake channel's subscription): check again after the tick
		// it calls for.
		l.lastIdle = time.Time{}
	}
	return false
}

// sleep waits wait, or less when a wake-up calls for a tick. A standby has
// nothing to do until the lease ends, so only a release wakes it. It
// returns false when ctx ended.
func (l *partLoop) sleep(ctx context.Context, timer *time.Timer, wait time.Duration) bool {
	timer.Reset(wait)
	for {
		select {
		case <-ctx.Done():
			return false
		case kind := <-l.wake:
			if kind == wakeGroup {
				// a new group, or a group's shorter visibility timeout
				l.relist = true
				clear(l.nextReclaim)
			}
			if !l.held && kind != wakeRelease {
				continue
			}
			timer.Stop()
			return true
		case <-timer.C:
			return true
		}
	}
}

// idle runs idle.lua: whether the partition holds nothing to schedule, and
// if so marks it dormant, so the next publish wakes the schedulers.
func (s *Scheduler) idle(ctx context.Context, sh store.Shard, groups []string) (bool, error) {
	return store.Idle(ctx, s.redis, sh, groups, s.retention)
}

// reclaimEvery is how long after a reclaim of a group the next one is
// due: when the first entry left pending runs out (vis-oldest, oldest
// being the longest idle time among them, 0 for none), since an entry
// delivered later runs out later still; at least a quarter of the
// visibility timeout and the check interval, so a group whose entries
// run out one after another is not swept at every tick. The check runs
// on the first tick after that (ticks come at least every check
// interval), so a message is reclaimed at most a quarter of the timeout
// plus a check interval after the timeout ran out. An idle topic is thus
// swept about once per timeout rather than four times.
//
// It assumes the timeout does not shrink meanwhile: a subscriber that
// stores a shorter one wakes the schedulers (init.lua), which sweep at
// their next tick; the cleanup at every TrimInterval sweeps regardless.
func reclaimEvery(vis, oldest, interval time.Duration) time.Duration {
	return max(vis-oldest, vis/4, interval)
}

// tick is what one promote call found.
type tick struct {
	wait      time.Duration // until the next tick
	held      bool          // the caller holds the topic's lease
	declined  bool          // the lease was free and the caller was not to take it
	groups    int           // consumer groups registered for the topic
	far       int64         // the far bucket due for unpacking; -1: none
	farFormat int           // its format (see internal/store/far.go)
	empty     bool          // held, and nothing waits or is due to be retried
	due       bool          // held, and wait is until the next due message (not the check interval's cap)
}

// promote takes or extends the topic's lease and, when held, moves what is
// due and returns how long to sleep: until the next due message, capped at
// the check interval; 0 when more is due now. A standby sleeps until the
// lease expires, at most the check interval. a's Groups, MayTake and
// Extend are the tick's; due hands the call to a subscription of this
// process when one waits (see Readers).
func (s *Scheduler) promote(ctx context.Context, sh store.Shard, fields watermill.LogFields, a store.PromoteArgs, due bool) (tick, error) {
	a.Batch, a.Owner, a.Lease = s.batch, s.owner, s.lease
	var (
		r   store.PromoteReply
		ran bool
		err error
	)
	if due && s.readers != nil {
		r, ran, err = s.readers.Promote(ctx, sh, a)
	}
	if !ran && err == nil {
		r, err = store.Promote(ctx, s.redis, sh, a)
	}
	if err != nil {
		return tick{}, fmt.Errorf("promote due messages: %w", err)
	}
	moved, wait, missing := r.Moved, r.Wait, r.Missing
	s.metrics.promotedTick(sh, fields["topic"].(string), moved, wait, r.Held)
	t := tick{held: r.Held, declined: !r.Held && wait == -1, groups: r.Groups, wait: s.interval, far: r.Far, farFormat: r.FarFormat,
		empty: r.Held && wait == -1 && r.Far < 0}
	if missing > 0 {
		s.logger.Error("redisdelay: waiting messages without a stored body were dropped", nil,
			fields.Add(watermill.LogFields{"count": missing}))
	}
	if !t.held && wait >= 0 {
		wait += 1000 // just after the lease expires (-1: it has no expiry)
	}
	if wait >= 0 && time.Duration(wait)*time.Microsecond < s.interval {
		t.wait = time.Duration(wait) * time.Microsecond
		t.due = t.held
	}
	if t.declined {
		// Left to a scheduler holding fewer leases, which a release wakes
		// at once; if none took it by then, the next tick takes it (see
		// balance.mayTake), a short grace rather than a check interval later.
		t.wait = max(s.interval/10, time.Millisecond)
	}
	return t, nil
}

// release gives up the topic's lease if this scheduler holds it and wakes
// the standbys, so one takes over at once.
func (s *Scheduler) release(sh store.Shard, fields watermill.LogFields) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // else it expires
	defer cancel()
	_, err := store.Unlease(ctx, s.redis, sh, s.owner, wakeRelease)
	if err != nil && !store.IsClientClosed(err) {
		s.limiter.Errorf(s.logger, "redisdelay: cannot release the scheduling lease; another scheduler takes over when it expires", err, fields)
	}
}

// reclaim takes back the group's messages held past its visibility timeout
// by consumers that stopped extending their lease, and with cleanup removes
// consumers idle past the group's idle timeout. It returns the group's
// visibility timeout.
// reclaimBatch is how many pending entries one reclaim.lua call looks at:
// a few ms of Redis time at most.
const reclaimBatch = 256

func (s *Scheduler) reclaim(ctx context.Context, sh store.Shard, fields watermill.LogFields, g string, cleanup bool) (vis, oldest time.Duration, err error) {
	// A sweep of a long pending list takes several calls (see reclaim.lua).
	var requeued, buried, evicted, missing, removed int64
	for pos := store.ReclaimStart; pos.Stream != 0; {
		r, err := store.Reclaim(ctx, s.redis, sh, g, reclaimBatch, cleanup, pos)
		if err != nil {
			return 0, 0, fmt.Errorf("reclaim messages of group %q: %w", g, err)
		}
		requeued, buried, evicted, missing, removed, vis = requeued+r.Requeued, buried+r.Buried, evicted+r.Evicted, missing+r.Missing, removed+r.Removed, r.Vis
		oldest = max(oldest, r.Oldest)
		pos = r.Next
	}
	s.metrics.reclaimedTick(fields["topic"].(string), g, requeued, buried)
	fields = fields.Add(watermill.LogFields{"consumer_group": g})
	if requeued+buried > 0 {
		s.logger.Info("redisdelay: reclaimed messages from consumers that stopped responding",
			fields.Add(watermill.LogFields{"requeued": requeued, "dead_lettered": buried}))
	}
	if evicted > 0 {
		s.logger.Error("redisdelay: dead letters full (MaxDeadLetters); evicted the oldest", nil, fields.Add(watermill.LogFields{"evicted": evicted}))
	}
	if missing > 0 {
		s.logger.Error("redisdelay: pending entries without content were dropped", nil, fields.Add(watermill.LogFields{"count": missing}))
	}
	if removed > 0 {
		s.logger.Debug("redisdelay: removed idle consumers", fields.Add(watermill.LogFields{"count": removed}))
	}
	return vis, oldest, nil
}

func (s *Scheduler) trimStream(ctx context.Context, sh store.Shard, fields watermill.LogFields) error {
	r, err := store.Trim(ctx, s.redis, sh, s.retention, s.lvl.Level())
	if err != nil {
		return fmt.Errorf("trim the ready stream: %w", err)
	}
	if r.FarFilter {
		s.rebuildFarFilter(sh, fields)
	}
	if r.Parked > 0 {
		s.unpark(ctx, sh, r.Parked, fields)
	}
	fields = fields.Add(watermill.LogFields{"count": r.Removed})
	switch {
	case r.Removed > 0 && r.ByRetention:
		s.logger.Info("redisdelay: removed ready messages older than Retention from a topic no consumer group reads", fields)
	case r.Removed > 0:
		s.logger.Debug("redisdelay: trimmed acknowledged entries", fields)
	}
	return nil
}
