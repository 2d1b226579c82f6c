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

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// InspectorConfig configures an Inspector.
type InspectorConfig struct {
	// Client is the Redis connection. Required. Never closed by the Inspector.
	Client redis.UniversalClient

	// KeyPrefix namespaces every Redis key (default DefaultKeyPrefix).
	KeyPrefix string
}

func (c *InspectorConfig) setDefaults() {
	c.KeyPrefix = defaultPrefix(c.KeyPrefix)
}

// Validate reports the first setting that cannot work.
func (c InspectorConfig) Validate() error {
	return validateCommon("InspectorConfig", c.Client, c.KeyPrefix)
}

// Inspector shows what a topic holds, and lets an operator act on dead
// letters: list, requeue and delete them. Safe for concurrent use; it keeps
// no state, so there is nothing to close.
type Inspector struct {
	client redis.UniversalClient
	keys   store.Keys
}

// NewInspector returns an Inspector.
func NewInspector(config InspectorConfig) (*Inspector, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	return &Inspector{client: config.Client, keys: store.Keys{Prefix: config.KeyPrefix}}, nil
}

// TopicStats counts the messages of a topic where they are, summed over
// its partitions.
type TopicStats struct {
	Topic string
	// Partitions is the topic's partition count, as stored in Redis.
	Partitions int
	// Waiting counts delayed messages not yet due, and grouped messages
	// (see GroupKey) due while the topic had no consumer group, which wait
	// for the first.
	Waiting int64
	// Stream counts entries in the ready streams, read or not: it shrinks
	// when every group has acknowledged an entry and a scheduler trims it.
	Stream int64
	// Leased counts the partitions whose scheduling lease a scheduler (of
	// a Manager, or of a subscriber without DisableScheduler) holds now.
	// A running scheduler holds the lease of each partition with waiting
	// messages, give or take a handover (up to 1.5 CheckInterval after its
	// holder stopped); a partition with nothing waiting may have none: its
	// scheduler's loop retired (dormant) or lets the lease lapse between
	// checks. So Leased == 0 with Waiting > 0 means that no scheduler runs
	// for the topic, and due messages stay waiting: see Overdue.
	Leased int
	Groups []GroupStats
}

// GroupStats counts a consumer group's messages of one topic.
type GroupStats struct {
	Group string
	// Ready counts messages due and not yet fetched by a consumer of the
	// group: new ones in the ready stream plus redeliveries. -1 when Redis
	// cannot tell (entries were deleted from the middle of the stream by hand).
	Ready int64
	// Pending counts messages fetched by a consumer and not yet acked.
	Pending int64
	// Retry counts nacked or reclaimed messages waiting for their retry delay.
	Retry int64
	// Dead counts the dead letters held now.
	Dead int64
	// DeadTotal counts messages ever moved to the dead letters, and
	// DeadEvicted those evicted to respect MaxDeadLetters.
	DeadTotal, DeadEvicted int64
	// Consumers counts the group's consumers known to Redis, including
	// crashed ones not cleaned up yet (see ConsumerIdleTimeout); in a topic
	// of several partitions, the most any partition has.
	Consumers int64
	// Paused is true while the group is paused (see Inspector.Pause).
	Paused bool
	// Grouped counts grouped messages (see GroupKey) due and queued in
	// their groups, not yet taken by a consumer (they are not in Ready);
	// ActiveGroups the groups holding queued or unsettled messages, summed
	// over partitions.
	Grouped, ActiveGroups int64
}

// Topics lists the topics publishers and subscribers with this key prefix
// have used. Registry entries that are not valid topic names (written by
// something other than this library) are left out: see InvalidTopics.
func (i *Inspector) Topics(ctx context.Context) ([]string, error) {
	topics, _, err := i.registry(ctx)
	return topics, err
}

// InvalidTopics lists the entries of the topic registry (the set
// <KeyPrefix>:topics) that are not valid topic names, which Topics, Health
// and the Collector skip. Nothing of this library writes them: remove
// them with SREM.
func (i *Inspector) InvalidTopics(ctx context.Context) ([]string, error) {
	_, invalid, err := i.registry(ctx)
	return invalid, err
}

func (i *Inspector) registry(ctx context.Context) (valid, invalid []string, err error) {
	all, err := store.Topics(ctx, i.client, i.keys)
	if err != nil {
		return nil, nil, wrap(err, "list topics")
	}
	valid = all[:0]
	for _, t := range all {
		if validateTopic(t) != nil {
			invalid = append(invalid, t)
		} else {
			valid = append(valid, t)
		}
	}
	return valid, invalid, nil
}

// shards returns the keys of each partition of a topic, by the count
// stored in Redis.
func (i *Inspector) shards(ctx context.Context, topic string) ([]store.Shard, error) {
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	if err != nil {
		return nil, err
	}
	out := make([]store.Shard, parts[0])
	for n := range out {
		out[n] = i.keys.Shard(topic, n)
	}
	return out, nil
}

// Stats counts a topic's messages. The counts are read without stopping
// traffic, so they are a near, not exact, snapshot of a busy topic.
func (i *Inspector) Stats(ctx context.Context, topic string) (TopicStats, error) {
	st := TopicStats{Topic: topic}
	if err := validateTopic(topic); err != nil {
		return st, err
	}
	fail := func(err error) (TopicStats, error) {
		return st, wrap(err, "stats of topic %q", topic)
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return fail(err)
	}
	st.Partitions = len(shards)
	index := map[string]int{} // group -> position in st.Groups
	for _, sh := range shards {
		part, err := i.partitionStats(ctx, sh)
		if err != nil {
			return fail(err)
		}
		st.Waiting += part.Waiting
		st.Stream += part.Stream
		st.Leased += part.Leased
		for _, g := range part.Groups {
			n, ok := index[g.Group]
			if !ok {
				index[g.Group] = len(st.Groups)
				st.Groups = append(st.Groups, g)
				continue
			}
			sum := &st.Groups[n]
			if sum.Ready >= 0 && g.Ready >= 0 {
				sum.Ready += g.Ready
			} else {
				sum.Ready = -1
			}
			sum.Pending += g.Pending
			sum.Retry += g.Retry
			sum.Dead += g.Dead
			sum.DeadTotal += g.DeadTotal
			sum.DeadEvicted += g.DeadEvicted
			sum.Consumers = max(sum.Consumers, g.Consumers)
			sum.Grouped += g.Grouped
			sum.ActiveGroups += g.ActiveGroups
		}
	}
	if err := i.pausedGroups(ctx, topic, st.Groups); err != nil {
		return fail(err)
	}
	return st, nil
}

// pausedGroups sets Paused in the stats of the groups (see Pause).
func (i *Inspector) pausedGroups(ctx context.Context, topic string, groups []GroupStats) error {
	if len(groups) == 0 {
		return nil
	}
	names := make([]string, len(groups))
	for n, g := range groups {
		names[n] = g.Group
	}
	paused, err := store.PausedGroups(ctx, i.client, i.keys.Shard(topic, 0), names)
	if err != nil {
		return err
	}
	for n := range groups {
		groups[n].Paused = paused[n]
	}
	return nil
}

// partitionStats counts the messages of one partition.
func (i *Inspector) partitionStats(ctx context.Context, sh store.Shard) (TopicStats, error) {
	c, err := store.PartitionStats(ctx, i.client, sh)
	if err != nil {
		return TopicStats{}, err
	}
	st := TopicStats{Waiting: c.Waiting, Stream: c.Stream}
	if c.Leased {
		st.Leased = 1
	}
	for _, g := range c.Groups {
		st.Groups = append(st.Groups, GroupStats{Group: g.Group, Ready: g.Ready, Pending: g.Pending, Consumers: g.Consumers,
			Retry: g.Retry, Dead: g.Dead, DeadTotal: g.DeadTotal, DeadEvicted: g.DeadEvicted, Grouped: g.Grouped, ActiveGroups: g.Active})
	}
	return st, nil
}

func toInt64(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

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

// DeleteGroup removes a consumer group from a topic with everything it
// holds: its position in the ready stream, pending messages, retries and
// dead letters. Use it for a group no service consumes in any more, which
// would otherwise keep every later message in the ready stream (trimming
// never drops what a group has not read). Stop the group's subscribers
// first: a running one recreates the group and reads again everything
// still in the ready stream. It reports whether the group existed.
func (i *Inspector) DeleteGroup(ctx context.Context, topic, group string) (bool, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return false, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return false, wrapErr(err, "delete group %q of topic %q", group, topic)
	}
	existed := false
	for _, sh := range shards {
		dropped, err := store.DropGroup(ctx, i.client, sh, group)
		if err != nil {
			return existed, wrapErr(err, "delete group %q of topic %q", group, topic)
		}
		existed = existed || dropped
	}
	return existed, nil
}
func (i *Inspector) validateGroup(topic, group string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	return validateName("consumer group", group)
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

// Overdue reports how long the earliest waiting message of a topic (over
// its partitions) is overdue, by Redis's clock: 0 when none is due. A
// scheduler moves due messages within milliseconds, so a value that grows
// means that no scheduler runs for the topic (no Manager, and subscribers
// with DisableScheduler) or that it cannot keep up: TopicStats.Leased
// tells which.
func (i *Inspector) Overdue(ctx context.Context, topic string) (time.Duration, error) {
	if err := validateTopic(topic); err != nil {
		return 0, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return 0, wrapErr(err, "overdue messages of topic %q", topic)
	}
	var overdue time.Duration
	for _, sh := range shards {
		d, err := store.Overdue(ctx, i.client, sh)
		if err != nil {
			return 0, wrap(err, "overdue messages of topic %q", topic)
		}
		overdue = max(overdue, d)
	}
	return overdue, nil
}

// Lookups for the operator dashboard (package dashboard): one waiting
// message by UUID or business key, and how many fall due when, without
// reading the whole waiting set of a large topic.

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
	if err := checkLookup("find", topic, by, value); err != nil {
		return WaitingMessage{}, false, err
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	var r store.FindReply
	found := false
	if err == nil {
		found, err = inPartitions(i.keys, topic, parts[0], value, func(sh store.Shard) (ok bool, err error) {
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
				r = store.FindReply{Uuid: uuid, Score: score, Body: []byte(body)}
			} else if err == nil {
				// unpacked into the waiting set meanwhile?
				r, ok, err = store.Find(ctx, i.client, sh, by, value)
			}
			return ok, err
		})
	}
	if err != nil || !found {
		return WaitingMessage{}, false, wrapErr(err, "find %s in topic %q", recallWhat(by, value), topic)
	}
	w := WaitingMessage{Due: store.DueOf(r.Score)}
	if w.Message, err = store.Decode(r.Body); err != nil {
		w.Message, w.Corrupt = message.NewMessage(r.Uuid, nil), err.Error()
	}
	return w, true, nil
}

// maxHistogramEdges bounds DueHistogram's buckets: one ZCOUNT per bucket
// and partition.
const maxHistogramEdges = 100

// DueHistogram counts a topic's waiting messages by due time: with edges
// e0 < e1 < ... < en, it returns n+2 counts, of the messages due before e0
// (overdue, when e0 is now), in [e0, e1), ..., in [en-1, en), and at en or
// later. It counts the waiting set on the server (ZCOUNT), and the far
// tier (messages due more than about two minutes ahead: see "far tier" in
// docs/internals.md) by its per-minute buckets, each counted in the bin of
// its first minute, so a far message may be counted up to a minute early;
// the cost grows with the number of such minutes, not of messages. A bucket
// unpacked while it reads may be counted twice or not at all. At most 100
// edges.
func (i *Inspector) DueHistogram(ctx context.Context, topic string, edges []time.Time) ([]int64, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	if len(edges) == 0 || len(edges) > maxHistogramEdges {
		return nil, fmt.Errorf("redisdelay: DueHistogram got %d edges: give 1 to %d", len(edges), maxHistogramEdges)
	}
	for n, e := range edges {
		if n > 0 && !e.After(edges[n-1]) {
			return nil, fmt.Errorf("redisdelay: DueHistogram edge %d (%s) is not after edge %d (%s): give increasing times",
				n, e.Format(time.RFC3339Nano), n-1, edges[n-1].Format(time.RFC3339Nano))
		}
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return nil, wrap(err, "due histogram of topic %q", topic)
	}
	out := make([]int64, len(edges)+1)
	if err := store.DueCounts(ctx, i.client, shards, edges, out); err != nil {
		return nil, wrap(err, "due histogram of topic %q", topic)
	}
	return out, nil
}

// TopicCounters are a topic's counters that only grow, summed over its
// partitions: read them twice and divide the difference by the time
// between the reads for a rate. They restart from 0 when a ready stream is
// deleted (by hand, or by Inspector.DeleteGroup of the last group): a
// counter smaller than its last read means a restart, not a negative rate.
type TopicCounters struct {
	Topic string
	// Time is Redis's clock when the counters were read.
	Time time.Time
	// Ready counts the entries ever added to the ready streams (Redis 7's
	// entries-added of XINFO STREAM): messages made ready, delayed ones
	// when they fall due and immediate ones when published. Redeliveries
	// and requeued dead letters are not counted.
	Ready int64
	// Groups are the consumer groups created on a ready stream, by name.
	Groups []GroupCounters
}

// GroupCounters are a consumer group's growing counters of one topic.
type GroupCounters struct {
	Group string
	// Delivered counts ready stream entries delivered to the group's
	// consumers for the first time (Redis 7's entries-read of XINFO
	// GROUPS). -1 when Redis cannot tell (entries were deleted from the
	// middle of a stream by hand).
	Delivered int64
	// DeadTotal counts messages ever moved to the group's dead letters,
	// as in GroupStats.
	DeadTotal int64
}

// Counters reads a topic's growing counters in two or three round trips
// of 2 + 2×partitions + partitions×groups commands, none of which reads a
// list of messages, so sampling it every few seconds costs Redis little
// whatever the depth of the topic.
func (i *Inspector) Counters(ctx context.Context, topic string) (TopicCounters, error) {
	out := TopicCounters{Topic: topic}
	if err := validateTopic(topic); err != nil {
		return out, err
	}
	fail := func(err error) (TopicCounters, error) {
		return out, wrap(err, "counters of topic %q", topic)
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return fail(err)
	}
	c, err := store.Counters(ctx, i.client, shards)
	if err != nil {
		return fail(err)
	}
	out.Time, out.Ready = c.Time, c.Ready
	index := map[string]int{}
	for _, g := range c.Groups {
		k, ok := index[g.Group]
		if !ok {
			k = len(out.Groups)
			index[g.Group] = k
			out.Groups = append(out.Groups, GroupCounters{Group: g.Group})
		}
		sum := &out.Groups[k]
		if g.Delivered < 0 || sum.Delivered < 0 {
			sum.Delivered = -1
		} else {
			sum.Delivered += g.Delivered
		}
		sum.DeadTotal += g.DeadTotal
	}
	slices.SortFunc(out.Groups, func(a, b GroupCounters) int { return strings.Compare(a.Group, b.Group) })
	return out, nil
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
	d, err := rescheduleDelay(topic, by, value, due, time.Now(), maxDelayLimit, "")
	if err != nil {
		return false, err
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	if err != nil {
		return false, wrap(err, "reschedule %s in topic %q", recallWhat(by, value), topic)
	}
	return reschedule(ctx, i.client, i.keys, topic, parts[0], by, value, d)
}
