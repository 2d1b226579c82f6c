package redisdelay_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// The mixed-version run: each release a user may still upgrade from (a
// line of testdata/previous-release: its commit, name and storage level,
// the last release first) and this checkout, each built into
// testdata/mixdriver, publish, consume and schedule side by side on one
// Redis, in the orders teams deploy in. Every storage change must pass it
// (docs/upgrading.md). It builds each release (about a minute the first
// time) and runs four orders at once beside each, about two minutes a
// release: CI runs it on Redis and on Valkey, with
// REDISDELAY_MIXED_VERSIONS=1.

// mixLateness bounds how late a message may be delivered across the
// upgrade: a grouped message queued by the previous release reaches an
// idle subscriber of this one within BlockTime (30s, CHANGELOG), which
// bounds the rest with room to spare on a busy machine.
const mixLateness = 40 * time.Second

// mixPhase is the time between two steps of an order.
const mixPhase = 12 * time.Second

type mixBins struct{ old, new, cli string }

// mixRelease is a release run beside this checkout (a line of
// testdata/previous-release).
type mixRelease struct {
	commit, name string
	level        int // the storage level it reads and writes up to
}

// mixReleases reads testdata/previous-release.
func mixReleases(t *testing.T) []mixRelease {
	b, err := os.ReadFile(filepath.Join("testdata", "previous-release"))
	require.NoError(t, err)
	var out []mixRelease
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 3, "testdata/previous-release: %q is not \"<commit> <release> <storage level>\"", line)
		level, err := strconv.Atoi(f[2])
		require.NoError(t, err, "testdata/previous-release: %q: the storage level is not a number", line)
		require.True(t, level >= 1 && level <= redisdelay.StorageLevel, "testdata/previous-release: %q: level %d is not one of 1 to %d", line, level, redisdelay.StorageLevel)
		out = append(out, mixRelease{commit: f[0], name: f[1], level: level})
	}
	return out
}

func TestMixedVersions(t *testing.T) {
	if os.Getenv("REDISDELAY_MIXED_VERSIONS") == "" {
		t.Skip("set REDISDELAY_MIXED_VERSIONS=1 to build the previous releases and run each beside this one (CI does)")
	}
	for _, rel := range mixReleases(t) {
		t.Run(rel.name, func(t *testing.T) { testMixedVersions(t, rel) })
	}
}

// testMixedVersions runs the four orders beside release rel. A release
// of an older storage level is seen by this one, which writes its level
// meanwhile; after the settle time, rolling back to it takes the pin and
// the rewrite. One of the same level needs neither.
func testMixedVersions(t *testing.T, rel mixRelease) {
	bins := buildMixed(t, rel.commit)
	older := rel.level < redisdelay.StorageLevel
	for _, o := range []struct {
		name  string
		steps func(r *mixRun)
	}{
		// Producers upgraded first: new publishers while the previous
		// release consumes and schedules; then its consumers (drained
		// beside the new ones, as a rolling deployment does), then its
		// Manager.
		{"PublishersFirst", func(r *mixRun) {
			r.start("old", "sub", "mgr", "pub")
			r.phase()
			r.start("new", "pub")
			r.after(2*time.Second, func() { r.stop("old", "pub") })
			r.awaitOlderSeen()
			r.phase()
			r.start("new", "sub")
			r.after(8*time.Second, func() { r.stop("old", "sub") })
			r.phase()
			r.start("new", "mgr")
			r.stop("old", "mgr")
			r.phase()
		}},
		// Consumers and schedulers first, the publishers last.
		{"SubscribersFirst", func(r *mixRun) {
			r.start("old", "sub", "mgr", "pub")
			r.phase()
			r.start("new", "sub", "mgr")
			r.after(8*time.Second, func() { r.stop("old", "sub", "mgr") })
			r.awaitOlderSeen()
			r.phase()
			r.start("new", "pub")
			r.after(2*time.Second, func() { r.stop("old", "pub") })
			r.phase()
		}},
		// Everything upgraded, then rolled back soon after: nothing of a
		// newer level was written yet (the settle time).
		{"RollbackSoon", func(r *mixRun) {
			r.start("old", "sub", "mgr", "pub")
			r.phase()
			r.start("new", "sub", "mgr", "pub")
			r.after(4*time.Second, func() { r.stop("old", "sub", "mgr", "pub") })
			r.phase()
			r.start("old", "sub", "mgr", "pub")
			r.after(4*time.Second, func() { r.stop("new", "sub", "mgr", "pub") })
			r.phase()
		}},
		// This release alone, long enough to write its level (a newer one:
		// the far tier's format and the codec's codes of that level), then
		// the documented rollback: pin the release's level, rewrite, drain,
		// and the release takes over. A release that announces its level
		// runs first, so that far messages of its format wait beside this
		// one's newer format, and this release cancels and reschedules
		// some; release 0.1.0 would hold the level at 1 for the legacy
		// window (5 minutes) after it stops, so this release starts alone.
		{"RollbackAfterSettle", func(r *mixRun) {
			// A short settle time, as an operator sets it with the CLI:
			// the newest level once the previous release stopped.
			r.cli("storage", "settle", "5s")
			wait := 30 * time.Second
			if rel.level >= 2 {
				r.start("old", "sub", "mgr", "pub")
				r.phase()
				r.start("new", "sub", "mgr", "pub")
				r.after(2*time.Second, func() { r.stop("old", "sub", "mgr", "pub") })
				// The level moves up at this release's announcements
				// (every 30s): one once the last reader of the older
				// level is gone, one once it settled.
				wait = 75 * time.Second
			} else {
				r.start("new", "sub", "mgr", "pub")
			}
			r.awaitLevel(redisdelay.StorageLevel, wait)
			r.t.Logf("far messages waiting when level %d is written, by format: %v", redisdelay.StorageLevel, r.farFormats())
			r.phase() // this release writes its level
			r.t.Logf("far messages waiting before the rollback, by format: %v", r.farFormats())
			if older {
				r.cli("storage", "pin", strconv.Itoa(rel.level))
				r.rewriteUntilDrained()
			}
			r.start("old", "sub", "mgr", "pub")
			r.after(2*time.Second, func() { r.stop("new", "sub", "mgr", "pub") })
			r.phase()
		}},
	} {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			r := newMixRun(t, bins, rel.level)
			o.steps(r)
			r.finish()
		})
	}
}

// buildMixed builds the driver from the previous release's tree (git
// archive) and from the checkout (an overlay: the work tree is not
// touched), and the checkout's CLI.
func buildMixed(t *testing.T, prev string) mixBins {
	t.Helper()
	dir := t.TempDir()
	driver, err := filepath.Abs(filepath.Join("testdata", "mixdriver", "main.go"))
	require.NoError(t, err)
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	b := mixBins{old: filepath.Join(dir, "old"), new: filepath.Join(dir, "new"), cli: filepath.Join(dir, "cli")}

	tree := filepath.Join(dir, "tree")
	require.NoError(t, os.Mkdir(tree, 0o755))
	var tarball, stderr bytes.Buffer
	archive := exec.Command("git", "archive", "--format=tar", prev)
	archive.Stdout, archive.Stderr = &tarball, &stderr
	require.NoError(t, archive.Run(), "the previous release %s must be in the repository's history (CI fetches it): %s", prev, stderr.String())
	untar := exec.Command("tar", "-x", "-C", tree)
	untar.Stdin = &tarball
	out, err := untar.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, os.MkdirAll(filepath.Join(tree, "cmd", "mixdriver"), 0o755))
	src, err := os.ReadFile(driver)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(tree, "cmd", "mixdriver", "main.go"), src, 0o644))

	// The CLI numbers far buckets by the far tier's timing, as the
	// drivers do (-width, -lead, -margin): a file of the overlay sets it.
	timing := filepath.Join(dir, "fartiming.go")
	require.NoError(t, os.WriteFile(timing, []byte(`package main

import (
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

func init() { store.FarWidth, store.FarLead, store.FarMargin = time.Second, time.Second, 500*time.Millisecond }
`), 0o644))
	overlay := filepath.Join(dir, "overlay.json")
	ov, err := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(root, "cmd", "mixdriver", "main.go"):          driver,
		filepath.Join(root, "cmd", "redisdelay", "zz_fartiming.go"): timing,
	}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(overlay, ov, 0o644))

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for k, c := range []*exec.Cmd{
		exec.Command("go", "build", "-o", b.old, "./cmd/mixdriver"),
		exec.Command("go", "build", "-overlay", overlay, "-o", b.new, "./cmd/mixdriver"),
		exec.Command("go", "build", "-overlay", overlay, "-o", b.cli, "./cmd/redisdelay"),
	} {
		c.Dir = root
		if k == 0 {
			c.Dir = tree
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := c.CombinedOutput(); err != nil {
				errs[k] = fmt.Errorf("%s: %v\n%s", c, err, out)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return b
}

type mixProc struct {
	name    string // e.g. old-sub-1
	cmd     *exec.Cmd
	log     string
	stopped time.Time
}

type mixRun struct {
	t      *testing.T
	bins   mixBins
	level  int // the previous release's storage level
	addr   string
	client *redis.Client
	insp   *redisdelay.Inspector
	dir    string
	start0 time.Time

	mu      sync.Mutex
	procs   map[string][]*mixProc // "old-sub" -> running ones
	all     []*mixProc
	n       int
	pending sync.WaitGroup
}

func newMixRun(t *testing.T, bins mixBins, level int) *mixRun {
	srv := redistest.ForTest(t, redistest.Options{})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	require.NoError(t, err)
	r := &mixRun{t: t, bins: bins, level: level, addr: srv.Addr, client: client, insp: insp, dir: t.TempDir(), start0: time.Now(),
		procs: map[string][]*mixProc{}}
	t.Cleanup(r.killAll)
	return r
}

func (r *mixRun) phase() { time.Sleep(mixPhase) }

// after runs f d from now, beside the steps that follow.
func (r *mixRun) after(d time.Duration, f func()) {
	r.pending.Add(1)
	time.AfterFunc(d, func() {
		defer r.pending.Done()
		f()
	})
}

func (r *mixRun) start(version string, roles ...string) {
	bin := r.bins.old
	if version == "new" {
		bin = r.bins.new
	}
	for _, role := range roles {
		r.mu.Lock()
		r.n++
		name := fmt.Sprintf("%s-%s-%d", version, role, r.n)
		r.mu.Unlock()
		p := &mixProc{name: name, log: filepath.Join(r.dir, name+".log")}
		// The far tier's timing of the package's tests (TestMain), in both
		// versions: messages due more than about 2.5s ahead go far.
		p.cmd = exec.Command(bin, "-addr", r.addr, "-role", role, "-name", name, "-log", p.log,
			"-width", "1s", "-lead", "1s", "-margin", "500ms")
		out, err := os.Create(filepath.Join(r.dir, name+".out"))
		require.NoError(r.t, err)
		p.cmd.Stdout, p.cmd.Stderr = out, out
		require.NoError(r.t, p.cmd.Start())
		r.mu.Lock()
		r.procs[version+"-"+role] = append(r.procs[version+"-"+role], p)
		r.all = append(r.all, p)
		r.mu.Unlock()
	}
}

// stop ends the running processes of version and roles gracefully
// (SIGTERM: subscribers hand back what they hold).
func (r *mixRun) stop(version string, roles ...string) {
	for _, role := range roles {
		r.mu.Lock()
		ps := r.procs[version+"-"+role]
		delete(r.procs, version+"-"+role)
		r.mu.Unlock()
		for _, p := range ps {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan error, 1)
			go func() { done <- p.cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					r.t.Errorf("%s exited with %v: %s", p.name, err, r.tail(p))
				}
			case <-time.After(45 * time.Second):
				_ = p.cmd.Process.Kill()
				r.t.Errorf("%s did not stop within 45s of SIGTERM", p.name)
			}
			r.mu.Lock()
			p.stopped = time.Now()
			r.mu.Unlock()
		}
	}
}

func (r *mixRun) tail(p *mixProc) string {
	b, _ := os.ReadFile(filepath.Join(r.dir, p.name+".out"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

func (r *mixRun) killAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ps := range r.procs {
		for _, p := range ps {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	}
}

// awaitOlderSeen waits until the processes of this release saw one of the
// previous release, when that one reads an older level (and so write
// that level): release 0.1.0 by the scan (it announces nothing), a later
// one by its announcement. One of the same level changes nothing to wait
// for.
func (r *mixRun) awaitOlderSeen() {
	if r.level == redisdelay.StorageLevel {
		return
	}
	var s redisdelay.StorageInfo
	require.Eventually(r.t, func() bool {
		var err error
		s, err = r.insp.Storage(context.Background())
		require.NoError(r.t, err)
		seen := s.OldestReader == r.level
		if r.level < 2 {
			seen = !s.OlderRelease.IsZero()
		}
		return seen && s.Level == r.level
	}, 10*time.Second, 100*time.Millisecond, "storage: %+v", s)
}

func (r *mixRun) awaitLevel(level int, within time.Duration) {
	var s redisdelay.StorageInfo
	require.Eventually(r.t, func() bool {
		var err error
		s, err = r.insp.Storage(context.Background())
		require.NoError(r.t, err)
		return s.Level == level
	}, within, 200*time.Millisecond, "storage level in use: %+v", s)
	r.t.Logf("storage level %d in use: %s", level, r.cli("storage"))
}

func (r *mixRun) cli(args ...string) string {
	cmd := exec.Command(r.bins.cli, append([]string{"--addr", r.addr}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(r.t, err, "redisdelay %s: %s", strings.Join(args, " "), out)
	r.t.Logf("redisdelay %s: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
	return string(out)
}

// rewriteUntilDrained runs the documented rollback's rewrite to the
// previous release's level until it reports nothing newer left (exit 0),
// the new subscribers draining the streams meanwhile.
func (r *mixRun) rewriteUntilDrained() {
	deadline := time.Now().Add(60 * time.Second)
	level := strconv.Itoa(r.level)
	for {
		cmd := exec.Command(r.bins.cli, "--addr", r.addr, "storage", "rewrite", level)
		out, err := cmd.CombinedOutput()
		r.t.Logf("redisdelay storage rewrite %s: %s", level, strings.TrimSpace(string(out)))
		if err == nil {
			return
		}
		require.True(r.t, time.Now().Before(deadline), "the streams did not drain within 60s: %s", out)
		time.Sleep(time.Second)
	}
}

// farFormats counts the far messages of topic mix by format (an
// element's first byte: far.go, far3.go).
func (r *mixRun) farFormats() map[int]int {
	ctx := context.Background()
	out := map[int]int{}
	lists, err := r.client.Keys(ctx, "redisdelay:{mix}:fc:*").Result()
	require.NoError(r.t, err)
	for _, l := range lists {
		els, err := r.client.LRange(ctx, l, 0, -1).Result()
		require.NoError(r.t, err)
		for _, e := range els {
			if e != "" {
				out[int(e[0])]++
			}
		}
	}
	return out
}

// where says where a message is, for a lost one.
func (r *mixRun) where(id string) string {
	ctx := context.Background()
	var out []string
	for _, topic := range []string{"mix", "ord"} {
		w, found, err := r.insp.FindWaiting(ctx, topic, id)
		switch {
		case err != nil:
			out = append(out, topic+": "+err.Error())
		case found:
			out = append(out, fmt.Sprintf("waiting in %s, due %s", topic, w.Due.Format("15:04:05.000")))
		}
	}
	lease, _ := r.client.Get(ctx, "redisdelay:{mix}:lease").Result()
	dormant, _ := r.client.Get(ctx, "redisdelay:{mix}:dormant").Result()
	return fmt.Sprintf("%s; mix's lease %q, dormant %q", strings.Join(out, "; "), lease, dormant)
}

type mixEvent struct {
	proc string
	kind string
	uuid string
	at   int64 // ms
	n    int   // attempt
	what string
}

// finish stops the publishers, waits for every message due to be
// delivered, requeues the dead letters once more, stops everything and
// checks the run.
func (r *mixRun) finish() {
	r.pending.Wait()
	r.stop("old", "pub")
	r.stop("new", "pub")
	ctx := context.Background()
	// The last messages published are due up to 70s later ("long").
	deadline := time.Now().Add(150 * time.Second)
	var lost []string
	for {
		_, _ = r.insp.RequeueDeadLetters(ctx, "mix", "g")
		lost = r.check(false)
		if len(lost) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	for _, v := range []string{"old", "new"} {
		r.stop(v, "sub", "mgr")
	}
	r.check(true)
}

func (r *mixRun) events() []mixEvent {
	var out []mixEvent
	for _, p := range r.all {
		f, err := os.Open(p.log)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 2 {
				continue
			}
			e := mixEvent{proc: p.name, kind: fs[0], uuid: fs[1]}
			switch e.kind {
			case "P":
				e.at, _ = strconv.ParseInt(fs[2], 10, 64)
				e.what = fs[3]
			case "R":
				e.at, _ = strconv.ParseInt(fs[2], 10, 64)
			case "A":
				e.n, _ = strconv.Atoi(fs[2])
				e.at, _ = strconv.ParseInt(fs[3], 10, 64)
			case "E":
				e.what = strings.Join(fs[1:], " ")
			case "T":
				e.at, _ = strconv.ParseInt(fs[1], 10, 64)
			}
			out = append(out, e)
		}
		_ = f.Close()
	}
	return out
}

// check returns the messages published and not delivered; at the end
// (final) it checks and reports everything.
func (r *mixRun) check(final bool) (lost []string) {
	evs := r.events()
	due := map[string]int64{}
	kind := map[string]string{}
	writer := map[string]string{}
	gone := map[string]bool{}
	acks := map[string][]mixEvent{}
	errs := map[string]int{}
	firstErr := map[string]string{} // the whole message of each kind
	ticks := 0
	// A reschedule by another process (the driver's takeOver) may come
	// before the publish in evs, which is in the order of the processes.
	resched := map[string]int64{}
	var actors []mixEvent // cancels and reschedules, to count the other version's
	for _, e := range evs {
		switch e.kind {
		case "P":
			due[e.uuid], kind[e.uuid], writer[e.uuid] = e.at, e.what, e.proc
		case "R":
			resched[e.uuid] = e.at
			actors = append(actors, e)
		case "X":
			gone[e.uuid] = true
			actors = append(actors, e)
		case "A":
			acks[e.uuid] = append(acks[e.uuid], e)
		case "E":
			if strings.HasPrefix(e.what, "publish-keyB-reject") {
				continue // the policy's refusal, expected
			}
			// The version and the operation, and the error's first words.
			msg := strings.Fields(e.what)
			k := strings.SplitN(e.proc, "-", 2)[0] + " " + strings.Join(msg[:min(len(msg), 5)], " ")
			if errs[k]++; errs[k] == 1 {
				firstErr[k] = e.what
			}
		case "T":
			ticks++
		}
	}
	for id, at := range resched {
		due[id] = at
	}
	version := func(proc string) string { v, _, _ := strings.Cut(proc, "-"); return v }
	crossed := map[string]int{} // "X" or "R" by the other version than the writer's
	for _, e := range actors {
		if w, ok := writer[e.uuid]; ok && version(w) != version(e.proc) {
			crossed[e.kind]++
		}
	}
	for id := range due {
		if !gone[id] && len(acks[id]) == 0 {
			lost = append(lost, id)
		}
	}
	if !final {
		return lost
	}
	t := r.t
	sort.Strings(lost)
	for _, id := range lost {
		t.Errorf("lost: %s (%s, published by %s, due %s): %s", id, kind[id], writer[id], time.UnixMilli(due[id]).Format("15:04:05.000"), r.where(id))
	}
	var late []time.Duration
	delivered, unexpected, dups, inFlight := 0, 0, 0, 0
	stopped := map[string]time.Time{}
	for _, p := range r.all {
		stopped[p.name] = p.stopped
	}
	for id, as := range acks {
		if _, ok := due[id]; !ok {
			continue // published by a call whose log line was cut short: not counted
		}
		if gone[id] {
			unexpected++
			t.Errorf("delivered though cancelled or replaced: %s (%s, published by %s)", id, kind[id], writer[id])
			continue
		}
		delivered++
		if kind[id] != "dead" { // delivered once requeued, by design
			late = append(late, time.Duration(as[0].at-due[id])*time.Millisecond)
		}
		for _, a := range as[1:] {
			// A second delivery counts as the redelivery of a message in
			// flight when the process that acked it first stopped within
			// seconds of that ack (its ack not written yet).
			if s := stopped[as[0].proc]; !s.IsZero() && time.UnixMilli(as[0].at).After(s.Add(-5*time.Second)) {
				inFlight++
				continue
			}
			dups++
			t.Errorf("delivered twice: %s (%s): by %s at attempt %d, then by %s at attempt %d", id, kind[id], as[0].proc, as[0].n, a.proc, a.n)
		}
	}
	sort.Slice(late, func(a, b int) bool { return late[a] < late[b] })
	var maxLate, p99 time.Duration
	if len(late) > 0 {
		maxLate, p99 = late[len(late)-1], late[len(late)*99/100]
	}
	decodeFailures := 0
	for _, p := range r.all {
		b, _ := os.ReadFile(filepath.Join(r.dir, p.name+".out"))
		decodeFailures += bytes.Count(b, []byte("cannot decode entry"))
	}
	dead, err := r.insp.DeadLetters(context.Background(), "mix", "g", "", 1000)
	require.NoError(t, err)
	var deadOther []string
	for _, d := range dead {
		if d.Message == nil || string(d.Message.Payload) != "dead" {
			deadOther = append(deadOther, fmt.Sprintf("%v", d))
		}
	}
	t.Logf("MIXED %s: published %d (%d cancelled or replaced), delivered %d, lost %d, delivered though cancelled %d, duplicates %d (+%d in flight at a stop), decode failures %d, dead letters left %d (%d not on purpose), lateness p99 %s max %s (bound %s), schedule ticks %d, cancelled / rescheduled by the other version %d / %d; errors: %v",
		t.Name(), len(due), len(gone), delivered, len(lost), unexpected, dups, inFlight, decodeFailures, len(dead), len(deadOther),
		p99.Round(time.Millisecond), maxLate.Round(time.Millisecond), mixLateness, ticks, crossed["X"], crossed["R"], errs)
	for k, msg := range firstErr {
		t.Logf("errors %q: %d, the first: %s", k, errs[k], msg)
	}
	if decodeFailures > 0 {
		t.Errorf("%d entries dead-lettered as undecodable by a process of the previous release", decodeFailures)
	}
	if len(deadOther) > 0 {
		t.Errorf("dead letters not on purpose: %v", deadOther)
	}
	if maxLate > mixLateness {
		t.Errorf("a message was delivered %s after its due time (bound %s)", maxLate, mixLateness)
	}
	if ticks == 0 {
		t.Error("no schedule tick was delivered")
	}
	if crossed["X"] == 0 || crossed["R"] == 0 {
		t.Error("no message was cancelled, or none rescheduled, by the other version's publishers (the driver's takeOver)")
	}
	return lost
}
