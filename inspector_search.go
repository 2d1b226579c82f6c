package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Filter selects messages by what they carry, for the Inspector's searches
// and bulk actions. Every criterion set must hold; the zero Filter selects
// every message.
type Filter struct {
	// Metadata selects messages whose metadata holds each of these keys
	// with exactly this value.
	Metadata map[string]string
	// BusinessKeyPrefix selects messages whose BusinessKey starts with it;
	// a message without one does not match.
	BusinessKeyPrefix string
	// From and To select waiting messages due in [From, To), and dead
	// letters that died in it. The zero time leaves that side open.
	From, To time.Time
}

// ErrEmptyFilter is returned by a bulk action given the zero Filter
// without BulkOptions.All: acting on every message must be asked for.
var ErrEmptyFilter = errors.New("redisdelay: the filter selects every message: set BulkOptions.All to act on all of them, or give a criterion")

func (f Filter) empty() bool {
	return len(f.Metadata) == 0 && f.BusinessKeyPrefix == "" && f.From.IsZero() && f.To.IsZero()
}

func (f Filter) validate() error {
	for k := range f.Metadata {
		if k == "" {
			return errors.New("redisdelay: Filter.Metadata has an empty key: name the metadata key to match")
		}
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.To.After(f.From) {
		return fmt.Errorf("redisdelay: Filter.To (%s) is not after Filter.From (%s): give an increasing range, or leave a side zero",
			f.To.Format(time.RFC3339Nano), f.From.Format(time.RFC3339Nano))
	}
	return nil
}

// match reports whether a decoded message at time at passes the filter; a
// message that could not be decoded (nil) passes the empty filter only.
func (f Filter) match(msg *message.Message, at time.Time) bool {
	if (!f.From.IsZero() && at.Before(f.From)) || (!f.To.IsZero() && !at.Before(f.To)) {
		return false
	}
	if msg == nil {
		return len(f.Metadata) == 0 && f.BusinessKeyPrefix == ""
	}
	for k, v := range f.Metadata {
		if got, ok := msg.Metadata[k]; !ok || got != v {
			return false
		}
	}
	if f.BusinessKeyPrefix != "" {
		key, ok := msg.Metadata[BusinessKey]
		return ok && strings.HasPrefix(key, f.BusinessKeyPrefix)
	}
	return true
}

// searchScanLimit bounds the stored messages one search call reads.
const searchScanLimit = 10000

// scanBatch is how many stored messages one Redis read returns.
const scanBatch = 1000

// SearchWaiting finds a topic's waiting messages that match f, far tier
// included: it returns at most limit (1 to 10,000) and the cursor to pass
// to the next call, "" once the whole topic was read. Each call reads at
// most 10,000 stored messages (in batches of 1,000: about 1.5 MB for
// 100-byte payloads), so it returns quickly however many wait, and may
// return fewer than limit matches, none even, with a cursor to go on.
// A From bound is read from the waiting set by score, and the far tier from
// its bucket, so a due-time range costs what it holds; metadata and key
// criteria are checked on each message read. A full pass over N waiting
// messages takes N / 10,000 calls.
//
// Partitions are read one after another, each in due order up to the far
// tier, then the far tier minute by minute. A message that falls due,
// moves from the far tier into the waiting set or is rescheduled during a
// search may be missed or returned twice (the bulk actions read otherwise,
// and miss none: see BulkOptions).
func (i *Inspector) SearchWaiting(ctx context.Context, topic string, f Filter, cursor string, limit int) ([]WaitingMessage, string, error) {
	if err := validatePage(0, limit); err != nil {
		return nil, "", err
	}
	s, err := i.waitingScan(ctx, topic, f, cursor)
	if err != nil {
		return nil, "", err
	}
	var out []WaitingMessage
	err = s.run(ctx, searchScanLimit, limit, func(w waitingMatch) { out = append(out, w.WaitingMessage) })
	return out, s.cursor(), wrapErr(err, "search waiting messages of topic %q", topic)
}

// SearchDeadLetters finds a group's dead letters that match f, partition
// after partition, each oldest first: at most limit (1 to 10,000), and the
// cursor to pass to the next call, "" once all were read. Each call reads
// at most 10,000 dead letters; a From or To bound is applied by Redis
// (dead letter IDs are times), the other criteria on each dead letter read.
func (i *Inspector) SearchDeadLetters(ctx context.Context, topic, group string, f Filter, cursor string, limit int) ([]DeadLetter, string, error) {
	if err := validatePage(0, limit); err != nil {
		return nil, "", err
	}
	s, err := i.deadScan(ctx, topic, group, f, cursor)
	if err != nil {
		return nil, "", err
	}
	var out []DeadLetter
	err = s.run(ctx, searchScanLimit, limit, func(d deadMatch) { out = append(out, d.DeadLetter) })
	return out, s.cursor(), wrapErr(err, "search dead letters of group %q in topic %q", group, topic)
}

// badCursor is the error for a cursor no search returned.
func badCursor(c string) error {
	return fmt.Errorf("redisdelay: cursor %q is not one a search or bulk action returned: pass the cursor of the previous call unchanged, or \"\" to start", c)
}

// cursorPartition is the error for a cursor naming a partition the topic
// lacks.
func cursorPartition(c string, part int, topic string, parts int) error {
	return fmt.Errorf("redisdelay: cursor %q names partition %d, but topic %q has %d: pass the cursor of the previous call unchanged, or \"\" to start",
		c, part, topic, parts)
}

// waitingMatch is a waiting message a scan selected, and where it is.
type waitingMatch struct {
	WaitingMessage
	shard store.Shard
	far   bool
}

// waitingFilter is what selects the waiting messages a scan hands on.
type waitingFilter struct {
	f    Filter
	skip func(waitingMatch) bool // matches left alone, not counted
}

// offer hands a message read on when it matches; it reports whether it did.
func (wf waitingFilter) offer(w waitingMatch, found func(waitingMatch)) bool {
	var msg *message.Message
	if w.Corrupt == "" {
		msg = w.Message
	}
	if !wf.f.match(msg, w.Due) || (wf.skip != nil && wf.skip(w)) {
		return false
	}
	found(w)
	return true
}

// firstFarBucket is the first far bucket reference (both formats, in due
// order: see store.FarBuckets) the filter's due range can reach.
func (f Filter) firstFarBucket() int64 {
	if f.From.IsZero() {
		return 0
	}
	return max(store.FarRefOf(f.From.Add(-store.FarSlack())), 0)
}

func decodeWaiting(id string, score float64, body string) WaitingMessage {
	w := WaitingMessage{Due: store.DueOf(score)}
	var err error
	if w.Message, err = store.Decode([]byte(body)); err != nil {
		w.Message, w.Corrupt = message.NewMessage(id, nil), err.Error()
	}
	return w
}

// farPos is a position in a partition's far tier.
type farPos struct {
	bucket int64 // the bucket being read, a reference (store.FarBuckets)
	pos    int64 // the next position in it
}

// farStep reads one batch of up to budget elements of partition sh's far
// tier from p on, handing each message to offer until want (0: no bound)
// of them matched, and moves p on; end reports that the tier was read
// through already (past the filter's due range or the last bucket), read
// how many elements the batch took.
func farStep(ctx context.Context, c redis.Cmdable, sh store.Shard, f Filter, p *farPos, budget, want int, offer func(waitingMatch) bool) (read, matched int, end bool, err error) {
	buckets, err := store.FarBuckets(ctx, c, sh, p.bucket, 1)
	if err != nil {
		return 0, 0, false, err
	}
	// A message is due within FarSlack of its bucket (see internal/store/far.go).
	if len(buckets) == 0 || (!f.To.IsZero() && store.FarBucketOf(f.To.Add(store.FarSlack())) < store.FarRefBucket(buckets[0])) {
		return 0, 0, true, nil
	}
	if buckets[0] != p.bucket {
		p.bucket, p.pos = buckets[0], 0
	}
	ms, next, done, err := store.FarRange(ctx, c, sh, p.bucket, p.pos, min(budget, scanBatch))
	if err != nil {
		return 0, 0, false, err
	}
	from := p.pos
	p.pos = next
	for _, m := range ms {
		w := waitingMatch{WaitingMessage: decodeWaiting(m.ID, m.Score, *m.Body), shard: sh, far: true}
		if offer(w) {
			if matched++; matched == want {
				p.pos, done = m.Pos+1, false // go on from just after it
				break
			}
		}
	}
	read = int(max(p.pos-from, 0))
	if done {
		p.bucket, p.pos = p.bucket+1, 0
	}
	return read, matched, false, nil
}

// waitingScan reads the waiting messages of a topic for SearchWaiting:
// partition by partition, the waiting set in (score, member) order from
// score on, then the far buckets from far on. Results come in due order
// (up to the far tier), at the price of missing a message that moves
// behind the position (see SearchWaiting); bulkScan misses none.
type waitingScan struct {
	i      *Inspector
	shards []store.Shard
	waitingFilter
	read int64

	part   int
	isFar  bool
	score  float64 // near: the last score read (-Inf: none yet)
	member string  // near: the last member read at that score
	far    farPos
}

func (i *Inspector) waitingScan(ctx context.Context, topic string, f Filter, cursor string) (*waitingScan, error) {
	shards, err := i.waitingShards(ctx, topic, f)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(cursor, bulkCursorPrefix) {
		return nil, fmt.Errorf("redisdelay: cursor %q is a bulk action's (BulkOptions.Cursor), not a search's: pass the cursor the previous search returned, unchanged, or \"\" to start", cursor)
	}
	s := &waitingScan{i: i, shards: shards, waitingFilter: waitingFilter{f: f}}
	s.start(0)
	if err := s.parse(cursor, topic); err != nil {
		return nil, err
	}
	return s, nil
}

// waitingShards checks a topic and filter and returns the topic's
// partitions.
func (i *Inspector) waitingShards(ctx context.Context, topic string, f Filter) ([]store.Shard, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	shards, err := i.shards(ctx, topic)
	return shards, wrapErr(err, "search waiting messages of topic %q", topic)
}

// parse sets the position to the cursor's: <partition>:n:<score>:<member>
// or <partition>:f:<bucket>:<position> ("": the start).
func (s *waitingScan) parse(cursor, topic string) error {
	if cursor == "" {
		return nil
	}
	parts := strings.SplitN(cursor, ":", 4)
	if len(parts) != 4 {
		return badCursor(cursor)
	}
	var errs [3]error
	s.part, errs[0] = strconv.Atoi(parts[0])
	switch parts[1] {
	case "n":
		s.score, errs[1] = strconv.ParseFloat(parts[2], 64)
		s.member = parts[3]
	case "f":
		s.isFar = true
		s.far.bucket, errs[1] = strconv.ParseInt(parts[2], 10, 64)
		s.far.pos, errs[2] = strconv.ParseInt(parts[3], 10, 64)
	default:
		return badCursor(cursor)
	}
	if errors.Join(errs[:]...) != nil || s.part < 0 || s.far.pos < 0 || math.IsNaN(s.score) {
		return badCursor(cursor)
	}
	if s.part >= len(s.shards) {
		return cursorPartition(cursor, s.part, topic, len(s.shards))
	}
	return nil
}

func (s *waitingScan) cursor() string {
	switch {
	case s.part >= len(s.shards):
		return ""
	case s.isFar:
		return fmt.Sprintf("%d:f:%d:%d", s.part, s.far.bucket, s.far.pos)
	}
	return fmt.Sprintf("%d:n:%s:%s", s.part, strconv.FormatFloat(s.score, 'f', -1, 64), s.member)
}

func (s *waitingScan) scanned() int64 { return s.read }

// start moves to the start of partition part.
func (s *waitingScan) start(part int) {
	s.part, s.isFar, s.score, s.member, s.far = part, false, math.Inf(-1), "", farPos{bucket: s.f.firstFarBucket()}
}

func (s *waitingScan) run(ctx context.Context, budget, want int, found func(waitingMatch)) error {
	matched := 0
	offer := func(w waitingMatch) bool { return s.offer(w, found) }
	for s.part < len(s.shards) && budget > 0 && (want == 0 || matched < want) {
		rest := 0 // no bound
		if want > 0 {
			rest = want - matched
		}
		if s.isFar {
			n, m, end, err := farStep(ctx, s.i.client, s.shards[s.part], s.f, &s.far, budget, rest, offer)
			if err != nil {
				return err
			}
			if end {
				s.start(s.part + 1)
			}
			s.read += int64(n)
			budget -= max(n, 1)
			matched += m
			continue
		}
		n, m, err := s.nearStep(ctx, budget, rest, found)
		if err != nil {
			return err
		}
		budget -= n
		matched += m
	}
	return nil
}

// nearStep reads one batch of the waiting set; once it is read through,
// the scan goes on to the far tier.
func (s *waitingScan) nearStep(ctx context.Context, budget, want int, found func(waitingMatch)) (read, matched int, err error) {
	sh := s.shards[s.part]
	lo := max(store.ScoreMin(s.f.From), s.score)
	n := min(budget, scanBatch)
	// Members at the last score read, up to the last member, were read
	// already: skip them (Redis orders equal scores by member).
	var ms []store.WaitingMember
	for offset := 0; ; offset += n {
		batch, err := store.NearRange(ctx, s.i.client, sh, lo, store.ScoreMax(s.f.To), offset, n)
		if err != nil {
			return 0, 0, err
		}
		for _, m := range batch {
			if m.Score > s.score || (m.Score == s.score && m.ID > s.member) {
				ms = append(ms, m)
			}
		}
		if len(ms) > 0 || len(batch) < n {
			break
		}
	}
	if len(ms) == 0 {
		s.isFar, s.far.pos = true, 0
		return 0, 0, nil
	}
	ids := make([]string, len(ms))
	for k, m := range ms {
		ids[k] = m.ID
	}
	bodies, err := store.Bodies(ctx, s.i.client, sh, ids)
	if err != nil {
		return 0, 0, err
	}
	for k, m := range ms {
		s.score, s.member = m.Score, m.ID
		read++
		body, ok := bodies[k].(string)
		if !ok {
			continue // fell due or was cancelled since
		}
		w := waitingMatch{WaitingMessage: decodeWaiting(m.ID, m.Score, body), shard: sh}
		if s.offer(w, found) {
			if matched++; matched == want {
				break
			}
		}
	}
	s.read += int64(read)
	return read, matched, nil
}

// bulkCursorPrefix starts a bulkScan's cursors.
const bulkCursorPrefix = "bulk:"

// deadMatch is a dead letter a scan selected, and where it is.
type deadMatch struct {
	DeadLetter
	shard store.Shard
	id    string // its entry ID in the partition
}

// deadScan reads a group's dead letters partition by partition, oldest
// first, after entry ID after.
type deadScan struct {
	i      *Inspector
	shards []store.Shard
	group  string
	f      Filter
	read   int64
	part   int
	after  string // "": from the start of the partition
	until  int64  // > 0: the last ms read (a bulk action's start)
}

func (i *Inspector) deadScan(ctx context.Context, topic, group string, f Filter, cursor string) (*deadScan, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return nil, err
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return nil, wrapErr(err, "search dead letters of group %q in topic %q", group, topic)
	}
	s := &deadScan{i: i, shards: shards, group: group, f: f}
	if cursor != "" {
		d, err := parseDeadID(cursor, len(shards))
		if err != nil {
			return nil, badCursor(cursor)
		}
		s.part, s.after = d.part, d.id
	}
	return s, nil
}

func (s *deadScan) cursor() string {
	if s.part >= len(s.shards) {
		return ""
	}
	if s.after == "" {
		// The start of partition part: the cursor names the entry before
		// any, 0-0.
		return deadID{s.part, "0-0"}.String()
	}
	return deadID{s.part, s.after}.String()
}

func (s *deadScan) scanned() int64 { return s.read }

func (s *deadScan) run(ctx context.Context, budget, want int, found func(deadMatch)) error {
	matched := 0
	for s.part < len(s.shards) && budget > 0 && (want == 0 || matched < want) {
		sh := s.shards[s.part]
		start := "-"
		if !s.f.From.IsZero() {
			start = strconv.FormatInt(s.f.From.UnixMilli(), 10)
		}
		if s.after != "" && (start == "-" || compareStreamIDs(s.after, start) >= 0) {
			start = "(" + s.after
		}
		end := "+"
		if !s.f.To.IsZero() {
			end = strconv.FormatInt(store.CeilMs(s.f.To)-1, 10)
		}
		if s.until > 0 && (end == "+" || compareStreamIDs(end, strconv.FormatInt(s.until, 10)) > 0) {
			end = strconv.FormatInt(s.until, 10)
		}
		n := min(budget, scanBatch)
		entries, err := store.DeadRange(ctx, s.i.client, sh, s.group, start, end, n)
		if err != nil {
			return err
		}
		for _, e := range entries {
			s.after = e.ID
			s.read++
			budget--
			d := deadMatch{DeadLetter: deadLetterOf(deadID{s.part, e.ID}, e), shard: sh, id: e.ID}
			if s.f.match(d.Message, d.Time) {
				found(d)
				if matched++; matched == want {
					return nil
				}
			}
		}
		if len(entries) < n {
			s.part, s.after = s.part+1, ""
		}
	}
	return nil
}

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
