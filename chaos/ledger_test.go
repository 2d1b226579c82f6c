package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLedger_GroupOverlaps feeds event lines of two consumer processes to a ledger
// and checks which runs the group cap check compares and what it reports.
// An event "1: D 2 1 @11" is process 1's line "D <uuid of message 2> 1
// <t0 + 11ms>". Message i is in group i%2: g0 holds 0, 2, 4; g1 1, 3, 5.
func TestLedger_GroupOverlaps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name              string
		events            []string
		dead              []int
		capacity          int
		checked, exceeded int
		example           string
	}{{
		name: "one at a time",
		events: []string{
			"0: D 0 1 @10", "0: A 0 @11",
			"1: D 2 1 @12", "1: A 2 @13",
			"0: D 4 1 @14", "0: A 4 @15",
		},
		capacity: 1, checked: 3,
	}, {
		name:     "two of one group at once",
		events:   []string{"0: D 0 1 @10", "1: D 2 1 @11", "1: A 2 @12", "0: A 0 @13"},
		capacity: 1, checked: 2, exceeded: 1,
		example: "group g0: R-000000000002 attempt 1 in c1-1.events [+11ms .. +12ms] started while 1 ran: " +
			"R-000000000000 attempt 1 in c0-1.events [+10ms .. +13ms]",
	}, {
		name:     "other groups at once",
		events:   []string{"0: D 0 1 @10", "1: D 1 1 @11", "1: A 1 @12", "0: A 0 @13"},
		capacity: 1, checked: 2,
	}, {
		name: "two allowed, three at once",
		events: []string{
			"0: D 0 1 @10", "1: D 2 1 @11", "0: D 4 1 @12",
			"1: A 2 @13", "0: A 0 @14", "0: A 4 @15",
		},
		capacity: 2, checked: 3, exceeded: 1,
	}, {
		name: "two allowed, two at once",
		events: []string{
			"0: D 0 1 @10", "1: D 2 1 @11", "1: A 2 @12", "0: D 4 1 @13",
			"0: A 0 @14", "0: A 4 @15",
		},
		capacity: 2, checked: 3,
	}, {
		// A run of a lower attempt (behind a reclaim, a handler timeout
		// or a failure) is not compared: its slot may have been given back.
		name: "stale attempt left out",
		events: []string{
			"0: D 0 1 @10", "1: D 0 2 @11", "1: A 0 @12",
			"0: D 2 1 @12", "0: A 2 @13", "0: A 0 @14",
		},
		capacity: 1, checked: 2,
	}, {
		// The stale run's ack line is read after the later attempt's D
		// line: paired with its own D line, it does not ack the later run,
		// which never acked (its process was killed).
		name:     "stale run's ack read last",
		events:   []string{"0: D 0 1 @10", "1: D 0 2 @11", "0: A 0 @14", "1: D 2 1 @12", "1: A 2 @16"},
		capacity: 1, checked: 1,
	}, {
		// Two runs of one attempt (a message handed back, or two copies).
		name: "same attempt twice",
		events: []string{
			"0: D 0 1 @10", "1: D 0 1 @11", "1: A 0 @12",
			"1: D 2 1 @11", "1: A 2 @13", "0: A 0 @14",
		},
		capacity: 1, checked: 1,
	}, {
		name: "hung, failed, killed: not compared",
		events: []string{
			"0: D 0 1 @10", "0: H 0", // hung
			"1: D 2 3 @10", // failed on its last attempt: dead
			"1: D 4 1 @10", // its process killed
		},
		dead:     []int{2},
		capacity: 1, checked: 0,
	}, {
		name:     "acked and dead",
		events:   []string{"0: D 0 3 @10", "0: A 0 @20", "1: D 2 1 @11", "1: A 2 @12"},
		dead:     []int{0},
		capacity: 1, checked: 1,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const run = "0a1b2c3d-0000-4000-8000"
			l := newLedger(6, run, true)
			for _, p := range []string{"/x/c0-1.events", "/x/c1-1.events"} {
				l.addLog(p)
			}
			for _, e := range tc.events {
				log, line, _ := strings.Cut(e, ": ")
				f := strings.Fields(line)
				i, _ := strconv.Atoi(f[1])
				f[1] = l.uuid(i)
				if at, ok := strings.CutPrefix(f[len(f)-1], "@"); ok {
					ms, _ := strconv.Atoi(at)
					f[len(f)-1] = strconv.FormatInt(t0.Add(time.Duration(ms)*time.Millisecond).UnixNano(), 10)
				}
				k, _ := strconv.Atoi(log)
				l.lines([]byte(strings.Join(f, " ")+"\n"), l.files[k])
			}
			for _, i := range tc.dead {
				l.dead[i] = 1
			}
			if len(l.problems) > 0 {
				t.Fatalf("problems: %v", l.problems)
			}
			c := l.groupOverlaps(func(i int) int { return i % 2 }, tc.capacity, t0)
			if c.checked != tc.checked || c.violations != tc.exceeded || c.checked+c.excluded != 6 {
				t.Errorf("checked %d, left out %d, exceeded %d times; want checked %d, exceeded %d (%v)",
					c.checked, c.excluded, c.violations, tc.checked, tc.exceeded, c.examples)
			}
			if tc.example != "" {
				want := strings.ReplaceAll(tc.example, "R-", run+"-")
				if len(c.examples) == 0 || c.examples[0] != want {
					t.Errorf("examples %q,\nwant %q", c.examples, want)
				}
			}
		})
	}
}
