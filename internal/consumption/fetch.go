package consumption

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/redisdelay/watermill-redisdelay/internal/pause"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// fetch returns the next entries to deliver: the consumer's own pending
// entries while pos is in its history, else new ones, once the gate lets
// them through. It returns none, and the caller comes back, after waiting
// for the bell, a pause or a failed read; stop when the subscription must
// stop.
func (sub *subscription) fetch(ctx context.Context, pos *readPos) (entries []entry, stop bool) {
	// A tick handed over while waiting is run by the read of new entries
	// (readNew); on every other way out, the scheduler runs it.
	defer sub.reads.declineHandoff()
	if pos.history && sub.flushBeforeHistory(ctx) {
		return nil, true
	}
	if !pos.history && sub.reads.takeArmed() {
		// Read all there was: wait until there is more, then check the
		// ownership and the gate again.
		if !sub.waitBell(ctx) {
			return nil, false
		}
		// A scheduler handed its tick over: read now, the tick first.
	}
	count := sub.s.config.BatchSize
	if !pos.history {
		// Pause and rate limit: only new messages.
		var err error
		count, err = sub.gate(ctx)
		sub.order.enter(phaseStep)
		if err != nil {
			return nil, sub.readFailed(ctx, err, pos)
		}
		if count == 0 {
			return nil, false
		}
	}
	entries, err := sub.read(ctx, pos.history, pos.cursor, count)
	if !pos.history {
		// A read takes up to count from each of its two streams: an
		// excess is charged to the next reservation.
		sub.flow.charge(len(entries))
	}
	if err != nil {
		return nil, sub.readFailed(ctx, err, pos)
	}
	pos.failures = 0
	if pos.history && len(entries) == 0 {
		pos.history = false
	}
	return entries, false
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
	sub.s.limiter.Errorf(sub.s.logger, "redisdelay: cannot write acknowledgements to Redis; acked messages may be delivered again", err, sub.fields())
	return false
}

// readFailed handles a failed read: it recreates a vanished consumer
// group, and pauses before the next read, which reads the history. It
// reports whether the subscription must stop.
func (sub *subscription) readFailed(ctx context.Context, err error, pos *readPos) (stop bool) {
	s := sub.s
	sub.reads.declineHandoff() // the scheduler's to run, not after the pause below
	if sub.ended(ctx, err) {
		return true
	}
	pos.failures++
	wait := pause.Backoff(pos.failures, 2*time.Second)
	s.limiter.Errorf(s.logger, "redisdelay: read failed; retrying", err, sub.fields().Add(watermill.LogFields{"retry_in": wait.String()}))
	if store.IsNoGroup(err) {
		// The group vanished (Redis restarted without persistence, or
		// someone deleted the keys): create it again.
		if err := s.config.Reinitialize(ctx, sub.topic); err != nil {
			s.limiter.Errorf(s.logger, "redisdelay: cannot recreate consumer group", err, sub.fields())
		}
	}
	pos.rewind()
	sub.order.enter(phaseWait)
	pause.Sleep(ctx, wait)
	return false
}

// gate decides, before a read of new messages, whether the group is paused
// and what its rate limit allows, and waits what that says. It returns how
// many messages to read (0: paused, or ctx ended: read nothing now); an
// error is handled as a failed read.
//
// With a rate limit it asks Redis every time (gate.lua). Without one it
// asks only when it must: while paused (once per BlockTime, or when told
// of a resume), when told of a pause change (see listen), and once per
// BlockTime otherwise, for a notification that was lost (a subscriber
// reconnecting, or a Pause by a version that did not send one); then a
// plain EXISTS of the pause flag does.
func (sub *subscription) gate(ctx context.Context) (count int, err error) {
	s, f := sub.s, &sub.flow
	limit := s.config.rateLimit(sub.topic)
	want := limit.batch(s.config.BatchSize)
	notified := f.notified.Swap(false)
	checkDue := time.Since(f.checked) >= s.config.BlockTime
	if limit.Messages == 0 && !f.paused && !notified && !checkDue {
		return want, nil
	}
	sh := s.config.Keys.Shard(sub.topic, 0)
	var r store.GateReply
	if limit.Messages > 0 {
		r, err = store.Gate(ctx, s.redis, sh, store.GateArgs{Group: s.config.ConsumerGroup, LimitMessages: limit.Messages, LimitPer: limit.Per,
			Want: want, Unused: f.unused, Reserved: f.reserved})
	} else {
		r.Count = want
		r.Paused, err = store.Paused(ctx, s.redis, sh, s.config.ConsumerGroup)
	}
	if err != nil {
		if notified {
			f.notified.Store(true) // still to be checked
		}
		return 0, fmt.Errorf("check whether the group is paused or rate limited: %w", err)
	}
	if f.learned(r.Paused) {
		what := "redisdelay: consumer group resumed; fetching messages again"
		if r.Paused {
			what = "redisdelay: consumer group paused (Inspector.Pause); fetching no messages until it is resumed"
		}
		s.logger.Info(what, sub.fields())
	}
	if r.Paused {
		// Checked again when a change is published, else once per
		// BlockTime; a tick handed over meanwhile is the scheduler's to
		// run now (other groups read what it moves).
		sub.reads.declineHandoff()
		t := time.NewTimer(s.config.BlockTime)
		defer t.Stop()
		sub.order.enter(phaseWait)
		select {
		case <-ctx.Done():
		case <-f.wake:
		case <-t.C:
		}
		return 0, nil
	}
	// Given back by the next call unless the read fetches them all (or
	// another reservation came after this one).
	f.reserve(limit.Messages > 0, r.Count, r.End)
	if r.Wait > 0 {
		sub.order.enter(phaseWait)
		pause.Sleep(ctx, r.Wait)
	}
	if ctx.Err() != nil {
		return 0, nil
	}
	return r.Count, nil
}

// reads is the state of a subscription's reads of new messages, held as
// subscription.reads. It needs no lock: it is the run goroutine's unless
// atomic or a channel. The last read found fewer than it asked for, so
// the next arms the bell (drained); that read found fewer too, so the next
// waits for it (armed; unarmed: Redis refused to arm it, so it polls).
// visRead is when a read last read the stored visibility timeout. Grouped
// messages (see fair.lua): groupsRung, set by the bell's listener and the
// sweep, says a group may be served; groupMore that the last pick left
// groups to serve; groupWake when a group asleep under its rate limit
// wakes; groupsChecked when a read last picked (see groupCheckEvery).
type reads struct {
	drained, armed, unarmed bool
	waiting                 atomic.Bool   // waiting for the bell (waitBell), read by the acker
	unwaited                chan struct{} // woken when a wait for the bell ends (the acker waits on it); capacity 1
	bell                    chan struct{} // rung by the hub and the sweep (see ring); capacity 1
	visRead                 time.Time
	// A scheduler's tick handed to the subscription while it waits for
	// the bell (unbuffered), and the one taken, run by the next read
	// (handoff.go).
	handoff chan *handoff
	promote *handoff

	groupsRung    atomic.Bool
	groupMore     bool
	groupWake     time.Time
	groupsChecked time.Time
}

// ring rings the bell: the subscription reads at once, or when it next
// waits for the bell.
func (r *reads) ring() { wakeUp(r.bell) }

// serveGroups says a group of grouped messages may be served: the next
// read picks first.
func (r *reads) serveGroups() { r.groupsRung.Store(true) }

// isWaiting reports whether the subscription waits for its bell, having
// read all there was (its queued acks then wait for its next read: see
// ackLoop).
func (r *reads) isWaiting() bool { return r.waiting.Load() }

// takeArmed reports whether the last read armed the bell and took all
// there was, so the subscription is to wait for the bell, and disarms it.
func (r *reads) takeArmed() bool {
	armed := r.armed
	r.armed = false
	return armed
}

// Reads of new messages never block a connection (see internal/store/hub.go). While a
// subscription finds as many messages as it asks for it reads again at
// once. Once a read finds fewer, the next read arms the partition's bell
// first, in the same pipeline (store.ReadNew): when that read too takes
// all there is, the subscription handles what it read and waits for the
// bell: a note on the bell's channel (any script that adds entries rings
// it once armed, see lib.lua's ring), its (re)subscription, a pause
// change, or the Subscriber's sweep, which peeks at idle subscriptions
// once per BlockTime for entries a writer added without ringing. A message
// published to an idle topic so costs the subscription one pipelined read
// (SET NX and XREADGROUP), an idle subscription one pipelined peek per
// BlockTime, and Close never waits for a read longer than one command
// takes.
//
// Grouped messages (fair.lua) are not in the streams until a pick
// (pick.lua) moves them there: a read picks first after a note "g" on the
// bell's channel (a group may be served: rung whether the bell is armed or
// not), while the last pick left groups to serve, once a group asleep
// under its rate limit may wake, after a (re)subscription or a sweep, and
// at least every groupCheckEvery while the subscription reads a backlog.
//
// When Redis refuses the client the channels of the key prefix (an ACL
// without &<prefix>:*, or SUBSCRIBE denied), or the client is a
// *redis.Ring, subscriptions read every deniedPoll instead, and the
// Subscriber logs once why.

// groupCheckEvery is how often a subscription that reads a backlog of
// plain messages looks for grouped messages queued meanwhile (pick.lua)
// without being told ("g" on the bell's channel), so they do not wait for
// the backlog.
const groupCheckEvery = 100 * time.Millisecond

// deniedPoll is how often an idle subscription reads when Redis refuses
// the client the bell's channel.
const deniedPoll = 100 * time.Millisecond

// listen registers the subscription for its partition's bell, its
// group's pause notifications and, under a concurrency cap, slot
// releases; the returned func unregisters it, telling
// Redis before it returns when no other listener needs the channels.
func (sub *subscription) listen() (unlisten func()) {
	h := sub.s.hub
	note := sub.note()
	bell := &store.Listener{Fn: func(n store.Note) {
		// "g": a group of grouped messages may be served; a
		// (re)subscription: notes published meanwhile are lost.
		if n.Payload == "g" || n.Subscribed {
			sub.reads.serveGroups()
		}
		if n.Payload == note {
			return // rung by a tick this subscription's read ran, which read what it moved
		}
		sub.reads.ring()
	}}
	flow := &store.Listener{Fn: func(store.Note) {
		// A pause change, or the (re)subscription of its channel: changes
		// published while not subscribed are lost, so check.
		sub.flow.notify()
	}}
	sh0, group := sub.s.config.Keys.Shard(sub.topic, 0), sub.s.config.ConsumerGroup
	channels := map[string]*store.Listener{sh0.Flow(group): flow}
	if sub.s.config.concurrency(sub.topic) > 0 {
		// A concurrency slot was released (slot.lua).
		channels[sh0.Running(group)] = &store.Listener{Fn: func(store.Note) { sub.flow.slotReleased() }}
	}
	for channel, l := range channels {
		h.Listen(channel, l)
	}
	unlistenBell := h.ListenMarked(sub.shard.Bell(), bell)
	return func() {
		unlistenBell()
		for channel, l := range channels {
			h.Unlisten(channel, l)
		}
	}
}

// wakeUp sends on a channel of capacity 1 unless a wake-up is pending.
func wakeUp(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// readNew reads up to count new entries of each of the subscription's two
// streams (the redelivery stream first), picking grouped messages first
// when it must (see the top of this file). When it took all there was
// after arming the bell, the caller waits for the bell before reading
// again (see waitBell).
func (sub *subscription) readNew(ctx context.Context, count int) ([]store.Batch, error) {
	s := sub.s
	now := time.Now()
	a := store.ReadArgs{Group: s.config.ConsumerGroup, Consumer: sub.consumer, Count: count}
	a.Pick, a.Arm, a.Vis = sub.reads.plan(now, sub.renewEvery())
	// The acks queued ride along (see ackLoop; not while a test holds
	// them: ackGate); one write of the queue at a time.
	a.AckReady, a.AckRedo = sub.acks.startWrite(s.AckGate == nil)
	h := sub.reads.takeHandoff()
	if h != nil {
		a.Promote = &h.args
	}
	r, err := store.ReadNew(ctx, s.redis, sub.shard, a)
	if h != nil {
		// Its own error: the read's (a vanished group, say) is not the
		// tick's. Cut short by the subscription's end, the scheduler
		// calls again (a second call moves nothing twice).
		ran := r.PromoteErr == nil || ctx.Err() == nil
		h.reply <- handoffReply{r: r.Promote, ran: ran, err: r.PromoteErr}
		if ran {
			s.Handoffs.Add(1)
		}
	}
	if len(a.AckReady)+len(a.AckRedo) > 0 {
		if _, ackErr := sub.acked(a.AckReady, a.AckRedo, r.Acked); ackErr != nil && err == nil {
			s.limiter.Errorf(s.logger, "redisdelay: cannot write acknowledgements to Redis; retrying", ackErr, sub.fields())
		}
	}
	sub.acks.endWrite()
	if err != nil {
		if a.Pick {
			sub.reads.serveGroups() // still to be picked
		}
		return nil, err
	}
	if a.Vis {
		sub.leases.learnVis(r.Vis)
	}
	sub.reads.record(now, a, r)
	return r.Streams, nil
}

// plan decides what a read of new entries at now does besides reading (see
// the top of this file): pick grouped messages first, arm the bell, read
// the group's stored visibility timeout (once per renewal period: see
// renewEvery).
func (r *reads) plan(now time.Time, renewEvery time.Duration) (pick, arm, vis bool) {
	pick = r.groupsRung.Swap(false) || r.groupMore ||
		!r.groupWake.IsZero() && !now.Before(r.groupWake) ||
		!r.drained && now.Sub(r.groupsChecked) >= groupCheckEvery
	arm = r.drained
	// The stored timeout paces lease renewal (see renewEvery): read once
	// per renewal period, so a shorter one set by another subscriber of
	// the group is followed within a period.
	vis = now.Sub(r.visRead) >= renewEvery
	return pick, arm, vis
}

// record records what the read made at now with a (see plan) found: when
// it took all there was after arming the bell, the subscription is to
// wait for the bell (see takeArmed).
func (r *reads) record(now time.Time, a store.ReadArgs, rep store.ReadReply) {
	if a.Pick {
		r.groupsChecked = now
		r.groupMore, r.groupWake = rep.Pick.More, rep.Pick.Wake
	}
	if a.Vis {
		r.visRead = now
	}
	short := true // no stream gave all that was asked for: it took all there was
	for _, xs := range rep.Streams {
		if len(xs.Entries) >= a.Count {
			short = false
		}
	}
	switch {
	case !short || r.groupMore || rep.PromoteLate:
		// PromoteLate: the tick ran after the read, which did not see
		// what it moved, and rang with this subscription's note.
		r.drained = false
	case a.Arm:
		// Refused at maxmemory: poll until a read arms it again.
		r.armed, r.unarmed = true, !rep.Armed
	default:
		r.drained = true
	}
}

// readArgs are the arguments of a non-blocking read of the subscription's
// streams from the given ids (">": new entries).
func (sub *subscription) readGroup(ctx context.Context, count int, redo, ready string) ([]store.Batch, error) {
	return store.ReadGroup(ctx, sub.s.redis, sub.shard, sub.s.config.ConsumerGroup, sub.consumer, count, redo, ready)
}

func entryCount(res []store.Batch) int {
	n := 0
	for _, xs := range res {
		n += len(xs.Entries)
	}
	return n
}

// waitBell waits once the subscription handled a read that armed the
// bell: until the bell rings (at once if it rang meanwhile), a pause
// change is notified, a group asleep under its rate limit wakes (see
// fair.lua), a scheduler of this process hands it a tick (handedOver:
// see handoff.go) or ctx ends. The Subscriber's sweep peeks at it once
// per BlockTime, ringing it when there is something to read all the same;
// an ordered subscription, any while Redis refuses the bell's channel,
// and one whose read could not arm the bell (maxmemory) read again after
// pollEvery instead.
func (sub *subscription) waitBell(ctx context.Context) (handedOver bool) {
	var poll <-chan time.Time
	if sub.order == nil && !sub.s.bellsDenied.Load() && !sub.reads.unarmed {
		sub.s.waiting(sub)
		defer sub.s.waited(sub)
	} else {
		t := time.NewTimer(sub.pollEvery())
		defer t.Stop()
		poll = t.C
	}
	sub.reads.waiting.Store(true) // its queued acks wait for its next read (ackLoop)
	defer func() {
		sub.reads.waiting.Store(false)
		wakeUp(sub.reads.unwaited)
	}()
	var wake <-chan time.Time
	if !sub.reads.groupWake.IsZero() {
		// A group asleep under its rate limit wakes then: nothing rings.
		t := time.NewTimer(time.Until(sub.reads.groupWake))
		defer t.Stop()
		wake = t.C
	}
	select {
	case <-wake:
	case <-ctx.Done():
	case <-sub.reads.bell:
	case <-sub.flow.woken(): // flow.notified tells the gate to check
	case <-poll:
	case h := <-sub.reads.handoff:
		sub.reads.promote = h
		return true
	}
	return false
}

// pollEvery is how long a subscription that waits for its bell without
// the sweep (see waitBell) waits before it reads anyway: BlockTime;
// deniedPoll while Redis refuses the bell's channel; an ordered
// subscription checks its share of the partitions at least every
// orderedPace.
func (sub *subscription) pollEvery() time.Duration {
	s := sub.s
	d := s.config.BlockTime
	if s.bellsDenied.Load() || sub.reads.unarmed {
		d = min(d, deniedPoll)
	}
	if sub.order != nil {
		d = min(d, s.orderedPace())
	}
	return d
}

// read reads new entries (waiting for them, see the top of this file) or, with history, the
// consumer's own pending entries from cursor on.
func (sub *subscription) read(ctx context.Context, history bool, cursor [2]string, count int) ([]entry, error) {
	var res []store.Batch
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
		for _, m := range xs.Entries {
			entries = append(entries, entry{stream: xs.Stream, redo: xs.Stream == redo, msg: m})
		}
	}
	return entries, nil
}
