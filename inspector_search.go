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
