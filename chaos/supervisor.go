package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// supervisor runs the child processes (the driver's own binary with a role
// flag), one per slot, restarting a slot whose process exits unexpectedly.
type supervisor struct {
	exe    string
	dir    string
	args   []string // flags every child gets
	onLog  func(path string)
	mu     sync.Mutex
	closed bool
	// unexpected exits: a child that died without being killed or stopped
	// by the driver (a crash, a panic in the library...)
	unexpected []string
}

type slot struct {
	sup  *supervisor
	name string // c0, c1, ..., m0, m1
	role string

	mu   sync.Mutex
	inc  int
	proc *proc // the current incarnation
}

// proc is one incarnation of a slot.
type proc struct {
	name     string
	cmd      *exec.Cmd
	stdin    io.WriteCloser // held open: the child exits when it closes
	stderr   string
	expected atomic.Bool // the driver is killing or stopping it
	done     chan struct{}
}

func (s *supervisor) slot(role, name string) *slot {
	return &slot{sup: s, role: role, name: name}
}

// start runs the slot's first incarnation.
func (sl *slot) start() error {
	return sl.replace(nil)
}

// replace runs a new incarnation of the slot in place of prev, which has
// ended: unless the slot's current incarnation is no longer prev (another
// restart replaced it already), so one slot never runs two processes. A
// second one would be an orphan: the slot tracks only its latest, so no
// kill, liveness probe or final stop reaches the first, which then keeps
// what it owns (an ordered partition, for good once its handler hangs).
func (sl *slot) replace(prev *proc) error {
	s := sl.sup
	sl.mu.Lock()
	defer sl.mu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed || sl.proc != prev {
		return nil
	}
	if prev != nil {
		select {
		case <-prev.done:
		default:
			return fmt.Errorf("%s still runs: a new incarnation would orphan it", prev.name)
		}
	}
	sl.inc++
	name := sl.name + "-" + strconv.Itoa(sl.inc)
	args := append([]string{"-role", sl.role, "-name", name}, s.args...)
	if sl.role == "consumer" {
		log := filepath.Join(s.dir, name+".events")
		// Registered before the process starts, so the driver reads every line.
		s.onLog(log)
		args = append(args, "-log", log)
	}
	p := &proc{name: name, stderr: filepath.Join(s.dir, name+".stderr"), done: make(chan struct{})}
	errFile, err := os.Create(p.stderr)
	if err != nil {
		return err
	}
	defer errFile.Close()
	cmd := exec.Command(s.exe, args...)
	cmd.Stdout, cmd.Stderr = errFile, errFile
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p.cmd, p.stdin = cmd, stdin
	sl.proc = p
	go sl.wait(p)
	return nil
}

func (sl *slot) wait(p *proc) {
	err := p.cmd.Wait()
	close(p.done)
	if p.expected.Load() {
		return
	}
	name, stderr := p.name, p.stderr
	s := sl.sup
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.unexpected = append(s.unexpected, fmt.Sprintf("%s exited by itself (%v); its stderr ends with:\n%s", name, err, tail(stderr, 2000)))
	}
	s.mu.Unlock()
	if closed {
		return
	}
	fmt.Fprintf(os.Stderr, "chaos: %s exited unexpectedly (%v); restarting it\n", name, err)
	time.Sleep(500 * time.Millisecond)
	// A kill or stop may have restarted the slot meanwhile: replace starts
	// nothing then.
	if err := sl.replace(p); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: restart %s: %v\n", sl.name, err)
	}
}

// kill SIGKILLs the current incarnation and waits until it is gone. It
// returns that incarnation (nil if the slot never ran one), for replace.
func (sl *slot) kill() *proc {
	p := sl.current()
	if p == nil {
		return nil
	}
	p.expected.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
	return p
}

func (sl *slot) current() *proc {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.proc
}

// stop asks the current incarnation to finish (SIGTERM), and SIGKILLs it
// after timeout. It returns that incarnation (nil if none), for replace,
// and whether it stopped in time.
func (sl *slot) stop(timeout time.Duration) (*proc, bool) {
	p := sl.current()
	if p == nil {
		return nil, true
	}
	p.expected.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p, true
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return p, false
	}
}

// closeAll marks the supervisor closed (no more restarts) and SIGKILLs
// every slot: the cleanup path.
func (s *supervisor) closeAll(slots []*slot) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for _, sl := range slots {
		sl.kill()
	}
}

func (s *supervisor) unexpectedExits() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.unexpected...)
}

// tail returns the last n bytes of a file.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}
