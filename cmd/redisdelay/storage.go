package main

import (
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// After commands.go's init (files initialise in name order).
func init() {
	commands = append(commands, &command{
		name: "storage", args: "[pin N | unpin | settle D | rewrite N]", summary: "show or steer the storage level every process writes",
		help: "Without arguments, shows the storage level every process with the key prefix writes, the oldest level a\n" +
			"live reader reads, and the live processes with their release and level; a process of release 0.1.0 or\n" +
			"older, which announces nothing, is shown when one was seen (docs/upgrading.md).\n" +
			"  pin N      cap the level written at N, in every process within 30 seconds (before a rollback)\n" +
			"  unpin      remove the cap\n" +
			"  settle D   how long every live reader must have read a level before it is written (default 15m;\n" +
			"             \"default\" restores it)\n" +
			"  rewrite N  rewrite what is stored at rest to level N (after pin N): far messages of a newer format\n" +
			"             move into the waiting set, bodies are re-encoded; prints the stream entries of a newer\n" +
			"             level still to drain. Exit 1 while any remain: run it again until it exits 0.",
		maxArgs: 2, run: cmdStorage,
		check: func(pos []string, _ *cmdFlags) error {
			if len(pos) == 0 {
				return nil
			}
			want := map[string]int{"pin": 2, "unpin": 1, "settle": 2, "rewrite": 2}
			n, ok := want[pos[0]]
			if !ok {
				return fmt.Errorf("unknown storage action %q: use pin N, unpin, settle D or rewrite N", pos[0])
			}
			if len(pos) != n {
				return fmt.Errorf("storage %s takes %d argument(s)", pos[0], n-1)
			}
			return nil
		},
		flags: func(*flag.FlagSet, *cmdFlags) {},
	})
}

func cmdStorage(e *env, pos []string) error {
	if len(pos) == 0 {
		return showStorage(e)
	}
	level := func() (int, error) {
		n, err := strconv.Atoi(pos[1])
		if err != nil || n < 1 || n > redisdelay.StorageLevel {
			return 0, usagef(nil, "storage %s %q: give a level from 1 to %d", pos[0], pos[1], redisdelay.StorageLevel)
		}
		return n, nil
	}
	switch pos[0] {
	case "pin":
		n, err := level()
		if err != nil {
			return err
		}
		if err := e.insp.PinStorageLevel(e.ctx, n); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "pinned storage level %d: every process writes at most level %d from its next announcement (within 30s)\n", n, n)
	case "unpin":
		if err := e.insp.PinStorageLevel(e.ctx, 0); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, "unpinned: every process writes the level the live readers agreed on")
	case "settle":
		d := time.Duration(-1)
		if pos[1] != "default" {
			var err error
			if d, err = time.ParseDuration(pos[1]); err != nil || d < 0 {
				return usagef(nil, "storage settle %q: give a Go duration such as 15m or 1h (or \"default\")", pos[1])
			}
		}
		if err := e.insp.SetStorageSettle(e.ctx, d); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "settle time set to %s\n", pos[1])
	case "rewrite":
		n, err := level()
		if err != nil {
			return err
		}
		r, err := e.insp.RewriteStorage(e.signals, n)
		if err != nil {
			return err
		}
		if e.opts.json {
			if err := writeJSON(e.stdout, r); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(e.stdout, "rewritten to level %d: %d far messages moved into the waiting set, %d bodies and %d dead letters re-encoded\n",
				n, r.FarMoved, r.Bodies, r.Dead)
		}
		if r.Undrained > 0 {
			return fmt.Errorf("%d ready or pending stream entries of a newer level remain: keep a subscriber of this release running until they are handled, then run this again", r.Undrained)
		}
		if !e.opts.json {
			fmt.Fprintf(e.stdout, "nothing of a level above %d remains: processes of a release reading level %d can run\n", n, n)
		}
	}
	return nil
}

// storageSummary is the storage level in one line: what is written, and
// the releases live ("redisdelay storage" has the details).
func storageSummary(s redisdelay.StorageInfo) string {
	out := fmt.Sprintf("%d written", s.Level)
	if s.Pinned > 0 {
		out += fmt.Sprintf(" (pinned at %d)", s.Pinned)
	}
	if live := s.Releases(); live != "" {
		out += "; processes live: " + live
	}
	if !s.OlderRelease.IsZero() {
		out += "; and of release 0.1.0 or older"
	}
	return out
}

func showStorage(e *env) error {
	s, err := e.insp.Storage(e.ctx)
	if err != nil {
		return err
	}
	if e.opts.json {
		return writeJSON(e.stdout, s)
	}
	now := e.now()
	fmt.Fprintf(e.stdout, "storage level written: %d (this release reads up to %d)\n", s.Level, redisdelay.StorageLevel)
	if s.Pinned > 0 {
		fmt.Fprintf(e.stdout, "pinned at: %d (agreed: %d)\n", s.Pinned, s.Agreed)
	}
	if s.OldestReader > 0 {
		fmt.Fprintf(e.stdout, "oldest live reader reads: %d, since %s (settle time %s)\n", s.OldestReader, s.Since.Format(time.RFC3339), s.Settle)
	}
	if !s.OlderRelease.IsZero() {
		fmt.Fprintf(e.stdout, "a process of release 0.1.0 or older is live (counts until %s): %s\n", s.OlderRelease.Format(time.RFC3339), s.OlderReleaseSeen)
	}
	if len(s.Processes) == 0 {
		fmt.Fprintln(e.stdout, "no process of this release or newer is live")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROCESS\tVERSION\tREADS\tROLE\tHOST\tUNREADABLE\tEXPIRES IN")
	for _, p := range s.Processes {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", p.ID, p.Version, p.Level, p.Role, p.Host, p.Unreadable, p.Expires.Sub(now).Round(time.Second))
	}
	return w.Flush()
}
