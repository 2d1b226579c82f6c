// The Inspector's view of messages: waiting ones (listing, finding,
// cancelling, rescheduling, running one now), dead letters, and the clock
// moved forward for tests (redisdelaytest.Advance). Searches and bulk
// actions: inspector_search.go.

package redisdelay

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/advance"
	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// WaitingMessage is a delayed message and when it is due.
type WaitingMessage struct {
	Message *message.Message
	Due     time.Time
	// Corrupt says why the stored message could not be decoded; Message
	// then has its UUID only. Empty when it was decoded.
	Corrupt string
}

// Waiting lists a topic's delayed messages in due order, skipping the first
// offset and returning at most limit (1 to 10,000). Messages may become due
// between calls, so paging through a busy topic can skip some. In a topic
// of several partitions, each partition is read up to offset + limit.
// Messages of the far tier (due more than about two minutes ahead) are kept
// in one list per minute of due time, in publish order: a page reads each
// minute it reaches whole, so a minute holding a million messages costs a
// read of about 150 MB.
func (i *Inspector) Waiting(ctx context.Context, topic string, offset, limit int) ([]WaitingMessage, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	if err := validatePage(offset, limit); err != nil {
		return nil, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return nil, wrapErr(err, "list waiting messages of topic %q", topic)
	}
	var members []store.WaitingMember
	end := offset + limit // past the page
	if end < offset {
		end = math.MaxInt // overflowed: no set holds that many
	}
	for _, sh := range shards {
		start := offset
		if len(shards) > 1 {
			start = 0 // the page's place in the merged order is known only after the merge
		}
		ms, err := store.WaitingHead(ctx, i.client, sh, start, end)
		if err != nil {
			return nil, wrapErr(err, "list waiting messages of topic %q", topic)
		}
		members = append(members, ms...)
	}
	if len(shards) > 1 {
		slices.SortStableFunc(members, func(a, b store.WaitingMember) int { return cmp.Compare(a.Score, b.Score) })
		members = members[min(offset, len(members)):min(end, len(members))]
	}
	out := make([]WaitingMessage, 0, len(members))
	for _, sh := range shards {
		var ids []string
		for _, m := range members {
			if m.Shard == sh && m.Body == nil {
				ids = append(ids, m.ID)
			}
		}
		var bodies []any
		if len(ids) > 0 {
			if bodies, err = store.Bodies(ctx, i.client, sh, ids); err != nil {
				return nil, wrapErr(err, "list waiting messages of topic %q", topic)
			}
		}
		n := 0
		for _, m := range members {
			if m.Shard != sh {
				continue
			}
			body := m.Body
			if body == nil {
				b, ok := bodies[n].(string)
				n++
				if !ok {
					continue // became due (or cancelled) between the two reads
				}
				body = &b
			}
			w := WaitingMessage{Due: store.DueOf(m.Score)}
			if w.Message, err = store.Decode([]byte(*body)); err != nil {
				w.Message, w.Corrupt = message.NewMessage(m.ID, nil), err.Error()
			}
			out = append(out, w)
		}
	}
	slices.SortStableFunc(out, func(a, b WaitingMessage) int { return a.Due.Compare(b.Due) })
	return out, nil
}

func validatePage(offset, limit int) error {
	if offset < 0 {
		return fmt.Errorf("redisdelay: offset is %d: use 0 or more", offset)
	}
	if limit < 1 || limit > 10000 {
		return fmt.Errorf("redisdelay: limit is %d: use 1 to 10000", limit)
	}
	return nil
}

// Cancel is Publisher.Cancel, for the partition count stored in Redis.
func (i *Inspector) Cancel(ctx context.Context, topic, messageUUID string) (bool, error) {
	return i.recall(ctx, topic, "uuid", messageUUID)
}

// CancelKey is Publisher.CancelKey, for the partition count stored in Redis.
func (i *Inspector) CancelKey(ctx context.Context, topic, businessKey string) (bool, error) {
	return i.recall(ctx, topic, "key", businessKey)
}

func (i *Inspector) recall(ctx context.Context, topic, by, value string) (bool, error) {
	if err := validateTopic(topic); err != nil {
		return false, err
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	if err != nil {
		return false, wrap(err, "cancel %s in topic %q", recallWhat(by, value), topic)
	}
	return recall(ctx, i.client, i.keys, topic, parts[0], by, value)
}

// FindWaiting returns the waiting message of topic with this UUID, and
// false when none is waiting (unknown, already due or cancelled). It reads
// one message, however many are waiting.
func (i *Inspector) FindWaiting(ctx context.Context, topic, messageUUID string) (WaitingMessage, bool, error) {
	return i.find(ctx, topic, "uuid", messageUUID)
}

// FindWaitingKey returns the waiting message of topic holding businessKey
// (see BusinessKey), and false when none holds it.
func (i *Inspector) FindWaitingKey(ctx context.Context, topic, businessKey string) (WaitingMessage, bool, error) {
	return i.find(ctx, topic, "key", businessKey)
}

// find looks in the partition the value hashes to first, then in the
// others, as cancel does.
func (i *Inspector) find(ctx context.Context, topic, by, value string) (WaitingMessage, bool, error) {
	w, _, found, err := i.findWhere(ctx, topic, by, value)
	return w, found, err
}

// waitingPlace is where find found a waiting message: its partition's
// shard, and whether in the far tier.
type waitingPlace struct {
	shard store.Shard
	far   bool
}

// findWhere is find, telling where it found the message.
func (i *Inspector) findWhere(ctx context.Context, topic, by, value string) (WaitingMessage, waitingPlace, bool, error) {
	var place waitingPlace
	if err := checkLookup("find", topic, by, value); err != nil {
		return WaitingMessage{}, place, false, err
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	var r store.FindReply
	found := false
	if err == nil {
		found, err = inPartitions(i.keys, topic, parts[0], value, func(sh store.Shard) (ok bool, err error) {
			place = waitingPlace{shard: sh}
			r, ok, err = store.Find(ctx, i.client, sh, by, value)
			if ok || err != nil {
				return ok, err
			}
			uuid := value
			if by == "key" {
				// a holder waiting in the far tier is read there
				if uuid, err = store.FarKeyHolder(ctx, i.client, sh, value); err != nil || uuid == "" {
					return false, err
				}
			}
			body, score, ok, err := store.FarPull(ctx, i.client, sh, uuid, true)
			if ok {
				r, place.far = store.FindReply{Uuid: uuid, Score: score, Body: []byte(body)}, true
			} else if err == nil {
				// unpacked into the waiting set meanwhile?
				r, ok, err = store.Find(ctx, i.client, sh, by, value)
			}
			return ok, err
		})
	}
	if err != nil || !found {
		return WaitingMessage{}, place, false, wrapErr(err, "find %s in topic %q", recallWhat(by, value), topic)
	}
	w := WaitingMessage{Due: store.DueOf(r.Score)}
	if w.Message, err = store.Decode(r.Body); err != nil {
		w.Message, w.Corrupt = message.NewMessage(r.Uuid, nil), err.Error()
	}
	return w, place, true, nil
}

// Reschedule is Publisher.Reschedule, for the partition count stored in
// Redis. It knows no PublisherConfig.MaxDelay: only the 100-year limit
// applies.
func (i *Inspector) Reschedule(ctx context.Context, topic, messageUUID string, due time.Time) (bool, error) {
	return i.reschedule(ctx, topic, "uuid", messageUUID, due)
}

// RescheduleKey is Publisher.RescheduleKey, for the partition count stored
// in Redis. Only the 100-year limit applies.
func (i *Inspector) RescheduleKey(ctx context.Context, topic, businessKey string, due time.Time) (bool, error) {
	return i.reschedule(ctx, topic, "key", businessKey, due)
}

func (i *Inspector) reschedule(ctx context.Context, topic, by, value string, due time.Time) (bool, error) {
	d, err := rescheduleDelay(topic, by, value, due, time.Now(), meta.MaxDelay, "")
	if err != nil {
		return false, err
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	if err != nil {
		return false, wrap(err, "reschedule %s in topic %q", recallWhat(by, value), topic)
	}
	return reschedule(ctx, i.client, i.keys, topic, parts[0], by, value, d)
}

// The Inspector's dead letters: listing, requeueing, deleting.

// DeadLetter is a message a consumer group gave up on.
type DeadLetter struct {
	// ID identifies the dead letter within its group and topic; the time
	// part is when it died. In partition n > 0 of a topic it reads
	// "<n>/<time part>".
	ID string
	// Message is the message as last delivered, with its metadata (ErrorKey
	// holds the handler's error when the RecordError middleware was used).
	// Nil when it could not be decoded; Body then holds the stored bytes.
	Message *message.Message
	Body    []byte
	// Attempts is how many deliveries it had.
	Attempts int
	// Reason says why it died: the handler's error, a consumer that stopped
	// responding, why it could not be decoded, or, starting "expired: ",
	// that its deadline (ExpiresAtKey) passed before a delivery.
	Reason string
	// Time is when it died.
	Time time.Time
}

// deadID is a dead letter's ID split: its partition and its stream entry ID.
type deadID struct {
	part int
	id   string
}

func (d deadID) String() string {
	if d.part == 0 {
		return d.id
	}
	return strconv.Itoa(d.part) + "/" + d.id
}

// parseDeadID reads a DeadLetter.ID (or a cursor) of a topic of parts
// partitions.
func parseDeadID(s string, parts int) (deadID, error) {
	d := deadID{id: s}
	if p, id, ok := strings.Cut(s, "/"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n >= parts {
			return d, fmt.Errorf("redisdelay: dead letter ID %q names partition %q, but the topic has %d: pass an ID from DeadLetters", s, p, parts)
		}
		d.part, d.id = n, id
	}
	if !validStreamID(d.id) {
		return d, fmt.Errorf("redisdelay: dead letter ID %q is malformed: pass an ID from DeadLetters (\"<ms>-<seq>\", or \"<partition>/<ms>-<seq>\")", s)
	}
	return d, nil
}

// validStreamID reports whether s is a full stream entry ID, ms-seq.
func validStreamID(s string) bool {
	ms, seq, ok := strings.Cut(s, "-")
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return ok && err1 == nil && err2 == nil
}

// compareStreamIDs orders two stream entry IDs (ms-seq).
func compareStreamIDs(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	if c := cmp.Compare(toInt64(am), toInt64(bm)); c != 0 {
		return c
	}
	return cmp.Compare(toInt64(as), toInt64(bs))
}

// DeadLetters lists a group's dead letters, oldest first: at most limit
// (1 to 10,000) after the dead letter with ID after ("" for the first page).
// Pass the last ID of a page to get the next.
func (i *Inspector) DeadLetters(ctx context.Context, topic, group, after string, limit int) ([]DeadLetter, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return nil, err
	}
	if err := validatePage(0, limit); err != nil {
		return nil, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return nil, wrapErr(err, "list dead letters of group %q in topic %q", group, topic)
	}
	var cursor deadID
	if after != "" {
		if cursor, err = parseDeadID(after, len(shards)); err != nil {
			return nil, err
		}
	}
	type found struct {
		id deadID
		e  store.DeadEntry
	}
	var all []found
	for part, sh := range shards {
		// Entries are ordered by (entry ID, partition) across partitions.
		start := "-"
		if after != "" {
			start = "(" + cursor.id
			if part > cursor.part {
				start = cursor.id
			}
		}
		entries, err := store.DeadLetters(ctx, i.client, sh, group, start, limit)
		if err != nil {
			return nil, wrapErr(err, "list dead letters of group %q in topic %q", group, topic)
		}
		for _, e := range entries {
			all = append(all, found{deadID{part, e.ID}, e})
		}
	}
	slices.SortStableFunc(all, func(a, b found) int {
		if c := compareStreamIDs(a.id.id, b.id.id); c != 0 {
			return c
		}
		return cmp.Compare(a.id.part, b.id.part)
	})
	all = all[:min(limit, len(all))]
	out := make([]DeadLetter, 0, len(all))
	for _, f := range all {
		out = append(out, deadLetterOf(f.id, f.e))
	}
	return out, nil
}

// deadLetterOf decodes a stored dead letter.
func deadLetterOf(id deadID, e store.DeadEntry) DeadLetter {
	d := DeadLetter{ID: id.String(), Attempts: e.Attempts, Reason: e.Reason, Time: e.Time}
	if msg, err := store.Decode(e.Body); err == nil {
		d.Message = msg
	} else {
		d.Body = e.Body
	}
	return d
}

// RequeueDeadLetter sends one dead letter back to its group as a new first
// attempt. It reports whether the dead letter existed.
func (i *Inspector) RequeueDeadLetter(ctx context.Context, topic, group, id string) (bool, error) {
	sh, d, err := i.deadLetter(ctx, topic, group, id)
	if err != nil {
		return false, err
	}
	n, err := i.requeue(ctx, sh, group, d.id)
	return n == 1, wrapErr(err, "requeue dead letter %q of group %q in topic %q", id, group, topic)
}

// deadLetter resolves a dead letter ID to its partition's keys.
func (i *Inspector) deadLetter(ctx context.Context, topic, group, id string) (store.Shard, deadID, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return "", deadID{}, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return "", deadID{}, wrapErr(err, "find dead letter %q of group %q in topic %q", id, group, topic)
	}
	d, err := parseDeadID(id, len(shards))
	if err != nil {
		return "", deadID{}, err
	}
	return shards[d.part], d, nil
}

// RequeueDeadLetters sends every dead letter of the group back to it as a
// new first attempt, in batches, and returns how many it sent.
func (i *Inspector) RequeueDeadLetters(ctx context.Context, topic, group string) (int, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return 0, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return 0, wrapErr(err, "requeue dead letters of group %q in topic %q", group, topic)
	}
	total := 0
	for _, sh := range shards {
		for {
			n, err := i.requeue(ctx, sh, group)
			total += n
			if err != nil {
				return total, wrapErr(err, "requeue dead letters of group %q in topic %q", group, topic)
			}
			if n == 0 {
				break
			}
		}
	}
	return total, nil
}

// requeue moves the given dead letters, or with no ids the oldest 256,
// back to the group and returns how many it moved.
func (i *Inspector) requeue(ctx context.Context, sh store.Shard, group string, ids ...string) (int, error) {
	n, err := store.Requeue(ctx, i.client, sh, group, store.RequeueBatch, ids)
	if err == nil && n > 0 {
		// Schedulers reclaim the requeued messages should their consumer
		// die: a loop that retired (the partition was idle) starts again.
		err = store.Wake(ctx, i.client, sh, "r")
	}
	return n, err
}

// DeleteDeadLetter deletes one dead letter for good. It reports whether it
// existed.
func (i *Inspector) DeleteDeadLetter(ctx context.Context, topic, group, id string) (bool, error) {
	sh, d, err := i.deadLetter(ctx, topic, group, id)
	if err != nil {
		return false, err
	}
	n, err := store.DeleteDead(ctx, i.client, sh, group, d.id)
	return n == 1, wrapErr(err, "delete dead letter %q of group %q in topic %q", id, group, topic)
}

// PurgeDeadLetters deletes all dead letters of the group for good and
// returns how many there were.
func (i *Inspector) PurgeDeadLetters(ctx context.Context, topic, group string) (int64, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return 0, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return 0, wrapErr(err, "purge dead letters of group %q in topic %q", group, topic)
	}
	var total int64
	for _, sh := range shards {
		n, err := store.PurgeDead(ctx, i.client, sh, group)
		if err != nil {
			return total, wrapErr(err, "purge dead letters of group %q in topic %q", group, topic)
		}
		total += n
	}
	return total, nil
}

// RunNow makes a waiting message of topic due now, by Redis's clock, in
// place (same UUID, body and business key): the scheduler moves it to the
// consumer groups at once, as it would at its due time. It reports whether
// the message was waiting (not when unknown, already due or cancelled).
// As Reschedule to now, with no clock of this process involved; a message
// of the far tier is moved first, as for Reschedule. It is delivered only
// once a scheduler runs for the topic (TopicStats.Leased).
func (i *Inspector) RunNow(ctx context.Context, topic, messageUUID string) (bool, error) {
	return i.runNow(ctx, topic, "uuid", messageUUID)
}

// RunNowKey is RunNow for the waiting message holding businessKey.
func (i *Inspector) RunNowKey(ctx context.Context, topic, businessKey string) (bool, error) {
	return i.runNow(ctx, topic, "key", businessKey)
}

func (i *Inspector) runNow(ctx context.Context, topic, by, value string) (bool, error) {
	if err := checkLookup("run now", topic, by, value); err != nil {
		return false, err
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	if err != nil {
		return false, wrap(err, "run %s now in topic %q", recallWhat(by, value), topic)
	}
	return reschedule(ctx, i.client, i.keys, topic, parts[0], by, value, 0)
}

// RunNowWhere makes the waiting messages of a topic that match f due now,
// as RunNow does one, and returns the counts. It reads and acts as
// CancelWhere does, with the same guards: the zero Filter needs
// BulkOptions.All, DryRun counts and changes nothing, and a run that
// stopped goes on from its Cursor. Messages already due when read (by
// Redis's clock) are left alone and not counted, as RescheduleWhere leaves
// those due at its time: so each is counted once, though one it made due
// (or pulled from the far tier and made due) is met again in the waiting
// set until a scheduler moves it on, and a run repeated does nothing.
func (i *Inspector) RunNowWhere(ctx context.Context, topic string, f Filter, o BulkOptions) (BulkProgress, error) {
	s, err := i.waitingBulk(ctx, topic, f, o)
	if err != nil {
		return BulkProgress{Cursor: o.Cursor}, err
	}
	// s.now is Redis's time (ms, rounded up) read before each batch: a
	// message this run made due in an earlier batch is due by then.
	s.readNow = true
	s.skip = func(w waitingMatch) bool { return w.Due.UnixMilli() <= s.now }
	p, err := runBulk(ctx, s, o, i.eachWaiting(ctx, func(ctx context.Context, sh store.Shard, uuids []string) (int, error) {
		return store.RunNowMany(ctx, i.client, sh, uuids)
	}))
	return p, wrapErr(err, "run waiting messages of topic %q now", topic)
}

// Moving a topic's clock forward, for tests (package redisdelaytest): the
// stored due times are moved earlier, so that what would happen d later
// happens now. Nothing of the library calls it, and no API of this package
// reaches it: only a program importing redisdelaytest can.

func init() { advance.Func = advanceClock }

// maxAdvanceTicks bounds the ticks one advance publishes per schedule.
const maxAdvanceTicks = 10_000

func advanceClock(ctx context.Context, client redis.UniversalClient, prefix string, d time.Duration, topics []string) (advance.Report, error) {
	var r advance.Report
	if d <= 0 || d > meta.MaxDelay {
		return r, fmt.Errorf("%w: advance the clock by %s: give a positive duration of at most 100 years", ErrInvalidDelay, d)
	}
	i := &Inspector{client: client, keys: store.Keys{Prefix: defaultPrefix(prefix)}}
	every := len(topics) == 0
	if every {
		var err error
		if topics, err = i.Topics(ctx); err != nil {
			return r, err
		}
	}
	for _, topic := range topics {
		if err := validateTopic(topic); err != nil {
			return r, err
		}
		shards, err := i.shards(ctx, topic)
		if err != nil {
			return r, wrap(err, "advance the clock of topic %q", topic)
		}
		for _, sh := range shards {
			if err := advanceShard(ctx, client, sh, d, &r); err != nil {
				return r, wrap(err, "advance the clock of topic %q", topic)
			}
		}
	}
	return r, i.advanceSchedules(ctx, d, func(topic string) bool { return every || slices.Contains(topics, topic) }, &r)
}

// advanceShard moves a partition's waiting messages, far ones included,
// and its retries d earlier, and wakes its schedulers.
func advanceShard(ctx context.Context, client redis.UniversalClient, sh store.Shard, d time.Duration, r *advance.Report) error {
	far, err := store.PullFarAll(ctx, client, sh)
	r.Far += int64(far)
	if err != nil {
		return err
	}
	n, err := store.Shift(ctx, client, sh.Waiting(), d)
	r.Waiting += n
	if err != nil {
		return err
	}
	groups, err := store.Groups(ctx, client, sh)
	if err != nil {
		return err
	}
	for _, g := range groups {
		n, err := store.Shift(ctx, client, sh.Retry(g), d)
		r.Retrying += n
		if err != nil {
			return err
		}
	}
	return store.Wake(ctx, client, sh, "d")
}

// advanceSchedules publishes the ticks of the schedules of the topics
// chosen that fall due by now + d, as their tick loops would over the next
// d: those older than the catch-up window now (missed while no scheduler
// ran) are skipped, as a tick loop would skip them now. Each schedule's
// next tick moves past now + d first, by compare-and-set, so a tick loop
// publishes none of them again.
func (i *Inspector) advanceSchedules(ctx context.Context, d time.Duration, chosen func(string) bool, r *advance.Report) error {
	for range 5 {
		all, err := i.Schedules(ctx)
		if err != nil {
			return err
		}
		now, err := store.RedisTime(ctx, i.client)
		if err != nil {
			return wrap(err, "advance the schedules")
		}
		horizon, lost := now.Add(d), false
		for _, s := range all {
			if !s.Paused.IsZero() || s.Next.IsZero() || !chosen(s.Topic) || s.Next.After(horizon) {
				continue
			}
			t, err := s.validate()
			if err != nil {
				return fmt.Errorf("redisdelay: advance schedule %q: %w", s.ID, err)
			}
			var ticks []time.Time
			next, oldest := s.Next, now.Add(-s.catchUp())
			for ; !next.IsZero() && !next.After(horizon); next = t.next(next) {
				if len(ticks) == maxAdvanceTicks {
					return fmt.Errorf("redisdelay: advance schedule %q by %s: more than %d ticks: advance by less at a time", s.ID, d, maxAdvanceTicks)
				}
				if next.Before(oldest) {
					r.SkippedTicks++
					continue
				}
				ticks = append(ticks, next)
			}
			if next.IsZero() {
				next = time.UnixMilli(maxScheduleMs)
			}
			moved, err := store.MoveNextTick(ctx, i.client, i.keys, s.ID, s.Next, next)
			if err != nil {
				return wrap(err, "advance schedule %q", s.ID)
			}
			if !moved {
				lost = true // a tick loop claimed one first: read again
				continue
			}
			if err := i.publishTicks(ctx, "advance", s, ticks...); err != nil {
				return err
			}
			r.Ticks += int64(len(ticks))
		}
		if !lost {
			return wrapErr(store.WakeTicks(ctx, i.client, i.keys), "advance the schedules: wake the tick loops")
		}
	}
	return fmt.Errorf("redisdelay: advance the schedules: their tick loops kept moving them: try again")
}
