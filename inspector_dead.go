// The Inspector's dead letters: listing, requeueing, deleting.

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

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

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
