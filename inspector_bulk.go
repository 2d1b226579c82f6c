package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// BulkOptions are the options of the Inspector's bulk actions
// (CancelWhere, RescheduleWhere, RequeueDeadLettersWhere,
// DeleteDeadLettersWhere).
type BulkOptions struct {
	// All must be set for the zero Filter, which selects every message:
	// an empty filter by mistake then fails with ErrEmptyFilter.
	All bool
	// DryRun counts the matching messages and changes nothing.
	DryRun bool
	// Cursor resumes a run that was interrupted (a cancelled context, an
	// error): pass the Cursor of the BulkProgress it returned, however
	// much later. Messages already acted on are gone from where the run
	// reads, or no longer match, so none is acted on twice (a dead letter
	// requeued, dead again and met by the resumed run is another death).
	// A cursor of SearchWaiting, or of a bulk action of an earlier version
	// (the same form), is taken too: the run goes on from the start of the
	// partition it names (its far tier from the bucket it names, if it
	// names one), and acts on none twice.
	Cursor string
	// Progress, when set, is called after every batch of up to 1,000
	// messages read, with the counts so far.
	Progress func(BulkProgress)
}

// BulkProgress counts what a bulk action did.
//
// CancelWhere and RescheduleWhere act on every message that waits, in
// either tier, and matches the filter from the start of the run to its
// end (the run resumed from its cursors included, however much later),
// however it moves meanwhile: unpacked by the scheduler from the far tier
// into the waiting set, pulled there by a Cancel, Reschedule or retried
// Publish, rescheduled by anyone. Each partition's far tier is read
// before its waiting set, and a far message leaves the far tier only for
// the waiting set (or for good); the waiting set is read with ZSCAN,
// which returns every member that stays in it through the read, whatever
// its due time does. A message that stops waiting before its turn (falls
// due, is cancelled or replaced) is matched, not done; one published
// during the run may be left. A run that fails returns the cursor to
// resume it from, which loses nothing.
type BulkProgress struct {
	// Scanned is how many stored messages were read, Matched how many of
	// them the filter selected, Done how many of those were acted on (0 in
	// a dry run). A message that changed in between (fell due, was
	// cancelled) is matched but not done. A message read twice is counted
	// twice in Scanned; in Matched only by a dry run, which changes
	// nothing: one the scheduler moves from the far tier into the waiting
	// set during a dry run may be counted in both, and one the waiting
	// set's ZSCAN returns twice (Redis resized the set meanwhile) too.
	Scanned, Matched, Done int64
	// Cursor is where the run is: "" once it is complete (nil error).
	// With an error, it is the value for BulkOptions.Cursor to resume the
	// run from: the cursor the run was given when it failed before
	// reading.
	Cursor string
}

// CancelWhere cancels the waiting messages of a topic that match f, as
// Cancel does one, far tier included, and returns the counts: every match
// that waits from the start of the run to its end, however it moves
// meanwhile (see BulkProgress). It reads each partition's far tier, then
// its waiting set, 1,000 messages at a time, and cancels the matches of
// each batch on one pipeline per partition (two more for those of the far
// tier): its cost is a read of the far buckets the filter's due range
// covers, of the whole waiting set (members and due times; the bodies of
// those in the range), and a script call per match.
func (i *Inspector) CancelWhere(ctx context.Context, topic string, f Filter, o BulkOptions) (BulkProgress, error) {
	s, err := i.waitingBulk(ctx, topic, f, o)
	if err != nil {
		return BulkProgress{Cursor: o.Cursor}, err
	}
	p, err := runBulk(ctx, s, o, i.eachWaiting(ctx, func(ctx context.Context, sh store.Shard, uuids []string) (int, error) {
		return store.CancelMany(ctx, i.client, sh, uuids)
	}))
	return p, wrapErr(err, "cancel waiting messages of topic %q", topic)
}

// RescheduleWhere moves the waiting messages of a topic that match f to be
// due at due, as Reschedule does one, and returns the counts; messages
// already due then (to the millisecond) are left alone and not counted, so
// one moved ahead of the run is not moved twice, and a run repeated does
// nothing. The due time is the instant given, as Redis's clock reads it
// (Reschedule's is a delay from Redis's now). It reads and acts as
// CancelWhere does.
func (i *Inspector) RescheduleWhere(ctx context.Context, topic string, f Filter, due time.Time, o BulkOptions) (BulkProgress, error) {
	if err := validateTopic(topic); err != nil {
		return BulkProgress{Cursor: o.Cursor}, err
	}
	switch {
	case due.IsZero():
		return BulkProgress{Cursor: o.Cursor}, fmt.Errorf("%w: reschedule messages of topic %q: the due time is the zero time.Time: give the instant they are to be delivered",
			ErrInvalidDelay, topic)
	case time.Until(due) > meta.MaxDelay:
		return BulkProgress{Cursor: o.Cursor}, fmt.Errorf("%w: reschedule messages of topic %q: due in %s, beyond the limit of 100 years: use a nearer due time",
			ErrInvalidDelay, topic, meta.DescribeDelay(time.Until(due)))
	}
	s, err := i.waitingBulk(ctx, topic, f, o)
	if err != nil {
		return BulkProgress{Cursor: o.Cursor}, err
	}
	at := due.UnixMilli()
	s.skip = func(w waitingMatch) bool { return w.Due.UnixMilli() == at }
	p, err := runBulk(ctx, s, o, i.eachWaiting(ctx, func(ctx context.Context, sh store.Shard, uuids []string) (int, error) {
		return store.RescheduleMany(ctx, i.client, sh, uuids, at)
	}))
	return p, wrapErr(err, "reschedule waiting messages of topic %q", topic)
}

// RequeueDeadLettersWhere sends a group's dead letters that match f back
// to it as a new first attempt, as RequeueDeadLetter does one, and returns
// the counts. It reads the dead letters as SearchDeadLetters does, 1,000
// at a time, and requeues each batch in one call per partition.
func (i *Inspector) RequeueDeadLettersWhere(ctx context.Context, topic, group string, f Filter, o BulkOptions) (BulkProgress, error) {
	s, err := i.deadBulk(ctx, topic, group, f, o)
	if err != nil {
		return BulkProgress{Cursor: o.Cursor}, err
	}
	p, err := runBulk(ctx, s, o, byPartition(func(sh store.Shard, ids []string) (int, error) {
		return i.requeue(ctx, sh, group, ids...)
	}))
	return p, wrapErr(err, "requeue dead letters of group %q in topic %q", group, topic)
}

// DeleteDeadLettersWhere deletes a group's dead letters that match f for
// good, and returns the counts. It reads the dead letters as
// SearchDeadLetters does, 1,000 at a time, and deletes each batch in one
// call per partition.
func (i *Inspector) DeleteDeadLettersWhere(ctx context.Context, topic, group string, f Filter, o BulkOptions) (BulkProgress, error) {
	s, err := i.deadBulk(ctx, topic, group, f, o)
	if err != nil {
		return BulkProgress{Cursor: o.Cursor}, err
	}
	p, err := runBulk(ctx, s, o, byPartition(func(sh store.Shard, ids []string) (int, error) {
		n, err := store.DeleteDead(ctx, i.client, sh, group, ids...)
		return int(n), err
	}))
	return p, wrapErr(err, "delete dead letters of group %q in topic %q", group, topic)
}

// A scan reads stored messages in bounded steps from a position it can
// give as a cursor, and hands on those the filter selects.
type scan[T any] interface {
	// run reads up to budget stored messages, handing on matches until
	// want of them (0: no bound) were.
	run(ctx context.Context, budget, want int, found func(T)) error
	cursor() string
	scanned() int64
}

// runBulk reads s a batch at a time and runs act on each batch's matches.
func runBulk[T any](ctx context.Context, s scan[T], o BulkOptions, act func([]T) (int64, error)) (BulkProgress, error) {
	p := BulkProgress{Cursor: s.cursor()}
	for {
		var found []T
		err := s.run(ctx, scanBatch, 0, func(t T) { found = append(found, t) })
		p.Scanned, p.Matched = s.scanned(), p.Matched+int64(len(found))
		if err == nil && !o.DryRun && len(found) > 0 {
			var done int64
			done, err = act(found)
			p.Done += done
		}
		if err != nil {
			// From the batch's start: those acted on are gone or no
			// longer match, and far messages pulled into the waiting set
			// and not acted on are read there, after the far tier.
			return p, err
		}
		p.Cursor = s.cursor()
		if o.Progress != nil {
			o.Progress(p)
		}
		if p.Cursor == "" {
			return p, nil
		}
		if err := ctx.Err(); err != nil {
			return p, err
		}
	}
}

// eachWaiting acts on a batch of waiting messages a bulkScan read: for each
// partition, it pulls the far tier's messages into the waiting set, where
// cancel.lua and reschedule.lua find them, then runs many on the UUIDs (one
// pipeline each); it counts what many reports done. The pull and the
// action run to their end once begun, whatever ctx says. Should Redis fail
// between the two, the run resumes from the batch's start, and the pulled
// messages are read in the partition's waiting set, after its far tier.
func (i *Inspector) eachWaiting(ctx context.Context, many func(context.Context, store.Shard, []string) (int, error)) func([]waitingMatch) (int64, error) {
	ctx = context.WithoutCancel(ctx)
	return func(ws []waitingMatch) (int64, error) {
		ids, far := map[store.Shard][]string{}, map[store.Shard][]string{}
		var order []store.Shard
		for _, w := range ws {
			if _, ok := ids[w.shard]; !ok {
				order = append(order, w.shard)
			}
			ids[w.shard] = append(ids[w.shard], w.Message.UUID)
			if w.far {
				far[w.shard] = append(far[w.shard], w.Message.UUID)
			}
		}
		return actByPartition(order, ids, func(sh store.Shard, uuids []string) (int, error) {
			if len(far[sh]) == 0 {
				return many(ctx, sh, uuids)
			}
			if err := store.FarPullMany(ctx, i.client, sh, far[sh]); err != nil {
				return 0, err
			}
			return many(ctx, sh, uuids)
		})
	}
}

// actByPartition runs act on the ids of each partition, in order.
func actByPartition(order []store.Shard, ids map[store.Shard][]string, act func(store.Shard, []string) (int, error)) (int64, error) {
	var done int64
	for _, sh := range order {
		n, err := act(sh, ids[sh])
		done += int64(n)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// byPartition acts on a batch of dead letters in one call per partition.
func byPartition(act func(store.Shard, []string) (int, error)) func([]deadMatch) (int64, error) {
	return func(ds []deadMatch) (int64, error) {
		ids := map[store.Shard][]string{}
		var order []store.Shard
		for _, d := range ds {
			if _, ok := ids[d.shard]; !ok {
				order = append(order, d.shard)
			}
			ids[d.shard] = append(ids[d.shard], d.id)
		}
		return actByPartition(order, ids, act)
	}
}

func checkBulk(f Filter, o BulkOptions) error {
	if err := f.validate(); err != nil {
		return err
	}
	if f.empty() && !o.All {
		return ErrEmptyFilter
	}
	return nil
}

func (i *Inspector) waitingBulk(ctx context.Context, topic string, f Filter, o BulkOptions) (*bulkScan, error) {
	if err := checkBulk(f, o); err != nil {
		return nil, err
	}
	return i.bulkScan(ctx, topic, f, o.Cursor)
}

// deadBulk is the scan of a bulk action on dead letters: those that died
// before it started, by Redis's clock, so that a dead letter requeued and
// dead again is not met again.
func (i *Inspector) deadBulk(ctx context.Context, topic, group string, f Filter, o BulkOptions) (*deadScan, error) {
	if err := checkBulk(f, o); err != nil {
		return nil, err
	}
	s, err := i.deadScan(ctx, topic, group, f, o.Cursor)
	if err != nil {
		return nil, err
	}
	now, err := store.RedisTime(ctx, i.client)
	if err != nil {
		return nil, wrapErr(err, "read Redis's time")
	}
	s.until = now.UnixMilli()
	return s, nil
}

// bulkScan reads the waiting messages of a topic for a bulk action:
// partition by partition, the far tier bucket by bucket from its first
// bucket the filter's due range reaches, then the waiting set with ZSCAN.
//
// So it meets every message that waits through the run, however it moves
// (see BulkProgress): a message leaves the far tier only for the waiting
// set of its partition (unpacked, or pulled by a cancel, a reschedule or
// a retried publish), which is read after; once the far tier is read,
// none of the messages it held at the start is left unread in it; and
// ZSCAN returns every member that stays in the set from its first call to
// its last, however its score changes (a read by due time, as
// SearchWaiting's, passes over one moved behind its position). The price:
// the waiting set is read whole, members and scores, whatever the
// filter's due range (bodies only of those in it); it holds what falls due
// within about two minutes, and messages with a business key or priority.
//
// Its cursor is bulk:<partition>:far:<bucket>:<position> or
// bulk:<partition>:near:<ZSCAN cursor>; ZSCAN cursors stay valid across
// calls however far apart (Redis keeps no state for them).
type bulkScan struct {
	i      *Inspector
	shards []store.Shard
	waitingFilter
	read int64

	part int
	near bool   // reading the waiting set (else the far tier)
	far  farPos // far: where
	zcur uint64 // near: the ZSCAN cursor

	readNow bool  // read Redis's time into now before each batch
	now     int64 // Redis's time in ms, rounded up, at the batch's start
}

func (i *Inspector) bulkScan(ctx context.Context, topic string, f Filter, cursor string) (*bulkScan, error) {
	shards, err := i.waitingShards(ctx, topic, f)
	if err != nil {
		return nil, err
	}
	return newBulkScan(i, shards, f, topic, cursor)
}

func newBulkScan(i *Inspector, shards []store.Shard, f Filter, topic, cursor string) (*bulkScan, error) {
	s := &bulkScan{i: i, shards: shards, waitingFilter: waitingFilter{f: f}}
	s.start(0)
	switch {
	case cursor == "":
	case strings.HasPrefix(cursor, bulkCursorPrefix):
		if err := s.parse(cursor, topic); err != nil {
			return nil, err
		}
	default:
		// SearchWaiting's form, which bulk actions wrote before: from the
		// start of its partition, or from its far position.
		old := &waitingScan{shards: shards, waitingFilter: s.waitingFilter}
		if err := old.parse(cursor, topic); err != nil {
			return nil, err
		}
		s.start(old.part)
		if old.isFar {
			s.far = old.far
		}
	}
	return s, nil
}

// parse sets the position to a bulk cursor's.
func (s *bulkScan) parse(cursor, topic string) error {
	parts := strings.Split(strings.TrimPrefix(cursor, bulkCursorPrefix), ":")
	var errs [3]error
	s.part, errs[0] = strconv.Atoi(parts[0])
	switch {
	case len(parts) == 3 && parts[1] == "near":
		s.near = true
		s.zcur, errs[1] = strconv.ParseUint(parts[2], 10, 64)
	case len(parts) == 4 && parts[1] == "far":
		s.far.bucket, errs[1] = strconv.ParseInt(parts[2], 10, 64)
		s.far.pos, errs[2] = strconv.ParseInt(parts[3], 10, 64)
	default:
		return badCursor(cursor)
	}
	if errors.Join(errs[:]...) != nil || s.part < 0 || s.far.bucket < 0 || s.far.pos < 0 {
		return badCursor(cursor)
	}
	if s.part >= len(s.shards) {
		return cursorPartition(cursor, s.part, topic, len(s.shards))
	}
	return nil
}

func (s *bulkScan) cursor() string {
	switch {
	case s.part >= len(s.shards):
		return ""
	case s.near:
		return fmt.Sprintf("%s%d:near:%d", bulkCursorPrefix, s.part, s.zcur)
	}
	return fmt.Sprintf("%s%d:far:%d:%d", bulkCursorPrefix, s.part, s.far.bucket, s.far.pos)
}

func (s *bulkScan) scanned() int64 { return s.read }

// start moves to the start of partition part: its far tier.
func (s *bulkScan) start(part int) {
	s.part, s.near, s.far, s.zcur = part, false, farPos{bucket: s.f.firstFarBucket()}, 0
}

// run reads whole batches: a bulk action takes every match (want is 0).
// A message met twice in one batch (unpacked from the far tier into the
// waiting set while read, or returned twice by ZSCAN as Redis resized the
// set) is handed on once.
func (s *bulkScan) run(ctx context.Context, budget, _ int, found func(waitingMatch)) error {
	if s.readNow {
		t, err := store.RedisTime(ctx, s.i.client)
		if err != nil {
			return wrapErr(err, "read Redis's time")
		}
		s.now = store.CeilMs(t)
	}
	type seenKey struct {
		sh   store.Shard
		uuid string
	}
	seen := map[seenKey]bool{}
	offer := func(w waitingMatch) bool {
		k := seenKey{w.shard, w.Message.UUID}
		if seen[k] {
			return false
		}
		if !s.offer(w, found) {
			return false
		}
		seen[k] = true
		return true
	}
	for s.part < len(s.shards) && budget > 0 {
		var n int
		var err error
		if s.near {
			n, err = s.nearStep(ctx, budget, offer)
		} else {
			var end bool
			if n, _, end, err = farStep(ctx, s.i.client, s.shards[s.part], s.f, &s.far, budget, 0, offer); end {
				s.near, s.zcur = true, 0
			}
		}
		if err != nil {
			return err
		}
		s.read += int64(n)
		budget -= max(n, 1)
	}
	return nil
}

// nearStep reads one ZSCAN batch of the waiting set, and the bodies of the
// members due in the filter's range; once the scan went round, the run
// goes on to the next partition.
func (s *bulkScan) nearStep(ctx context.Context, budget int, offer func(waitingMatch) bool) (read int, err error) {
	sh := s.shards[s.part]
	// ZSCAN's count is of hash table slots to visit, not all of which
	// hold a member: a batch takes what a few calls return.
	n := min(budget, scanBatch)
	var ms []store.WaitingMember
	next := s.zcur
	for len(ms) < n {
		got, after, err := store.NearScan(ctx, s.i.client, sh, next, n-len(ms))
		if err != nil {
			return 0, err
		}
		ms, next = append(ms, got...), after
		if next == 0 {
			break
		}
	}
	lo, hi := store.ScoreMin(s.f.From), store.ScoreMax(s.f.To)
	in := ms[:0:0]
	for _, m := range ms {
		if m.Score >= lo && m.Score <= hi {
			in = append(in, m)
		}
	}
	// A set kept packed comes back whole: its bodies are read in batches.
	for len(in) > 0 {
		batch := in[:min(len(in), scanBatch)]
		in = in[len(batch):]
		ids := make([]string, len(batch))
		for k, m := range batch {
			ids[k] = m.ID
		}
		bodies, err := store.Bodies(ctx, s.i.client, sh, ids)
		if err != nil {
			return 0, err
		}
		for k, m := range batch {
			if body, ok := bodies[k].(string); ok { // else fell due or was cancelled since
				offer(waitingMatch{WaitingMessage: decodeWaiting(m.ID, m.Score, body), shard: sh})
			}
		}
	}
	if s.zcur = next; next == 0 {
		s.start(s.part + 1)
	}
	return len(ms), nil
}
