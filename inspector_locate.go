// The Inspector's one answer to "where is this message?": Locate and
// LocateKey look in every state a message can be in.

package redisdelay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// MessageState names where a message stands (see docs/concepts.md).
type MessageState string

// The states Locate reports.
const (
	// StateWaiting: delayed, not due yet (or due, and a scheduler has not
	// moved it yet). Not yet copied to any consumer group.
	StateWaiting MessageState = "waiting"
	// StateWaitingForGroup: a grouped message (SetGroup) that fell due
	// while the topic had no consumer group; it goes to the first one.
	StateWaitingForGroup MessageState = "waiting_for_group"
	// StateReady: in a stream, not yet fetched by a consumer of the group.
	StateReady MessageState = "ready"
	// StateGrouped: a grouped message queued in its group's fair queue,
	// waiting for its group's turn (per-group concurrency or rate limit).
	StateGrouped MessageState = "grouped"
	// StatePending: fetched by a consumer of the group, not settled yet.
	StatePending MessageState = "pending"
	// StateRetrying: nacked (or reclaimed) and waiting for its retry delay.
	StateRetrying MessageState = "retrying"
	// StateDead: a dead letter of the group.
	StateDead MessageState = "dead"
	// StateAcknowledged: done for the group; the entry stays in the ready
	// stream until every group has acknowledged it and a scheduler trims.
	StateAcknowledged MessageState = "acknowledged"
)

// Location is one place a message was found. A message is copied to each
// consumer group when it falls due, so it may be in several places: one
// per group once due.
type Location struct {
	State MessageState
	// Group is the consumer group; "" while waiting (StateWaiting,
	// StateWaitingForGroup).
	Group string
	// Partition is the partition of the topic holding it.
	Partition int
	// ID names it as the listing of its state does: GroupMessage.ID (ready,
	// pending, acknowledged), RetryingMessage.ID, DeadLetter.ID; "" for the
	// other states.
	ID string
	// Message is the stored message; nil when it could not be decoded
	// (Body then holds the stored bytes and Corrupt says why).
	Message *message.Message
	Body    []byte
	Corrupt string
	// Far is true for a waiting message kept in the far tier (due more
	// than about two minutes ahead).
	Far bool
	// Due is when a waiting or retrying message moves on.
	Due time.Time
	// Attempt is the delivery attempt it is or will be, from 1; for a dead
	// letter, the attempts it had.
	Attempt int
	// MessageGroup is a grouped message's group (SetGroup), "" for none.
	MessageGroup string
	// Consumer holds a pending message since Renewed (its fetch or last
	// lease renewal, by Redis's clock); LeaseExpires is when a scheduler
	// reclaims it if it is not renewed (zero: no visibility timeout
	// stored); Deliveries counts Redis's deliveries of the entry.
	Consumer     string
	Renewed      time.Time
	LeaseExpires time.Time
	Deliveries   int64
	// Handler says whether a handler has a pending message or it waits
	// in its consumer's batch, and HandedAt since when a handler has it
	// (see PendingMessage).
	Handler  HandlerState
	HandedAt time.Time
	// Reason says why: for a retrying message, the handler's error when
	// the RecordError middleware recorded it (ErrorKey); for a dead letter,
	// DeadLetter.Reason.
	Reason string
	// Died is when a dead letter died.
	Died time.Time
	// Paused is true when Group is paused (Inspector.Pause): nothing of it
	// is delivered until it is resumed.
	Paused bool
	// Next says, in a sentence, what happens next to the message.
	Next string
}

// LocateResult is what Locate found, and what it could not read.
type LocateResult struct {
	Topic string
	// Locations are where the message is, waiting first, then by group
	// and the order of the states above.
	Locations []Location
	// Read counts the stored entries read.
	Read int64
	// Unsearched says what the scan budget left unread (one line per
	// structure), so a message absent from Locations may still be there;
	// empty when everything was read.
	Unsearched []string
}

// LocateScan is the scan budget of Locate: the most entries it reads of
// each structure that has no index by UUID (see Locate).
const LocateScan = 10000

// locateBudget is LocateScan; tests lower it.
var locateBudget = LocateScan

// Locate finds the message with this UUID in every state, and says what
// happens next to it. Waiting messages (near or far, or grouped ones due
// while the topic had no group) are found by index, in a few round trips.
// The other states have no index by UUID, so Locate reads, per partition:
// the ready stream's oldest LocateScan entries and, when it holds more,
// its newest LocateScan too; and per consumer group: the same of the
// group's redelivery stream, up to LocateScan pending entries of each
// stream (wherever they sit), LocateScan of its retry set, of its queued
// grouped messages and of its dead letters (oldest and newest). Each
// read is a page of 500; a UUID is compared without decoding the message.
// So a lookup reads at most about (2 + 8×groups)×LocateScan entries per
// partition, a few MB per structure for messages of a few hundred bytes,
// however large the backlog; LocateResult.Unsearched says what a budget
// left unread. Acknowledged messages leave no trace once trimmed from the
// ready stream.
func (i *Inspector) Locate(ctx context.Context, topic, messageUUID string) (LocateResult, error) {
	return i.LocateWith(ctx, topic, LocateQuery{UUID: messageUUID})
}

// LocateKey is Locate for the message holding businessKey (see
// BusinessKey): found by index while waiting; in the other states, by
// decoding each message read, within the same budget. A grouped message
// waiting for the topic's first consumer group is found by UUID only.
func (i *Inspector) LocateKey(ctx context.Context, topic, businessKey string) (LocateResult, error) {
	return i.LocateWith(ctx, topic, LocateQuery{BusinessKey: businessKey})
}

// LocateQuery is what LocateWith looks for: the message with UUID, or the
// one holding BusinessKey (give one), reading at most Scan entries of each
// structure without an index (0: LocateScan).
type LocateQuery struct {
	UUID, BusinessKey string
	Scan              int
}

// LocateWith is Locate or LocateKey with a scan budget of its own: lower
// it to answer faster on a loaded server, raise it to read a long backlog
// whole.
func (i *Inspector) LocateWith(ctx context.Context, topic string, q LocateQuery) (LocateResult, error) {
	res := LocateResult{Topic: topic}
	by, value := "uuid", q.UUID
	switch {
	case q.UUID != "" && q.BusinessKey != "":
		return res, fmt.Errorf("%w: locate in topic %q: give a UUID or a business key, not both", ErrInvalidMessage, topic)
	case q.BusinessKey != "":
		by, value = "key", q.BusinessKey
	}
	if q.Scan < 0 {
		return res, fmt.Errorf("redisdelay: locate in topic %q: scan budget %d: give 0 (the default, %d) or more", topic, q.Scan, LocateScan)
	}
	budget := q.Scan
	if budget == 0 {
		budget = locateBudget
	}
	if err := checkLookup("locate", topic, by, value); err != nil {
		return res, err
	}
	fail := func(err error) (LocateResult, error) {
		return res, wrap(err, "locate %s in topic %q", recallWhat(by, value), topic)
	}
	match := store.MatchUUID(value)
	if by == "key" {
		match = func(body []byte) bool {
			msg, err := store.Decode(body)
			return err == nil && msg.Metadata.Get(BusinessKey) == value
		}
	}
	now, err := store.RedisTime(ctx, i.client)
	if err != nil {
		return fail(err)
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return fail(err)
	}
	w, place, found, err := i.findWhere(ctx, topic, by, value)
	if err != nil {
		return res, err
	}
	if found {
		l := Location{State: StateWaiting, Message: w.Message, Corrupt: w.Corrupt, Due: w.Due, Attempt: 1, Far: place.far}
		l.Partition = slices.Index(shards, place.shard)
		res.Locations = append(res.Locations, l)
	}
	loc := &locator{i: i, ctx: ctx, match: match, now: now, res: &res, budget: budget}
	for part, sh := range shards {
		if err := loc.partition(part, sh, by, value); err != nil {
			return fail(err)
		}
	}
	if len(shards) > 0 && len(res.Locations) > 0 {
		if err := loc.paused(i.keys.Shard(topic, 0)); err != nil {
			return fail(err)
		}
	}
	res.Locations = settledElsewhere(res.Locations)
	slices.SortStableFunc(res.Locations, func(a, b Location) int {
		if c := strings.Compare(a.Group, b.Group); c != 0 {
			return c // "" (waiting) first
		}
		return cmp.Compare(stateRank[a.State], stateRank[b.State])
	})
	for n := range res.Locations {
		res.Locations[n].Next = nextOf(res.Locations[n], now)
	}
	return res, nil
}

// locator gathers what Locate finds, partition by partition.
type locator struct {
	i     *Inspector
	ctx   context.Context
	match store.Match
	now   time.Time
	res   *LocateResult
	// budget is the scan budget: entries read of each structure at most.
	budget int
}

// scanned counts a structure's scan and notes what its budget left unread.
func (l *locator) scanned(sc store.Scanned, what string) {
	l.res.Read += sc.Read
	if sc.Unread > 0 {
		l.res.Unsearched = append(l.res.Unsearched, fmt.Sprintf("%s: %d entries not read (scan budget %d)", what, sc.Unread, l.budget))
	}
}

// add appends a location, decoding its body.
func (l *locator) add(loc Location, body []byte) {
	if body != nil {
		if msg, err := store.Decode(body); err == nil {
			loc.Message = msg
			if loc.Reason == "" && loc.State == StateRetrying {
				loc.Reason = msg.Metadata.Get(ErrorKey)
			}
		} else {
			loc.Body, loc.Corrupt = body, err.Error()
		}
	}
	l.res.Locations = append(l.res.Locations, loc)
}

func (l *locator) partition(part int, sh store.Shard, by, value string) error {
	c := l.i.client
	if by == "uuid" {
		score, body, ok, err := store.Orphan(l.ctx, c, sh, value)
		if err != nil {
			return err
		}
		if ok {
			l.add(Location{State: StateWaitingForGroup, Partition: part, Due: store.DueOf(score), Attempt: 1}, body)
		}
	}
	groups, err := store.Groups(l.ctx, c, sh)
	if err != nil {
		return err
	}
	slices.Sort(groups)
	// The ready stream, shared by the groups: read once.
	hits, sc, err := store.ScanStream(l.ctx, c, sh.Stream(), l.match, l.budget)
	if err != nil {
		return err
	}
	l.scanned(sc, fmt.Sprintf("partition %d's ready stream", part))
	if err := l.streamHits(part, sh, groups, "m", hits); err != nil {
		return err
	}
	for _, g := range groups {
		if err := l.group(part, sh, g); err != nil {
			return err
		}
	}
	return nil
}

// group looks in one consumer group's own structures of a partition.
func (l *locator) group(part int, sh store.Shard, g string) error {
	c, ctx := l.i.client, l.ctx
	where := func(what string) string { return fmt.Sprintf("group %q's %s in partition %d", g, what, part) }
	hits, sc, err := store.ScanStream(ctx, c, sh.Redelivery(g), l.match, l.budget)
	if err != nil {
		return err
	}
	l.scanned(sc, where("redelivery stream"))
	if err := l.streamHits(part, sh, []string{g}, "r", hits); err != nil {
		return err
	}
	// Pending entries anywhere in the streams (the ends read above may not
	// reach them), unless found already.
	for _, which := range []string{"r", "m"} {
		ps, sc, err := store.ScanPending(ctx, c, sh, g, which, l.match, l.budget)
		if err != nil {
			return err
		}
		l.scanned(sc, where("pending entries"))
		for _, p := range ps {
			id := streamCursor{part, which, p.ID}.String()
			if l.has(g, id) {
				continue
			}
			loc, err := l.pending(part, sh, g, id, p)
			if err != nil {
				return err
			}
			l.add(loc, p.Body)
		}
	}
	rs, sc, err := store.ScanRetry(ctx, c, sh, g, l.match, l.budget)
	if err != nil {
		return err
	}
	l.scanned(sc, where("retry set"))
	for _, r := range rs {
		l.add(Location{State: StateRetrying, Group: g, Partition: part, ID: strconv.Itoa(part) + ":" + r.Member, Due: r.Due, Attempt: r.Attempt}, r.Body)
	}
	fs, sc, err := store.ScanFair(ctx, c, sh, g, l.match, l.budget)
	if err != nil {
		return err
	}
	l.scanned(sc, where("queued grouped messages"))
	for _, f := range fs {
		l.add(Location{State: StateGrouped, Group: g, Partition: part, Attempt: f.Attempt, MessageGroup: f.Group}, f.Body)
	}
	ds, sc, err := store.ScanStream(ctx, c, sh.Dead(g), l.match, l.budget)
	if err != nil {
		return err
	}
	l.scanned(sc, where("dead letters"))
	for _, m := range ds {
		d := store.DeadEntryOf(m)
		l.add(Location{State: StateDead, Group: g, Partition: part, ID: deadID{part, d.ID}.String(), Attempt: d.Attempts,
			Reason: d.Reason, Died: d.Time}, d.Body)
	}
	return nil
}

// has reports whether the entry id of group g was located already.
func (l *locator) has(g, id string) bool {
	for _, loc := range l.res.Locations {
		if loc.Group == g && loc.ID == id {
			return true
		}
	}
	return false
}

// streamHits places the matching entries of a stream (which: "m", the
// ready stream, or "r", a group's redelivery stream) for each group
// reading it: ready past the group's last fetched entry, else pending, or
// acknowledged.
func (l *locator) streamHits(part int, sh store.Shard, groups []string, which string, hits []redis.XMessage) error {
	if len(hits) == 0 {
		return nil
	}
	for _, g := range groups {
		key := sh.StreamOf(g, which)
		last, err := store.LastDelivered(l.ctx, l.i.client, key)
		if err != nil {
			return err
		}
		for _, h := range hits {
			e := store.EntryOf(h)
			id := streamCursor{part, which, e.ID}.String()
			base := Location{Group: g, Partition: part, ID: id, Attempt: e.Attempt, MessageGroup: e.Group}
			lastID, created := last[g]
			if !created || store.After(e.ID, lastID) {
				base.State = StateReady
				l.add(base, e.Body)
				continue
			}
			p, ok, err := store.PendingOf(l.ctx, l.i.client, sh, g, which, e.ID)
			if err != nil {
				return err
			}
			if !ok {
				base.State = StateAcknowledged
				l.add(base, e.Body)
				continue
			}
			p.StreamEntry = e
			loc, err := l.pending(part, sh, g, id, p)
			if err != nil {
				return err
			}
			l.add(loc, e.Body)
		}
	}
	return nil
}

// pending makes the location of a pending entry, with its lease.
func (l *locator) pending(part int, sh store.Shard, g, id string, p store.PendingEntry) (Location, error) {
	loc := Location{State: StatePending, Group: g, Partition: part, ID: id, Attempt: p.Attempt, MessageGroup: p.Group,
		Consumer: p.Consumer, Renewed: l.now.Add(-p.Idle), Deliveries: p.Deliveries}
	loc.Handler, loc.HandedAt = handlerOf(p)
	pol, err := store.ReadGroupPolicy(l.ctx, l.i.client, sh, g)
	if err != nil {
		return loc, err
	}
	if pol.Visibility > 0 {
		loc.LeaseExpires = loc.Renewed.Add(pol.Visibility)
	}
	return loc, nil
}

// paused marks the locations of paused groups (the pause is kept on
// partition 0).
func (l *locator) paused(sh0 store.Shard) error {
	var groups []string
	for _, loc := range l.res.Locations {
		if loc.Group != "" && !slices.Contains(groups, loc.Group) {
			groups = append(groups, loc.Group)
		}
	}
	if len(groups) == 0 {
		return nil
	}
	ps, err := store.PausedGroups(l.ctx, l.i.client, sh0, groups)
	if err != nil {
		return err
	}
	for n := range l.res.Locations {
		if k := slices.Index(groups, l.res.Locations[n].Group); k >= 0 {
			l.res.Locations[n].Paused = ps[k]
		}
	}
	return nil
}

// stateRank orders a group's locations as the states are listed above.
var stateRank = map[MessageState]int{StateWaiting: 0, StateWaitingForGroup: 1, StateReady: 2, StateGrouped: 3,
	StatePending: 4, StateRetrying: 5, StateDead: 6, StateAcknowledged: 7}

// settledElsewhere drops an acknowledged ready-stream entry of a group
// that holds the message elsewhere: a nack or a reclaim acknowledges the
// entry and queues the message again (retrying, a redelivery, a dead
// letter), which is where it is.
func settledElsewhere(ls []Location) []Location {
	return slices.DeleteFunc(ls, func(a Location) bool {
		if a.State != StateAcknowledged {
			return false
		}
		return slices.ContainsFunc(ls, func(b Location) bool { return b.Group == a.Group && b.State != StateAcknowledged })
	})
}

// nextOf says what happens next to a located message.
func nextOf(l Location, now time.Time) string {
	when := func(t time.Time) string {
		d := t.Sub(now).Round(time.Second)
		if d <= 0 {
			return fmt.Sprintf("at %s (due %s ago)", t.UTC().Format(time.RFC3339), (-d).String())
		}
		return fmt.Sprintf("at %s (in %s)", t.UTC().Format(time.RFC3339), d)
	}
	paused := ""
	if l.Paused {
		paused = fmt.Sprintf(" Group %q is paused: nothing of it is delivered until it is resumed (redisdelay resume).", l.Group)
	}
	switch l.State {
	case StateWaiting:
		s := "A scheduler copies it to each consumer group's ready queue " + when(l.Due) + "."
		if !l.Due.After(now) {
			s = "It is due: a running scheduler copies it to each consumer group within milliseconds; if it stays, no scheduler runs for the topic (redisdelay stats)."
		}
		if l.Far {
			s += " Until then it is kept in the far tier, which a scheduler unpacks about a minute before it is due."
		}
		return s
	case StateWaitingForGroup:
		return "The topic has no consumer group: it goes to the first group a subscriber creates."
	case StateReady:
		return fmt.Sprintf("The next consumer of group %q to read gets it, as attempt %d.%s", l.Group, l.Attempt, paused)
	case StateGrouped:
		return fmt.Sprintf("Queued in group %q: delivered to group %q when that group's turn comes (its concurrency and rate limits), as attempt %d.%s",
			l.MessageGroup, l.Group, l.Attempt, paused)
	case StatePending:
		var holds string
		switch l.Handler {
		case HandlerRunning:
			holds = fmt.Sprintf("Consumer %q's handler has it since %s (attempt %d).", l.Consumer, l.HandedAt.UTC().Format(time.RFC3339), l.Attempt)
		case HandlerBuffered:
			holds = fmt.Sprintf("Consumer %q fetched it (attempt %d); it waits there behind the message being handled.", l.Consumer, l.Attempt)
		default:
			holds = fmt.Sprintf("Consumer %q holds it (attempt %d).", l.Consumer, l.Attempt)
		}
		s := holds + fmt.Sprintf(" Ack ends it for group %q; a Nack retries it or, past the attempts allowed, makes it a dead letter.", l.Group)
		if !l.LeaseExpires.IsZero() {
			if l.LeaseExpires.After(now) {
				s += " If the consumer stops renewing its lease, a scheduler reclaims it " + when(l.LeaseExpires) + " or later."
			} else {
				s += " Its lease expired " + when(l.LeaseExpires)[3:] + ": a running scheduler reclaims it as a new attempt (none runs? see redisdelay health)."
			}
		}
		return s
	case StateRetrying:
		return fmt.Sprintf("Requeued for group %q as attempt %d %s.%s", l.Group, l.Attempt, when(l.Due), paused)
	case StateDead:
		return fmt.Sprintf("Nothing: it stays a dead letter of group %q until requeued (redisdelay requeue) or deleted.", l.Group)
	case StateAcknowledged:
		return fmt.Sprintf("Nothing more from this entry: group %q acknowledged it (handled, or settled into a retry or a dead letter: "+
			"look there if they are not listed). The entry is trimmed once every group has acknowledged it.", l.Group)
	}
	return ""
}
