package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// streams are the ready and redelivery streams of every partition.
func (d *driver) streams() []string {
	var out []string
	for part := range d.c.partitions {
		out = append(out, d.key(part, "stream"), d.key(part, "g:"+group+":redo"))
	}
	return out
}

// diagnose prints, for the messages not accounted for, where Redis holds
// them (waiting, ready stream, pending for which consumer, redelivery
// stream, retry set), what the event logs say about them, and the group's
// state: enough to tell a lost message from a stuck one.
func (d *driver) diagnose(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "chaos: diagnose: "+format+"\n", args...) }

	// The consumers the driver runs, to compare with the holders below: a
	// holder that is no slot's current incarnation is an orphan (or dead,
	// its lease not yet run out).
	var current []string
	for _, sl := range d.consumers {
		if p := sl.current(); p != nil {
			current = append(current, p.name)
		}
	}
	out("current consumer processes: %s", strings.Join(current, " "))
	if st, err := d.insp.Stats(ctx, topic); err == nil {
		out("stats: %+v", st)
	} else {
		out("stats: %v", err)
	}
	for _, s := range d.streams() {
		if cs, err := d.direct.XInfoConsumers(ctx, s, group).Result(); err == nil {
			var parts []string
			for _, c := range cs {
				if c.Pending > 0 {
					parts = append(parts, fmt.Sprintf("%s(pending=%d idle=%s)", c.Name, c.Pending, c.Idle))
				}
			}
			out("%s: %d consumers; holding messages: %s", s, len(cs), strings.Join(parts, " "))
		}
	}

	// The messages to find: unaccounted ones, or (every message accounted
	// for but Redis not empty) whatever Redis holds.
	var idx []int
	for i := 0; i < d.c.n && len(idx) < 1000; i++ {
		if d.l.acks[i] == 0 && d.l.dead[i] == 0 {
			idx = append(idx, i)
		}
	}
	want := map[string]int{}
	for _, i := range idx {
		want[d.l.uuid(i)] = i
	}
	all := len(want) == 0
	where := map[string][]string{}
	note := func(uuid, place string) {
		if _, ok := want[uuid]; (all && len(where) < 2000) || ok {
			where[uuid] = append(where[uuid], place)
		}
	}

	// waiting sets and bodies
	for part := range d.c.partitions {
		if ws, err := d.direct.ZRangeWithScores(ctx, d.key(part, "waiting"), 0, 100000).Result(); err == nil {
			for _, z := range ws {
				id, _ := z.Member.(string)
				note(id, fmt.Sprintf("waiting(due %s, partition %d)", dueOf(z.Score), part))
			}
		}
	}
	// bodies without a waiting entry (a delayed message dropped half-way)
	if !all {
		pipe := d.direct.Pipeline()
		exists := map[string]*redis.BoolCmd{}
		for uuid := range want {
			for part := range d.c.partitions {
				exists[uuid+" "+strconv.Itoa(part)] = pipe.HExists(ctx, d.key(part, "bodies"), uuid)
			}
		}
		_, _ = pipe.Exec(ctx)
		for k, e := range exists {
			if e.Val() {
				uuid, part, _ := strings.Cut(k, " ")
				note(uuid, "bodies (a stored body, in the bodies hash of partition "+part+")")
			}
		}
	}
	// pending entries of both streams
	pend := map[string]string{}
	for _, s := range d.streams() {
		start := "-"
		for {
			ps, err := d.direct.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s, Group: group, Start: start, End: "+", Count: 1000}).Result()
			if err != nil || len(ps) == 0 {
				break
			}
			for _, p := range ps {
				pend[s+" "+p.ID] = fmt.Sprintf("pending for %s, idle %s, delivered %d time(s)", p.Consumer, p.Idle.Round(time.Millisecond), p.RetryCount)
			}
			start = "(" + ps[len(ps)-1].ID
		}
	}
	// the streams' entries (bounded scan)
	for _, s := range d.streams() {
		start, scanned := "-", 0
		for scanned < 2_000_000 {
			es, err := d.direct.XRangeN(ctx, s, start, "+", 1000).Result()
			if err != nil || len(es) == 0 {
				break
			}
			for _, e := range es {
				body, _ := e.Values["m"].(string)
				place := s[strings.LastIndexByte(s, ':')+1:] + " " + e.ID
				if a, ok := e.Values["a"].(string); ok {
					place += " attempt " + a
				}
				if p, ok := pend[s+" "+e.ID]; ok {
					place += " " + p
				} else if all {
					continue // an entry read and acked, waiting for the trim
				}
				note(uuidOf(body), place)
			}
			scanned += len(es)
			start = "(" + es[len(es)-1].ID
		}
	}
	// the far tier's buckets (see internal/store/far.go): due score (8 bytes) + body each
	for part := range d.c.partitions {
		buckets, _ := d.direct.ZRange(ctx, d.key(part, "far"), 0, -1).Result()
		for _, b := range buckets {
			els, _ := d.direct.LRange(ctx, d.key(part, "fb:"+b), 0, -1).Result()
			for _, e := range els {
				if len(e) > 8 {
					note(uuidOf(e[8:]), fmt.Sprintf("far bucket %s (partition %d)", b, part))
				}
			}
		}
	}
	// retry sets and their bodies
	for part := range d.c.partitions {
		if rs, err := d.direct.ZRangeWithScores(ctx, d.key(part, "g:"+group+":retry"), 0, 100000).Result(); err == nil {
			for _, z := range rs {
				member, _ := z.Member.(string)
				body, _ := d.direct.HGet(ctx, d.key(part, "g:"+group+":rbody"), member).Result()
				note(uuidOf(body), fmt.Sprintf("retry %s (due %s, partition %d)", member, dueOf(z.Score), part))
			}
		}
	}

	// the consumer group's fair queues: group states and queued messages
	if d.c.groups > 0 {
		d.diagnoseGroups(ctx, out, note)
	}

	if all {
		out("every message is acked or dead-lettered; what Redis still holds:")
	} else {
		out("%d message(s) unaccounted for (showing up to 20):", len(want))
	}
	counts := map[string]int{}
	var keys []string
	for uuid := range where {
		keys = append(keys, uuid)
	}
	if !all {
		for uuid := range want {
			if where[uuid] == nil {
				keys = append(keys, uuid)
			}
		}
	}
	sort.Strings(keys)
	for n, uuid := range keys {
		places := where[uuid]
		kind := "nowhere in Redis"
		if len(places) > 0 {
			kind = strings.Fields(places[0])[0]
		}
		counts[kind]++
		if n >= 20 {
			continue
		}
		i := d.l.index(uuid)
		hist := "not this run's UUID"
		if i >= 0 {
			hist = fmt.Sprintf("published at +%s with delay %s; ", time.Duration(d.l.pubStart[i]-d.start.UnixNano()).Round(time.Millisecond),
				time.Duration(d.l.delayUs[i])*time.Microsecond)
			if d.l.first[i] == 0 {
				hist += "never delivered"
			} else {
				hist += fmt.Sprintf("first delivered at +%s, highest attempt %d, acks %d, dead %d",
					time.Duration(d.l.first[i]-d.start.UnixNano()).Round(time.Millisecond), d.l.attempt[i], d.l.acks[i], d.l.dead[i])
			}
		}
		if len(places) == 0 {
			places = []string{"nowhere in Redis"}
		}
		out("  %s: %s; in Redis: %s", uuid, hist, strings.Join(places, "; "))
	}
	out("by place: %v", counts)
}

// uuidOf reads the UUID of a stored message: version byte, then (1, 2)
// uvarint length and UUID, or (3) the UUID's 16 bytes (see internal/store/codec.go).
func uuidOf(body string) string {
	b := []byte(body)
	if len(b) >= 17 && b[0] == 3 {
		return fmt.Sprintf("%x-%x-%x-%x-%x", b[1:5], b[5:7], b[7:9], b[9:11], b[11:17])
	}
	if len(b) < 2 || (b[0] != 1 && b[0] != 2) {
		return "?"
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || uint64(len(b)-1-k) < n {
		return "?"
	}
	return string(b[1+k : 1+k+int(n)])
}

// dueOf turns a waiting or retry score (due ms × 1024 + sequence) into a
// time relative to now.
func dueOf(score float64) string {
	due := time.UnixMilli(int64(score) / 1024)
	return "in " + time.Until(due).Round(time.Millisecond).String()
}
