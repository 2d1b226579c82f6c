package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testSlot returns a consumer slot whose processes are a shell script that
// runs until its stdin closes (as a consumer exits when the driver dies),
// and a function counting the processes of the slot still running. Each
// process appends its pid to a file as it starts, so the count includes
// incarnations the slot no longer tracks.
func testSlot(t *testing.T) (*slot, func() int) {
	t.Helper()
	dir := t.TempDir()
	exe, pids := filepath.Join(dir, "child.sh"), filepath.Join(dir, "pids")
	script := "#!/bin/sh\necho $$ >> " + pids + "\nexec cat >/dev/null\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sup := &supervisor{exe: exe, dir: dir, onLog: func(string) {}}
	sl := sup.slot("consumer", "c0")
	alive := func() []int {
		b, _ := os.ReadFile(pids)
		var out []int
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			if pid > 0 && syscall.Kill(pid, 0) == nil {
				out = append(out, pid)
			}
		}
		return out
	}
	t.Cleanup(func() {
		sup.mu.Lock()
		sup.closed = true
		sup.mu.Unlock()
		if p := sl.current(); p != nil {
			p.expected.Store(true)
		}
		for _, pid := range alive() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	running := func() int {
		time.Sleep(100 * time.Millisecond) // a process just started writes its pid
		return len(alive())
	}
	return sl, running
}

// incarnations is how many processes the slot started.
func incarnations(sl *slot) int {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.inc
}

func testDriver() *driver {
	return &driver{start: time.Now()}
}

// A process that exits by itself is restarted by its supervisor 500ms later;
// a random kill of the slot meanwhile "kills" the dead process and restarts
// the slot too. Both restarts used to start a process: the first one was
// an orphan no later kill reached.
func TestSlot_KillRacingUnexpectedExitStartsOneProcess(t *testing.T) {
	sl, running := testSlot(t)
	if err := sl.start(); err != nil {
		t.Fatal(err)
	}
	p := sl.current()
	_ = p.stdin.Close() // the process exits by itself: an unexpected exit
	<-p.done
	d := testDriver()
	d.restart(sl, sl.kill) // sleeps 100ms-1s, during the supervisor's 500ms
	time.Sleep(1500 * time.Millisecond)
	if n := running(); n != 1 {
		t.Errorf("%d processes run in the slot, want 1 (incarnations started: %d)", n, incarnations(sl))
	}
	if incarnations(sl) != 2 {
		t.Errorf("the slot started %d incarnations, want 2 (the first and one restart)", incarnations(sl))
	}
	if len(d.failures) > 0 {
		t.Errorf("failures: %v", d.failures)
	}
}

// The liveness probe decides to kill the hung incarnation p, but a random
// kill replaces p first (the probe waits for restartMu meanwhile). The
// probe's restart must then start nothing: before c1892ee it started a
// second process, orphaning the random kill's one (the CI stall: the
// orphan took every partition over as the others were killed, then hung).
func TestSlot_ProbeFindingItsProcessReplacedStartsNothing(t *testing.T) {
	sl, running := testSlot(t)
	if err := sl.start(); err != nil {
		t.Fatal(err)
	}
	d := testDriver()
	p := sl.current() // the probe found p hung
	d.restart(sl, sl.kill)
	d.restart(sl, func() *proc { // as livenessProbe does
		if sl.current() != p {
			return nil
		}
		return sl.kill()
	})
	if n := running(); n != 1 {
		t.Errorf("%d processes run in the slot, want 1", n)
	}
	// A restart holding a stale incarnation (ended and replaced already)
	// starts nothing either.
	d.restart(sl, func() *proc { return p })
	if n := running(); n != 1 || incarnations(sl) != 2 {
		t.Errorf("%d processes run in the slot after %d starts, want 1 after 2", n, incarnations(sl))
	}
}

// replace refuses to start an incarnation beside one that still runs.
func TestSlot_ReplaceRefusesWhileTheProcessRuns(t *testing.T) {
	sl, running := testSlot(t)
	if err := sl.start(); err != nil {
		t.Fatal(err)
	}
	if err := sl.replace(sl.current()); err == nil {
		t.Error("replace started a second process beside a running one")
	}
	if n := running(); n != 1 {
		t.Errorf("%d processes run in the slot, want 1", n)
	}
}
