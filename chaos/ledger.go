package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// ledger is what the driver knows about each message, in compact arrays
// indexed by message number (about 26 bytes per message, nothing else grows
// with n): the publisher fills pubStart and delayUs; a single goroutine
// (poll) fills the rest from the consumers' event logs and the dead letters.
type ledger struct {
	n   int
	run string // the run's UUID prefix

	pubStart []int64  // unix ns when the first Publish attempt started
	delayUs  []uint32 // the message's delay, µs

	first   []int64 // earliest delivery, unix ns (0: never delivered)
	acks    []uint8 // ack lines, saturating
	dead    []uint8 // dead letters, saturating
	attempt []uint8 // highest attempt delivered

	// With a group concurrency cap (-groups and -group-concurrency), the
	// handler runs of each message's highest attempt, for the cap check
	// (see groupOverlaps; about 19 more bytes per message): how many runs
	// delivered that attempt (saturating), and the start, ack line and
	// event log of the last one read.
	topRuns []uint8
	topD    []int64  // unix ns of its D line
	topA    []int64  // unix ns of its A line (0: none read)
	topLog  []uint16 // index in files (saturating)

	// counters readable by other goroutines
	accounted  atomic.Int64 // messages acked or dead
	ackedN     atomic.Int64 // messages acked at least once
	deadN      atomic.Int64 // messages dead-lettered at least once
	deliveries atomic.Int64
	hangs      atomic.Int64

	mu    sync.Mutex
	files []*eventLog
	hung  map[string]time.Time // event log path → when its first hang was read

	// owned by poll
	deadAfter   string
	deadEntries int
	deadReasons map[string]int // "handler error", "not acknowledged", other...
	problems    []string       // malformed input: fails the run
}

type eventLog struct {
	path string
	idx  int // in ledger.files
	off  int64
	rest []byte // an incomplete last line
	// runs started and not yet acked (failed, hung or killed ones stay),
	// by message: attempt and start, to pair an A line with its D line.
	open map[int]openRun
}

type openRun struct {
	attempt int
	d       int64
}

// newLedger makes the ledger of n messages; track (a group concurrency cap
// is on) keeps what the cap check needs.
func newLedger(n int, run string, track bool) *ledger {
	l := &ledger{
		n: n, run: run,
		pubStart: make([]int64, n), delayUs: make([]uint32, n),
		first: make([]int64, n), acks: make([]uint8, n), dead: make([]uint8, n), attempt: make([]uint8, n),
		deadReasons: map[string]int{}, hung: map[string]time.Time{},
	}
	if track {
		l.topRuns, l.topD, l.topA, l.topLog = make([]uint8, n), make([]int64, n), make([]int64, n), make([]uint16, n)
	}
	return l
}

// hungSince reports when the ledger read the first hang in the event log
// at path.
func (l *ledger) hungSince(path string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.hung[path]
	return t, ok
}

// uuid encodes the message number: <run>-<12 hex digits>, a valid UUID.
func (l *ledger) uuid(i int) string {
	return fmt.Sprintf("%s-%012x", l.run, i)
}

// index decodes a message number; -1 when the UUID is not this run's.
func (l *ledger) index(uuid string) int {
	if len(uuid) != len(l.run)+13 || !strings.HasPrefix(uuid, l.run) || uuid[len(l.run)] != '-' {
		return -1
	}
	i, err := strconv.ParseInt(uuid[len(l.run)+1:], 16, 64)
	if err != nil || i < 0 || i >= int64(l.n) {
		return -1
	}
	return int(i)
}

func (l *ledger) addLog(path string) {
	l.mu.Lock()
	l.files = append(l.files, &eventLog{path: path, idx: len(l.files), open: map[int]openRun{}})
	l.mu.Unlock()
}

func (l *ledger) problem(format string, args ...any) {
	if len(l.problems) < 20 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// poll reads what is new in the event logs and the dead letters. Only one
// goroutine calls it.
func (l *ledger) poll(ctx context.Context, insp *redisdelay.Inspector, maxAttempts int) error {
	l.mu.Lock()
	files := append([]*eventLog(nil), l.files...)
	l.mu.Unlock()
	buf := make([]byte, 1<<20)
	for _, f := range files {
		if err := l.tailLog(f, buf); err != nil {
			return err
		}
	}
	return l.readDead(ctx, insp, maxAttempts)
}

func (l *ledger) tailLog(f *eventLog, buf []byte) error {
	fh, err := os.Open(f.path)
	if os.IsNotExist(err) {
		return nil // the consumer has not created it yet
	}
	if err != nil {
		return err
	}
	defer fh.Close()
	for {
		n, err := fh.ReadAt(buf, f.off)
		if n > 0 {
			f.off += int64(n)
			data := buf[:n]
			if len(f.rest) > 0 {
				data = append(f.rest, data...)
				f.rest = nil
			}
			end := bytes.LastIndexByte(data, '\n')
			if end < len(data)-1 {
				f.rest = append([]byte(nil), data[end+1:]...)
			}
			if end >= 0 {
				l.lines(data[:end+1], f)
			}
		}
		if err == io.EOF || n == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (l *ledger) lines(data []byte, log *eventLog) {
	path := log.path
	for len(data) > 0 {
		nl := bytes.IndexByte(data, '\n')
		line := string(data[:nl])
		data = data[nl+1:]
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		i := -1
		if len(f) >= 2 {
			i = l.index(f[1])
		}
		switch {
		case f[0] == "D" && len(f) == 4 && i >= 0:
			attempt, err1 := strconv.Atoi(f[2])
			t, err2 := strconv.ParseInt(f[3], 10, 64)
			if err1 != nil || err2 != nil || attempt < 1 {
				l.problem("%s: malformed line %q", path, line)
				continue
			}
			l.deliveries.Add(1)
			if l.first[i] == 0 || t < l.first[i] {
				l.first[i] = t
			}
			if l.topRuns != nil {
				log.open[i] = openRun{attempt: attempt, d: t}
				switch top := int(l.attempt[i]); {
				case attempt > top:
					l.topRuns[i] = 1
				case attempt == top:
					l.topRuns[i] = min(l.topRuns[i], 254) + 1
				}
				if attempt >= int(l.attempt[i]) {
					l.topD[i], l.topA[i], l.topLog[i] = t, 0, uint16(min(log.idx, 65535))
				}
			}
			if attempt > int(l.attempt[i]) {
				l.attempt[i] = uint8(min(attempt, 255))
			}
		case f[0] == "H" && len(f) == 2 && i >= 0:
			l.hangs.Add(1)
			l.mu.Lock()
			if _, ok := l.hung[path]; !ok {
				l.hung[path] = time.Now()
			}
			l.mu.Unlock()
		case f[0] == "A" && len(f) == 3 && i >= 0:
			t, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				l.problem("%s: malformed line %q", path, line)
				continue
			}
			if l.topRuns != nil {
				// The run this ack ends: the last one of this message
				// started in this process. If it is the last run read of
				// the message's highest attempt, that run is acked.
				if r, ok := log.open[i]; ok {
					delete(log.open, i)
					if r.attempt == int(l.attempt[i]) && r.d == l.topD[i] && int(l.topLog[i]) == min(log.idx, 65535) {
						l.topA[i] = t
					}
				}
			}
			if l.acks[i] == 0 {
				l.ackedN.Add(1)
				if l.dead[i] == 0 {
					l.accounted.Add(1)
				}
			}
			if l.acks[i] < 255 {
				l.acks[i]++
			}
		default:
			l.problem("%s: malformed line %q", path, line)
		}
	}
}

// readDead reads the dead letters added since the last call (dead-letter
// ids only grow; MaxDeadLetters is unbounded, so none are evicted).
func (l *ledger) readDead(ctx context.Context, insp *redisdelay.Inspector, maxAttempts int) error {
	for {
		page, err := insp.DeadLetters(ctx, topic, group, l.deadAfter, 1000)
		if err != nil {
			return err
		}
		for _, d := range page {
			l.deadAfter = d.ID
			l.deadEntries++
			if d.Message == nil {
				l.problem("dead letter %s cannot be decoded (%d bytes)", d.ID, len(d.Body))
				continue
			}
			i := l.index(d.Message.UUID)
			if i < 0 {
				l.problem("dead letter %s has an unknown UUID %q", d.ID, d.Message.UUID)
				continue
			}
			switch {
			case strings.HasPrefix(d.Reason, "chaos: handler failed"):
				l.deadReasons["handler error (RecordError)"]++
			case strings.HasPrefix(d.Reason, "not acknowledged within"):
				l.deadReasons["reclaimed from a dead consumer"]++
			case strings.HasPrefix(d.Reason, "handler timed out after"):
				l.deadReasons["hung on the last attempt (HandlerTimeout)"]++
			default:
				l.deadReasons["other"]++
				l.problem("dead letter %s (%s) has an unexpected reason %q", d.ID, d.Message.UUID, d.Reason)
			}
			if d.Attempts != maxAttempts {
				l.problem("dead letter %s (%s) after %d attempts, MaxAttempts is %d", d.ID, d.Message.UUID, d.Attempts, maxAttempts)
			}
			if l.dead[i] == 0 {
				l.deadN.Add(1)
				if l.acks[i] == 0 {
					l.accounted.Add(1)
				}
			}
			if l.dead[i] < 255 {
				l.dead[i]++
			}
		}
		if len(page) < 1000 {
			return nil
		}
	}
}

// results are the end-of-run figures; call after the publishers finished
// and the last poll.
type results struct {
	lost, early, duplicates, dead int
	overAttempts                  int
	maxLateNs                     int64
	lostIdx, earlyIdx             []int
}

func (l *ledger) results(maxAttempts int) results {
	var r results
	for i := 0; i < l.n; i++ {
		acks, dead := int(l.acks[i]), int(l.dead[i])
		if acks == 0 && dead == 0 {
			r.lost++
			if len(r.lostIdx) < 1000 {
				r.lostIdx = append(r.lostIdx, i)
			}
		}
		if dead > 0 {
			r.dead++
		}
		r.duplicates += max(acks-1, 0) + max(dead-1, 0)
		if acks > 0 && dead > 0 {
			r.duplicates++
		}
		if int(l.attempt[i]) > maxAttempts {
			r.overAttempts++
		}
		if l.first[i] == 0 {
			continue
		}
		// Same host, same clock (CLOCK_REALTIME) for the publisher, Redis and
		// the consumers. Redis rounds the due time up to the ms and the first
		// Publish attempt started before Redis read its clock, so any
		// delivery before pubStart + delay is early: no slack needed.
		due := l.pubStart[i] + int64(l.delayUs[i])*1000
		late := l.first[i] - due
		if late < 0 {
			r.early++
			if len(r.earlyIdx) < 20 {
				r.earlyIdx = append(r.earlyIdx, i)
			}
		}
		r.maxLateNs = max(r.maxLateNs, late)
	}
	return r
}

// capCheck is the result of groupOverlaps.
type capCheck struct {
	checked, excluded int      // messages whose last run was compared, or left out
	most              int      // the most checked runs of one group seen at once
	violations        int      // times a run started while capacity others of its group ran
	examples          []string // the first few, described
}

// groupOverlaps checks that no more than capacity handler runs of one
// group (message i's is group(i)) ran at once, from the D and A lines of
// the consumers' event logs. Call it after the last poll, with every
// message settled.
//
// The cap holds for the slots of the group in Redis: a message takes one
// when a subscription picks it and gives it back when it is acked, nacked,
// reclaimed, dead-lettered or handed back. A handler run is inside its
// message's slot only if nothing gave that slot back while the run went
// on, so only runs known to be so are compared: a message's run is
// checked when it is the only run of the message's highest attempt, it
// wrote its ack line, and the message is not a dead letter. Each way a
// slot is given back under a running (or later starting) handler leaves
// another run behind, so those messages are left out:
//
//   - a hung handler (or one past -handler-timeout): the timeout fails
//     the attempt, so a later attempt runs or the message is dead;
//   - a consumer SIGKILLed, or cut from Redis beyond two thirds of the
//     visibility timeout, whose messages were reclaimed: the same;
//   - a message handed back (SIGTERM, a slow handler): it is delivered
//     again with the same attempt, a second run of that attempt;
//   - two copies of one message (a repeated Publish): two runs.
//
// A checked run's D line is written after its pick and its A line before
// its ack reaches Redis, all on one clock, so two checked runs of a group
// overlapping means more than capacity slots were held at once: a library
// bug.
func (l *ledger) groupOverlaps(group func(i int) int, capacity int, t0 time.Time) capCheck {
	var c capCheck
	type run struct {
		g    int
		d, a int64
		i    int
	}
	var runs []run
	for i := 0; i < l.n; i++ {
		if l.topRuns[i] == 1 && l.topA[i] != 0 && l.dead[i] == 0 {
			runs = append(runs, run{g: group(i), d: l.topD[i], a: l.topA[i], i: i})
		} else {
			c.excluded++
		}
	}
	c.checked = len(runs)
	sort.Slice(runs, func(x, y int) bool {
		if runs[x].g != runs[y].g {
			return runs[x].g < runs[y].g
		}
		return runs[x].d < runs[y].d
	})
	at := func(ns int64) string { return "+" + time.Duration(ns-t0.UnixNano()).String() }
	describe := func(r run) string {
		log := "?"
		if k := int(l.topLog[r.i]); k < len(l.files) {
			log = filepath.Base(l.files[k].path)
		}
		return fmt.Sprintf("%s attempt %d in %s [%s .. %s]", l.uuid(r.i), l.attempt[r.i], log, at(r.d), at(r.a))
	}
	var active []run // runs of the current group not ended before the next start
	for k, r := range runs {
		if k == 0 || runs[k-1].g != r.g {
			active = active[:0]
		}
		kept := active[:0]
		for _, o := range active {
			if o.a > r.d {
				kept = append(kept, o)
			}
		}
		active = kept
		if len(active) >= capacity {
			c.violations++
			if len(c.examples) < 10 {
				var others []string
				for _, o := range active {
					others = append(others, describe(o))
				}
				c.examples = append(c.examples, fmt.Sprintf("group g%d: %s started while %d ran: %s",
					r.g, describe(r), len(active), strings.Join(others, "; ")))
			}
		}
		active = append(active, r)
		c.most = max(c.most, len(active))
	}
	return c
}
