package redisdelay

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// Lookups for the operator dashboard (package dashboard): one waiting
// message by UUID or business key, and how many fall due when, without
// reading the whole waiting set of a large topic.

var findScript = loadScript("find", false)

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
	if err := validateTopic(topic); err != nil {
		return WaitingMessage{}, false, err
	}
	if value == "" {
		what := map[string]string{"uuid": "message UUID", "key": "business key"}[by]
		return WaitingMessage{}, false, fmt.Errorf("%w: find in topic %q: the %s is empty", ErrInvalidMessage, topic, what)
	}
	fail := func(err error) (WaitingMessage, bool, error) {
		return WaitingMessage{}, false, wrap(err, "find %s in topic %q", recallWhat(by, value), topic)
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	if err != nil {
		return fail(err)
	}
	home := partitionOf(value, parts[0])
	for n := range parts[0] {
		sh := i.keys.shard(topic, (home+n)%parts[0])
		res, err := findScript.Run(ctx, i.client, []string{sh.waiting(), sh.bodies(), sh.bkeys()}, by, value).StringSlice()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return fail(err)
		}
		if len(res) != 3 {
			return fail(fmt.Errorf("find script answered %d values, want 3", len(res)))
		}
		score, err := strconv.ParseFloat(res[1], 64)
		if err != nil {
			return fail(fmt.Errorf("due score %q: %w", res[1], err))
		}
		w := WaitingMessage{Due: time.UnixMilli(int64(score) / 1024)}
		if w.Message, err = decodeMessage([]byte(res[2])); err != nil {
			w.Message, w.Corrupt = message.NewMessage(res[0], nil), err.Error()
		}
		return w, true, nil
	}
	return WaitingMessage{}, false, nil
}

// maxHistogramEdges bounds DueHistogram's buckets: one ZCOUNT per bucket
// and partition.
const maxHistogramEdges = 100

// DueHistogram counts a topic's waiting messages by due time: with edges
// e0 < e1 < ... < en, it returns n+2 counts, of the messages due before e0
// (overdue, when e0 is now), in [e0, e1), ..., in [en-1, en), and at en or
// later. It counts on the server (ZCOUNT), so it costs the same with 100
// or a million waiting messages. At most 100 edges.
func (i *Inspector) DueHistogram(ctx context.Context, topic string, edges []time.Time) ([]int64, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	if len(edges) == 0 || len(edges) > maxHistogramEdges {
		return nil, fmt.Errorf("redisdelay: DueHistogram got %d edges: give 1 to %d", len(edges), maxHistogramEdges)
	}
	bounds := make([]string, len(edges))
	for n, e := range edges {
		if n > 0 && !e.After(edges[n-1]) {
			return nil, fmt.Errorf("redisdelay: DueHistogram edge %d (%s) is not after edge %d (%s): give increasing times",
				n, e.Format(time.RFC3339Nano), n-1, edges[n-1].Format(time.RFC3339Nano))
		}
		// A message due at ms m scores m*1024 plus a tie-break below 1024.
		bounds[n] = strconv.FormatInt(e.UnixMilli()*1024, 10)
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return nil, wrap(err, "due histogram of topic %q", topic)
	}
	pipe := i.client.Pipeline()
	var cmds []*redis.IntCmd
	for _, sh := range shards {
		lo := "-inf"
		for _, b := range bounds {
			cmds = append(cmds, pipe.ZCount(ctx, sh.waiting(), lo, "("+b))
			lo = b
		}
		cmds = append(cmds, pipe.ZCount(ctx, sh.waiting(), lo, "+inf"))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, wrap(err, "due histogram of topic %q", topic)
	}
	out := make([]int64, len(edges)+1)
	for n, c := range cmds {
		out[n%len(out)] += c.Val()
	}
	return out, nil
}
