package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

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
// search may be missed or returned twice.
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
	// error): pass the Cursor of the BulkProgress it returned. Messages
	// already acted on are gone from where the run reads, or no longer
	// match, so none is acted on twice (a dead letter requeued, dead again
	// and met by the resumed run is another death).
	Cursor string
	// Progress, when set, is called after every batch of up to 1,000
	// messages read, with the counts so far.
	Progress func(BulkProgress)
}

// BulkProgress counts what a bulk action did.
type BulkProgress struct {
	// Scanned is how many stored messages were read, Matched how many of
	// them the filter selected, Done how many of those were acted on (0 in
	// a dry run). A message that changed in between (fell due, was
	// cancelled) is matched but not done.
	Scanned, Matched, Done int64
	// Cursor is where the run is: "" once it is complete (nil error).
	// With an error, it is the value for BulkOptions.Cursor to resume the
	// run from: the cursor the run was given when it failed before
	// reading.
	Cursor string
}

// CancelWhere cancels the waiting messages of a topic that match f, as
// Cancel does one, far tier included, and returns the counts. It reads
// the topic as SearchWaiting does, 1,000 messages at a time, and cancels
// the matches of each batch on one pipeline per partition (two more for
// those of the far tier): its cost is a read of every message the
// filter's due range covers, and a script call per match. A message
// published during the run may be left.
func (i *Inspector) CancelWhere(ctx context.Context, topic string, f Filter, o BulkOptions) (BulkProgress, error) {
	s, err := i.waitingBulk(ctx, topic, f, o)
	if err != nil {
		return BulkProgress{Cursor: o.Cursor}, err
	}
	p, err := runBulk(ctx, s, o, i.eachWaiting(ctx, s, func(ctx context.Context, sh store.Shard, uuids []string) (int, error) {
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
	case time.Until(due) > maxDelayLimit:
		return BulkProgress{Cursor: o.Cursor}, fmt.Errorf("%w: reschedule messages of topic %q: due in %s, beyond the limit of 100 years: use a nearer due time",
			ErrInvalidDelay, topic, describeDelay(time.Until(due)))
	}
	s, err := i.waitingBulk(ctx, topic, f, o)
	if err != nil {
		return BulkProgress{Cursor: o.Cursor}, err
	}
	at := due.UnixMilli()
	s.skip = func(w waitingMatch) bool { return w.Due.UnixMilli() == at }
	p, err := runBulk(ctx, s, o, i.eachWaiting(ctx, s, func(ctx context.Context, sh store.Shard, uuids []string) (int, error) {
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
	// resume is where a run resumes after an action on the batch read
	// last failed, given where that batch began.
	resume(batchStart string) string
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
			// longer match.
			p.Cursor = s.resume(p.Cursor)
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

// eachWaiting acts on a batch of waiting messages read by s: for each
// partition, it pulls the far tier's messages into the waiting set, where
// cancel.lua and reschedule.lua find them, then runs many on the UUIDs (one
// pipeline each); it counts what many reports done. The pull and the
// action run to their end once begun, whatever ctx says: messages pulled
// and not acted on would wait behind the run's cursor. Should Redis fail
// between the two, the run resumes from the start of that partition's
// waiting set (s.rewind), where the pulled messages now are.
func (i *Inspector) eachWaiting(ctx context.Context, s *waitingScan, many func(context.Context, store.Shard, []string) (int, error)) func([]waitingMatch) (int64, error) {
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
			err := store.FarPullMany(ctx, i.client, sh, far[sh])
			n := 0
			if err == nil {
				n, err = many(ctx, sh, uuids)
			}
			if err != nil {
				s.rewind(sh)
			}
			return n, err
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

func (i *Inspector) waitingBulk(ctx context.Context, topic string, f Filter, o BulkOptions) (*waitingScan, error) {
	if err := checkBulk(f, o); err != nil {
		return nil, err
	}
	return i.waitingScan(ctx, topic, f, o.Cursor)
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

// badCursor is the error for a cursor no search returned.
func badCursor(c string) error {
	return fmt.Errorf("redisdelay: cursor %q is not one a search or bulk action returned: pass the cursor of the previous call unchanged, or \"\" to start", c)
}

// waitingMatch is a waiting message a scan selected, and where it is.
type waitingMatch struct {
	WaitingMessage
	shard store.Shard
	far   bool
}

// waitingScan reads the waiting messages of a topic: partition by
// partition, the waiting set in (score, member) order from score on, then
// the far buckets from bucket on, each from position pos on.
type waitingScan struct {
	i      *Inspector
	shards []store.Shard
	f      Filter
	skip   func(waitingMatch) bool // matches left alone, not counted
	read   int64

	part   int
	far    bool
	score  float64 // near: the last score read (-Inf: none yet)
	member string  // near: the last member read at that score
	bucket int64   // far: the bucket being read
	pos    int64   // far: the next position in it

	rewound int // >= 0: the partition to resume from the start of (see eachWaiting)
}

func (i *Inspector) waitingScan(ctx context.Context, topic string, f Filter, cursor string) (*waitingScan, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return nil, wrapErr(err, "search waiting messages of topic %q", topic)
	}
	s := &waitingScan{i: i, shards: shards, f: f, score: math.Inf(-1), rewound: -1}
	if cursor == "" {
		s.far, s.bucket = false, s.firstBucket()
		return s, nil
	}
	// <partition>:n:<score>:<member> or <partition>:f:<bucket>:<position>
	parts := strings.SplitN(cursor, ":", 4)
	if len(parts) != 4 {
		return nil, badCursor(cursor)
	}
	var errs [3]error
	s.part, errs[0] = strconv.Atoi(parts[0])
	switch parts[1] {
	case "n":
		s.score, errs[1] = strconv.ParseFloat(parts[2], 64)
		s.member = parts[3]
		s.bucket = s.firstBucket()
	case "f":
		s.far = true
		s.bucket, errs[1] = strconv.ParseInt(parts[2], 10, 64)
		s.pos, errs[2] = strconv.ParseInt(parts[3], 10, 64)
	default:
		return nil, badCursor(cursor)
	}
	if errors.Join(errs[:]...) != nil || s.part < 0 || s.pos < 0 || math.IsNaN(s.score) {
		return nil, badCursor(cursor)
	}
	if s.part >= len(shards) {
		return nil, fmt.Errorf("redisdelay: cursor %q names partition %d, but topic %q has %d: pass the cursor of the previous call unchanged, or \"\" to start",
			cursor, s.part, topic, len(shards))
	}
	return s, nil
}

// firstBucket is the first far bucket the filter's due range can reach.
func (s *waitingScan) firstBucket() int64 {
	if s.f.From.IsZero() {
		return 0
	}
	return max(store.FarBucketOf(s.f.From.Add(-store.FarSlack())), 0)
}

func (s *waitingScan) cursor() string {
	switch {
	case s.part >= len(s.shards):
		return ""
	case s.far:
		return fmt.Sprintf("%d:f:%d:%d", s.part, s.bucket, s.pos)
	}
	return fmt.Sprintf("%d:n:%s:%s", s.part, strconv.FormatFloat(s.score, 'g', -1, 64), s.member)
}

func (s *waitingScan) scanned() int64 { return s.read }

// rewind makes a failed run resume from the start of partition sh's
// waiting set, or an earlier partition's.
func (s *waitingScan) rewind(sh store.Shard) {
	part := slices.Index(s.shards, sh)
	if part >= 0 && (s.rewound < 0 || part < s.rewound) {
		s.rewound = part
	}
}

func (s *waitingScan) resume(batchStart string) string {
	if s.rewound < 0 {
		return batchStart
	}
	return fmt.Sprintf("%d:n:%s:", s.rewound, strconv.FormatFloat(math.Inf(-1), 'g', -1, 64))
}

// next moves on to the next partition.
func (s *waitingScan) next() {
	s.part++
	s.far, s.score, s.member, s.bucket, s.pos = false, math.Inf(-1), "", s.firstBucket(), 0
}

func (s *waitingScan) run(ctx context.Context, budget, want int, found func(waitingMatch)) error {
	matched := 0
	for s.part < len(s.shards) && budget > 0 && (want == 0 || matched < want) {
		var n, m int
		var err error
		rest := 0 // no bound
		if want > 0 {
			rest = want - matched
		}
		if s.far {
			n, m, err = s.farStep(ctx, budget, rest, found)
		} else {
			n, m, err = s.nearStep(ctx, budget, rest, found)
		}
		if err != nil {
			return err
		}
		budget -= n
		matched += m
	}
	return nil
}

// offer hands a message read on when it matches; it reports whether it did.
func (s *waitingScan) offer(w waitingMatch, found func(waitingMatch)) bool {
	var msg *message.Message
	if w.Corrupt == "" {
		msg = w.Message
	}
	if !s.f.match(msg, w.Due) || (s.skip != nil && s.skip(w)) {
		return false
	}
	found(w)
	return true
}

func decodeWaiting(id string, score float64, body string) WaitingMessage {
	w := WaitingMessage{Due: store.DueOf(score)}
	var err error
	if w.Message, err = store.Decode([]byte(body)); err != nil {
		w.Message, w.Corrupt = message.NewMessage(id, nil), err.Error()
	}
	return w
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
		s.far, s.pos = true, 0
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

// farStep reads one batch of the far tier; past the filter's due range or
// the last bucket, the scan goes on to the next partition.
func (s *waitingScan) farStep(ctx context.Context, budget, want int, found func(waitingMatch)) (read, matched int, err error) {
	sh := s.shards[s.part]
	buckets, err := store.FarBuckets(ctx, s.i.client, sh, s.bucket, 1)
	if err != nil {
		return 0, 0, err
	}
	// A message is due within FarSlack of its bucket (see far.go).
	if len(buckets) == 0 || (!s.f.To.IsZero() && store.FarBucketOf(s.f.To.Add(store.FarSlack())) < buckets[0]) {
		s.next()
		return 0, 0, nil
	}
	if buckets[0] != s.bucket {
		s.bucket, s.pos = buckets[0], 0
	}
	ms, next, done, err := store.FarRange(ctx, s.i.client, sh, s.bucket, s.pos, min(budget, scanBatch))
	if err != nil {
		return 0, 0, err
	}
	from := s.pos
	s.pos = next
	for _, m := range ms {
		w := waitingMatch{WaitingMessage: decodeWaiting(m.ID, m.Score, *m.Body), shard: sh, far: true}
		if s.offer(w, found) {
			if matched++; matched == want {
				s.pos, done = m.Pos+1, false // go on from just after it
				break
			}
		}
	}
	read = int(max(s.pos-from, 0))
	s.read += int64(read)
	if done {
		s.bucket, s.pos = s.bucket+1, 0
	}
	return max(read, 1), matched, nil
}

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

func (s *deadScan) resume(batchStart string) string { return batchStart }

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
