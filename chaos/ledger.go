package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
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
	off  int64
	rest []byte // an incomplete last line
}

func newLedger(n int, run string) *ledger {
	return &ledger{
		n: n, run: run,
		pubStart: make([]int64, n), delayUs: make([]uint32, n),
		first: make([]int64, n), acks: make([]uint8, n), dead: make([]uint8, n), attempt: make([]uint8, n),
		deadReasons: map[string]int{}, hung: map[string]time.Time{},
	}
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
	l.files = append(l.files, &eventLog{path: path})
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
				l.lines(data[:end+1], f.path)
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

func (l *ledger) lines(data []byte, path string) {
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
		case f[0] == "A" && len(f) == 2 && i >= 0:
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
