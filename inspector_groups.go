package redisdelay

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// A consumer group's messages where they are, besides waiting (Waiting)
// and dead (DeadLetters): ready for its consumers, pending with one, and
// retrying after a failure; and its consumers. Each listing reads one
// page, at most its limit of entries from Redis whatever the backlog, and
// returns a cursor for the next page. Pages go partition by partition;
// within a partition the group's redelivery stream (retries, requeued dead
// letters, grouped and high-priority messages, fetched first) comes before
// the ready stream.

// GroupMessage is a message of a consumer group in one of its streams:
// ready for its consumers, or pending with one.
type GroupMessage struct {
	// ID identifies the entry within the group and topic: "<partition>:<stream>:<entry ID>",
	// stream "r" for the group's redelivery stream, "m" for the topic's
	// ready stream. The entry ID's time part is when the message was queued.
	ID string
	// Message is the message as stored; nil when it could not be decoded
	// (Body then holds the stored bytes) or, for a pending message, when
	// its entry was settled since the page was read.
	Message *message.Message
	Body    []byte
	// Attempt is the delivery attempt it is (or will be), from 1.
	Attempt int
	// Group is the message's group (SetGroup), "" for none.
	Group string
	// Queued is when the message was added to the stream: when it fell
	// due, was published, or was queued for its retry.
	Queued time.Time
}

// PendingMessage is a message a consumer of the group fetched and has not
// settled (acked, nacked) yet: with its handler, or prefetched behind it.
// Redis does not record which (both hold the same lease, renewed alike,
// and telling them apart would take a write per message): a subscription
// hands its messages to the handler one at a time, per partition, in the
// order fetched, and up to BatchSize-1 more wait prefetched. So of the
// messages one consumer holds in a partition, one at most is with its
// handler.
type PendingMessage struct {
	GroupMessage
	// Consumer is the name of the consumer holding it (SubscriberConfig.Consumer).
	Consumer string
	// Renewed is when the consumer fetched it or last renewed its lease,
	// by Redis's clock; a live subscription renews every third of the
	// visibility timeout while its handler runs.
	Renewed time.Time
	// LeaseExpires is Renewed plus the group's visibility timeout: after
	// it, a scheduler reclaims the message as a new attempt (its consumer
	// stopped renewing: died, or lost Redis). Zero when the group has
	// stored no visibility timeout (no subscriber of this version yet).
	LeaseExpires time.Time
	// Deliveries counts Redis's deliveries of the entry: more than 1 when
	// a subscription read its own pending entries again.
	Deliveries int64
	// Handler says whether a handler has the message (HandlerRunning,
	// since HandedAt) or it was fetched with it and waits behind it in
	// the consumer (HandlerBuffered), as the consumer last reported.
	Handler  HandlerState
	HandedAt time.Time
}

// HandlerState tells a pending message a handler has from the messages
// fetched with it (SubscriberConfig.BatchSize), which wait behind it in
// the consumer and count as pending too. A consumer reports what its
// handler has at each lease renewal, and once a handler has had a
// message for a second: a message handled for less than that may show
// as buffered.
type HandlerState string

const (
	// HandlerRunning: handed to a handler, not acked or nacked yet.
	HandlerRunning HandlerState = "handling"
	// HandlerBuffered: fetched, waiting in the consumer for its turn.
	HandlerBuffered HandlerState = "buffered"
	// HandlerUnreported: no report of the consumer is current: it
	// fetched the message less than a second ago, or it runs a release
	// before 0.2.0 (which does not report), or it stopped renewing its
	// leases (see LeaseExpires).
	HandlerUnreported HandlerState = "unreported"
)

func handlerOf(p store.PendingEntry) (HandlerState, time.Time) {
	switch p.Handler {
	case store.HandlerRunning:
		return HandlerRunning, p.HandedAt
	case store.HandlerBuffered:
		return HandlerBuffered, time.Time{}
	}
	return HandlerUnreported, time.Time{}
}

// RetryingMessage is a message waiting in a group's retry set for its
// retry delay (after a Nack, a handler timeout, or a reclaim).
type RetryingMessage struct {
	// ID identifies it in the group and topic: "<partition>:<member>".
	ID string
	// Message as stored; nil when it could not be decoded (Body holds
	// it), or when it fell due since the page was read.
	Message *message.Message
	Body    []byte
	// Attempt is the attempt it will be delivered as.
	Attempt int
	// Due is when it is moved to the group's redelivery stream.
	Due time.Time

	cursor string // of the page after this message
}

// Consumer is a consumer of a group as Redis knows it, over the topic's
// partitions and both of the group's streams.
type Consumer struct {
	Name string
	// Pending counts the messages it holds, fetched and not settled.
	Pending int64
	// LastSeen is the last time it read, or renewed a lease, by Redis's
	// clock; Idle how long ago that was. A subscription waiting for new
	// messages reads at least once per BlockTime (30 s), unless its group
	// is paused; one whose handlers hold messages renews every third of
	// the visibility timeout. Consumers silent longer than the group's
	// ConsumerIdleTimeout (1 h) are removed by the schedulers once they
	// hold nothing.
	LastSeen time.Time
	Idle     time.Duration
	// Active is the last time it got or renewed a message (Redis 7.2 and
	// later; zero before, or when it never got one).
	Active time.Time
	// Stuck reports that it holds messages (Pending > 0) and, on a stream
	// of a partition where it holds some, has shown no sign of life (no
	// read, no lease renewal) for twice the group's VisibilityTimeout as
	// stored in Redis or longer: the limit past which Health reports
	// stuck_pending by default. A live subscription renews the leases of
	// what it holds every third of the timeout, however long its handlers
	// run, so such a consumer stopped or lost Redis, and no scheduler
	// reclaimed its messages (a running one does after the timeout). A
	// silent consumer holding nothing is not stuck: it may be stopped, or
	// its group paused (see Idle).
	Stuck bool

	inactive time.Duration // how long ago Active was; -1: unknown
}

// checkGroupPage checks a group listing's arguments.
func (i *Inspector) checkGroupPage(topic, group string, limit int) error {
	if err := i.validateGroup(topic, group); err != nil {
		return err
	}
	return validatePage(0, limit)
}

// streamCursor is where a listing of a group's streams goes on: after the
// entry id of stream which ("r", then "m") of partition part.
type streamCursor struct {
	part  int
	which string
	after string
}

func (c streamCursor) String() string {
	return strconv.Itoa(c.part) + ":" + c.which + ":" + c.after
}

// parseStreamCursor reads a cursor of Ready or Pending ("" for the start).
func parseStreamCursor(s string, parts int) (streamCursor, error) {
	c := streamCursor{which: "r"}
	if s == "" {
		return c, nil
	}
	p, rest, ok1 := strings.Cut(s, ":")
	which, id, ok2 := strings.Cut(rest, ":")
	n, err := strconv.Atoi(p)
	if !ok1 || !ok2 || err != nil || (which != "r" && which != "m") || (id != "" && !validStreamID(id)) {
		return c, fmt.Errorf("redisdelay: cursor %q is not one a listing of a group's messages returned (\"<partition>:<r|m>:<entry ID>\"): pass the previous page's cursor unchanged, or \"\" to start", s)
	}
	if n < 0 || n >= parts {
		return c, fmt.Errorf("redisdelay: cursor %q names partition %d, but the topic has %d: pass the previous page's cursor unchanged, or \"\" to start", s, n, parts)
	}
	return streamCursor{part: n, which: which, after: id}, nil
}

// next is the start of the stream after c's: the ready stream of the same
// partition, or the next partition's redelivery stream; ok false at the end.
func (c streamCursor) next(parts int) (streamCursor, bool) {
	if c.which == "r" {
		return streamCursor{part: c.part, which: "m"}, true
	}
	return streamCursor{part: c.part + 1, which: "r"}, c.part+1 < parts
}

// groupMessageOf decodes a stream entry of partition part.
func groupMessageOf(part int, which string, e store.StreamEntry) GroupMessage {
	g := GroupMessage{ID: streamCursor{part, which, e.ID}.String(), Attempt: e.Attempt, Group: e.Group, Queued: entryTime(e.ID)}
	if e.Body == nil {
		return g
	}
	if msg, err := store.Decode(e.Body); err == nil {
		g.Message = msg
	} else {
		g.Body = e.Body
	}
	return g
}

// entryTime is the time part of a stream entry ID.
func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n)
}

// streamPages reads a group's streams from cursor until limit entries were
// read or every stream was, with read reading one stream from its cursor;
// it returns the cursor of the next page, "" at the end.
func (i *Inspector) streamPages(ctx context.Context, topic, group, cursor string, limit int, read func(sh store.Shard, c streamCursor, n int) (last string, got int, err error)) (string, error) {
	if err := i.checkGroupPage(topic, group, limit); err != nil {
		return "", err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return "", err
	}
	c, err := parseStreamCursor(cursor, len(shards))
	if err != nil {
		return "", err
	}
	for left := limit; ; {
		last, got, err := read(shards[c.part], c, left)
		if err != nil {
			return "", err
		}
		if got > 0 {
			c.after = last
		}
		if left -= got; left == 0 {
			return c.String(), nil
		}
		var more bool
		if c, more = c.next(len(shards)); !more {
			return "", nil
		}
	}
}

// Ready lists messages of a consumer group due and not yet fetched by its
// consumers, at most limit (1 to 10,000), from cursor ("" for the first
// page), and returns the cursor of the next page ("" after the last). In a
// partition, the group's redelivery stream comes first (its consumers
// fetch it first), then the topic's ready stream, each oldest first.
// Grouped messages (SetGroup) queued in their groups are not listed until
// a consumer's turn takes them (see GroupStats.Grouped).
func (i *Inspector) Ready(ctx context.Context, topic, group, cursor string, limit int) ([]GroupMessage, string, error) {
	var out []GroupMessage
	next, err := i.streamPages(ctx, topic, group, cursor, limit, func(sh store.Shard, c streamCursor, n int) (string, int, error) {
		es, err := store.ReadyEntries(ctx, i.client, sh, group, c.which, c.after, n)
		for _, e := range es {
			out = append(out, groupMessageOf(c.part, c.which, e))
		}
		return lastID(es), len(es), err
	})
	return out, next, wrapErr(err, "list ready messages of group %q in topic %q", group, topic)
}

func lastID(es []store.StreamEntry) string {
	if len(es) == 0 {
		return ""
	}
	return es[len(es)-1].ID
}

// Pending lists messages a consumer of the group fetched and has not
// settled yet, with who holds each, since when, and when its lease
// expires: at most limit (1 to 10,000) from cursor ("" for the first
// page), and the cursor of the next page ("" after the last). The order is
// Ready's. A page costs two round trips per stream read.
func (i *Inspector) Pending(ctx context.Context, topic, group, cursor string, limit int) ([]PendingMessage, string, error) {
	var out []PendingMessage
	now, err := store.RedisTime(ctx, i.client)
	if err != nil {
		return nil, "", wrapErr(err, "list pending messages of group %q in topic %q", group, topic)
	}
	vis := map[store.Shard]time.Duration{}
	next, err := i.streamPages(ctx, topic, group, cursor, limit, func(sh store.Shard, c streamCursor, n int) (string, int, error) {
		ps, err := store.PendingEntries(ctx, i.client, sh, group, c.which, c.after, n)
		if err != nil || len(ps) == 0 {
			return "", 0, err
		}
		v, ok := vis[sh]
		if !ok {
			p, err := store.ReadGroupPolicy(ctx, i.client, sh, group)
			if err != nil {
				return "", 0, err
			}
			v, vis[sh] = p.Visibility, p.Visibility
		}
		for _, p := range ps {
			pm := PendingMessage{GroupMessage: groupMessageOf(c.part, c.which, p.StreamEntry), Consumer: p.Consumer,
				Renewed: now.Add(-p.Idle), Deliveries: p.Deliveries}
			pm.Handler, pm.HandedAt = handlerOf(p)
			if v > 0 {
				pm.LeaseExpires = pm.Renewed.Add(v)
			}
			out = append(out, pm)
		}
		return ps[len(ps)-1].ID, len(ps), nil
	})
	return out, next, wrapErr(err, "list pending messages of group %q in topic %q", group, topic)
}

// Retrying lists messages of a consumer group waiting for their retry
// delay, each partition in due order (equal due times in a fixed order):
// at most limit (1 to 10,000) from cursor ("" for the first page), and
// the cursor of the next page ("" after the last). A page goes on from
// the due time and message the last one ended at, so none is listed twice
// and none skipped, whatever falls due between pages; one that falls due
// before its page is read is not listed, nor one added before the
// position.
func (i *Inspector) Retrying(ctx context.Context, topic, group, cursor string, limit int) ([]RetryingMessage, string, error) {
	if err := i.checkGroupPage(topic, group, limit); err != nil {
		return nil, "", err
	}
	fail := func(err error) ([]RetryingMessage, string, error) {
		return nil, "", wrapErr(err, "list retrying messages of group %q in topic %q", group, topic)
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return fail(err)
	}
	part, from := 0, store.RetryCursor{}
	if cursor != "" {
		p, rest, ok := strings.Cut(cursor, ":")
		n, err := strconv.Atoi(p)
		if ok && err == nil {
			from, ok = store.ParseRetryCursor(rest)
		}
		if !ok || err != nil {
			return nil, "", fmt.Errorf("redisdelay: cursor %q is not one Retrying returned (\"<partition>:<score>:<member>\"): pass the previous page's cursor unchanged, or \"\" to start", cursor)
		}
		if n < 0 || n >= len(shards) {
			return nil, "", fmt.Errorf("redisdelay: cursor %q names partition %d, but topic %q has %d: pass the previous page's cursor unchanged, or \"\" to start", cursor, n, topic, len(shards))
		}
		part = n
	}
	var out []RetryingMessage
	for left := limit; part < len(shards); part, from = part+1, (store.RetryCursor{}) {
		rs, err := store.RetryEntriesAfter(ctx, i.client, shards[part], group, from, left)
		if err != nil {
			return fail(err)
		}
		for _, r := range rs {
			rm := RetryingMessage{ID: strconv.Itoa(part) + ":" + r.Member, Attempt: r.Attempt, Due: r.Due, cursor: strconv.Itoa(part) + ":" + r.Cursor.String()}
			if r.Body != nil {
				if msg, err := store.Decode(r.Body); err == nil {
					rm.Message = msg
				} else {
					rm.Body = r.Body
				}
			}
			out = append(out, rm)
		}
		if left -= len(rs); left == 0 {
			return out, out[len(out)-1].cursor, nil
		}
	}
	return out, "", nil
}

// Consumers lists a consumer group's consumers as Redis knows them, over
// the topic's partitions, by name: how many messages each holds, when it
// was last seen, and whether it is stuck with messages (Consumer.Stuck).
// A consumer that crashed stays listed, ever idler, until the schedulers
// remove it (ConsumerIdleTimeout, once it holds nothing).
func (i *Inspector) Consumers(ctx context.Context, topic, group string) ([]Consumer, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return nil, err
	}
	fail := func(err error) ([]Consumer, error) {
		return nil, wrapErr(err, "list consumers of group %q in topic %q", group, topic)
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return fail(err)
	}
	now, err := store.RedisTime(ctx, i.client)
	if err != nil {
		return fail(err)
	}
	var out []Consumer
	index := map[string]int{}
	for _, sh := range shards {
		cs, vis, err := store.Consumers(ctx, i.client, sh, group)
		if err != nil {
			return fail(err)
		}
		if vis <= 0 {
			vis = defaultVisibilityTimeout
		}
		for _, c := range cs {
			k, ok := index[c.Name]
			if !ok {
				k = len(out)
				index[c.Name] = k
				out = append(out, Consumer{Name: c.Name, Idle: c.Idle, inactive: -1})
			}
			o := &out[k]
			o.Pending += c.Pending
			o.Idle = min(o.Idle, c.Idle)
			// As Health's default limit (HealthConfig.groupLimits).
			if c.Pending > 0 && c.Silent >= 2*vis {
				o.Stuck = true
			}
			if c.Inactive >= 0 && (o.inactive < 0 || c.Inactive < o.inactive) {
				o.inactive = c.Inactive
			}
		}
	}
	for k := range out {
		o := &out[k]
		o.LastSeen = now.Add(-o.Idle)
		if o.inactive >= 0 {
			o.Active = now.Add(-o.inactive)
		}
	}
	sortConsumers(out)
	return out, nil
}

// sortConsumers orders consumers by name.
func sortConsumers(cs []Consumer) {
	slices.SortFunc(cs, func(a, b Consumer) int { return strings.Compare(a.Name, b.Name) })
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

// Pause stops the consumer group's subscribers, in every process, from
// fetching new messages of the topic, until Resume. Messages keep
// becoming due and accumulate (Ready in Stats grows); messages already
// fetched are still delivered, and so may be one batch of a read that
// was returning when Pause ran. The pause is stored in Redis: it
// outlasts subscriber restarts, and a group may be paused before it
// exists. Subscribers are told on a pub/sub channel and stop reading at
// once (a subscriber that missed it, e.g. reconnecting, checks at least
// once per BlockTime). Pausing a paused group is a no-op.
func (i *Inspector) Pause(ctx context.Context, topic, group string) error {
	if err := i.validateGroup(topic, group); err != nil {
		return err
	}
	err, notifyErr := store.Pause(ctx, i.client, i.keys.Shard(topic, 0), group)
	if err == nil {
		err = notified(notifyErr)
	}
	return wrapErr(err, "pause group %q of topic %q", group, topic)
}

// Resume lets a paused consumer group fetch messages of the topic again:
// its subscribers are told as by Pause and fetch at once (at the latest
// within their BlockTime). It reports whether the group was paused.
func (i *Inspector) Resume(ctx context.Context, topic, group string) (bool, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return false, err
	}
	was, err, notifyErr := store.Resume(ctx, i.client, i.keys.Shard(topic, 0), group)
	if err == nil {
		err = notified(notifyErr)
	}
	return was, wrapErr(err, "resume group %q of topic %q", group, topic)
}

// notified returns the error of the PUBLISH of Pause or Resume: the
// change holds without it, and subscribers see it within their BlockTime.
func notified(err error) error {
	if err != nil {
		return fmt.Errorf("the change is stored, but telling the subscribers failed (they see it within their BlockTime): %w", err)
	}
	return nil
}

// Paused reports whether the consumer group is paused on the topic.
func (i *Inspector) Paused(ctx context.Context, topic, group string) (bool, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return false, err
	}
	paused, err := store.Paused(ctx, i.client, i.keys.Shard(topic, 0), group)
	return paused, wrapErr(err, "check whether group %q of topic %q is paused", group, topic)
}

// The Inspector's methods for recurring schedules (recurring.go): list,
// remove, pause, resume and trigger them.

// Schedules lists the recurring schedules, by ID, with their next tick,
// whether they are paused, and the ticks their overlap policy skipped.
func (i *Inspector) Schedules(ctx context.Context) ([]Schedule, error) {
	defs, state, err := store.ScheduleDefs(ctx, i.client, i.keys)
	if err != nil {
		return nil, fmt.Errorf("redisdelay: list schedules: %w", err)
	}
	out := make([]Schedule, 0, len(defs))
	for id, js := range defs {
		var s Schedule
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			return nil, fmt.Errorf("redisdelay: schedule %q does not decode: %v; remove it with Inspector.RemoveSchedule", id, err)
		}
		st := state[id]
		s.ID, s.Next, s.Paused, s.Skipped, s.LastSkipped, s.LastTick = id, st.Next, st.Paused, st.Skipped, st.LastSkipped, st.LastTick
		if !s.Paused.IsZero() {
			s.Next = time.Time{}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Schedule) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// RemoveSchedule removes a schedule: no tick is published after it
// returns, except one already being published. It reports whether the
// schedule existed.
func (i *Inspector) RemoveSchedule(ctx context.Context, id string) (bool, error) {
	existed, err := store.RemoveSchedule(ctx, i.client, i.keys, id)
	if err != nil {
		return false, fmt.Errorf("redisdelay: remove schedule %q: %w", id, err)
	}
	return existed, nil
}

// PauseSchedule pauses a schedule: no tick is published from then on,
// except one already being published, until ResumeSchedule. It reports
// whether it was running; ErrUnknownSchedule when there is no such
// schedule. Registering it again (Publisher.Schedule, as every process
// does at start) keeps it paused.
func (i *Inspector) PauseSchedule(ctx context.Context, id string) (bool, error) {
	return i.recurringPause(ctx, "pause", id, true, time.Time{})
}

// ResumeSchedule resumes a paused schedule at its first tick after now:
// the ticks it missed while paused are not published. It reports whether
// it was paused; ErrUnknownSchedule when there is no such schedule.
func (i *Inspector) ResumeSchedule(ctx context.Context, id string) (bool, error) {
	s, err := i.schedule(ctx, "resume", id)
	if err != nil {
		return false, err
	}
	t, err := s.validate()
	if err != nil {
		return false, fmt.Errorf("redisdelay: resume schedule %q: %w", id, err)
	}
	now, err := store.RedisTime(ctx, i.client)
	if err != nil {
		return false, fmt.Errorf("redisdelay: resume schedule %q: %w", id, err)
	}
	next := t.next(now)
	if next.IsZero() {
		next = time.UnixMilli(maxScheduleMs)
	}
	return i.recurringPause(ctx, "resume", id, false, next)
}

func (i *Inspector) recurringPause(ctx context.Context, what, id string, pause bool, at time.Time) (bool, error) {
	n, err := store.RecurringPause(ctx, i.client, i.keys, id, pause, at)
	switch {
	case err != nil:
		return false, fmt.Errorf("redisdelay: %s schedule %q: %w", what, id, err)
	case n < 0:
		return false, fmt.Errorf("%w: %s schedule %q: see Inspector.Schedules", ErrUnknownSchedule, what, id)
	}
	return n == 1, nil
}

// TriggerSchedule publishes one tick of a schedule now, paused or not, as
// its tick loop would (same topic, payload and metadata; ScheduleTickKey
// is now, by Redis's clock), without changing its next tick.
// ErrUnknownSchedule when there is no such schedule.
func (i *Inspector) TriggerSchedule(ctx context.Context, id string) error {
	s, err := i.schedule(ctx, "trigger", id)
	if err != nil {
		return err
	}
	now, err := store.RedisTime(ctx, i.client)
	if err != nil {
		return fmt.Errorf("redisdelay: trigger schedule %q: %w", id, err)
	}
	return i.publishTicks(ctx, "trigger", s, now.Truncate(time.Millisecond))
}

// publishTicks publishes ticks of a schedule outside its tick loops (a
// trigger, an advance of the clock in a test), with the topic's stored
// partition count, and records the last as the schedule's last tick.
func (i *Inspector) publishTicks(ctx context.Context, what string, s Schedule, ticks ...time.Time) error {
	fail := func(err error) error { return fmt.Errorf("redisdelay: %s schedule %q: %w", what, s.ID, err) }
	if len(ticks) == 0 {
		return nil
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, s.Topic)
	if err != nil {
		return fail(err)
	}
	pub, err := NewPublisher(PublisherConfig{Client: i.client, KeyPrefix: i.keys.Prefix,
		TopicPartitions: map[string]int{s.Topic: parts[0]}}, nil)
	if err != nil {
		return fail(err)
	}
	defer pub.Close()
	for _, tick := range ticks {
		msg := tickMessage(i.keys.Prefix, &s, tick)
		msg.SetContext(ctx)
		if err := pub.Publish(s.Topic, msg); err != nil {
			return fail(err)
		}
	}
	if err := store.RecordTick(ctx, i.client, i.keys, s.ID, ticks[len(ticks)-1]); err != nil {
		return fail(err)
	}
	return nil
}

// schedule reads a stored schedule's definition for an action (what).
func (i *Inspector) schedule(ctx context.Context, what, id string) (Schedule, error) {
	js, ok, err := store.ScheduleDef(ctx, i.client, i.keys, id)
	if err != nil {
		return Schedule{}, fmt.Errorf("redisdelay: %s schedule %q: %w", what, id, err)
	}
	if !ok {
		return Schedule{}, fmt.Errorf("%w: %s schedule %q: see Inspector.Schedules", ErrUnknownSchedule, what, id)
	}
	var s Schedule
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		return Schedule{}, fmt.Errorf("redisdelay: %s schedule %q: it does not decode: %v; remove it with Inspector.RemoveSchedule", what, id, err)
	}
	s.ID = id
	return s, nil
}
