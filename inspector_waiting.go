// The Inspector's view of waiting messages: listing, finding, cancelling
// and rescheduling one (searches and bulk actions: inspector_search.go,
// inspector_bulk.go).

package redisdelay

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

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
