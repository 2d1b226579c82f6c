// Package levels keeps a process's components writing only what every live
// reader can read (see internal/store/level.go). One announcer per Redis
// client and key prefix runs while a component holds it: it announces the
// process in the registry, learns the level to write, and, while it holds
// the scan's lock, looks for readers of a release that announces nothing.
// The level is read from memory: it costs no round trip per message.
package levels

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Version is the release this code is, announced with the process.
var Version = "dev"

// The scan, by one process at a time (the registry gives it), looks at
// every partition once per scanCycle, or at scanRate partitions a second
// when there are more (10,000 partitions: 500 seconds, within the settle
// time of 15 minutes a new level waits for); its first step looks at up
// to scanFirst. A sighting counts for 2.5 cycles, so a live process of
// release 0.1.0 stays counted from one sighting to the next. An idle
// deployment of 100 partitions costs Redis about four commands a second
// for it.
const (
	scanCycle = 2 * time.Minute
	scanRate  = 20
	scanFirst = 200
)

// Holder is one component's hold on its process's announcer.
type Holder struct {
	a    *announcer
	role string
	once sync.Once
}

// Level is the level to write now: the last announcement's answer, 1
// (what every release reads) until the first one answered.
func (h *Holder) Level() int { return int(h.a.level.Load()) }

// Wait waits, at most until ctx is done, for the first announcement, so
// that the first messages are written at the level agreed. It returns the
// level.
func (h *Holder) Wait(ctx context.Context) int {
	select {
	case <-h.a.first:
	case <-ctx.Done():
	}
	return h.Level()
}

// Unreadable counts a stored item of a newer level that the process met
// and left for a process that reads it, and logs it to logger (the
// component's) once per kind and minute, naming both levels.
func (h *Holder) Unreadable(logger watermill.LoggerAdapter, kind string, err error, fields watermill.LogFields) {
	a := h.a
	n := a.unreadable.Add(1)
	a.mu.Lock()
	last, ok := a.logged[kind]
	now := time.Now()
	log := !ok || now.Sub(last) >= time.Minute
	if log {
		a.logged[kind] = now
	}
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}: // announce the count now: Health reads it
	default:
	}
	if log {
		logger.Error(fmt.Sprintf("redisdelay: a %s written by a newer release (storage level above %d, which release %s reads); left for a process that reads it (%d so far; upgrade this process)",
			kind, store.LevelNewest, Version, n), err, fields)
	}
}

// Release gives the hold up; the last one stops the announcer and removes
// the process from the registry.
func (h *Holder) Release() { h.once.Do(func() { release(h) }) }

type key struct {
	client any
	prefix string
}

var (
	mu         sync.Mutex
	announcers = map[key]*announcer{}
)

// Acquire holds the announcer of client and prefix for a component of
// role (publisher, subscriber, manager), starting it if none runs.
func Acquire(client redis.UniversalClient, prefix, role string, logger watermill.LoggerAdapter) *Holder {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	var k key
	if reflect.TypeOf(client).Comparable() {
		k = key{client, prefix}
	}
	mu.Lock()
	defer mu.Unlock()
	a := announcers[k]
	if a == nil || k.client == nil {
		a = newAnnouncer(client, prefix, logger)
		if k.client != nil {
			announcers[k] = a
		}
		a.key = k
	}
	h := &Holder{a: a, role: role}
	a.roles[role]++
	a.refs++
	if a.refs == 1 {
		a.start()
	}
	return h
}

func release(h *Holder) {
	a := h.a
	mu.Lock()
	a.roles[h.role]--
	if a.roles[h.role] == 0 {
		delete(a.roles, h.role)
	}
	a.refs--
	last := a.refs == 0
	if last && a.key.client != nil {
		delete(announcers, a.key)
	}
	mu.Unlock()
	if last {
		a.stop()
	}
}

type announcer struct {
	client redis.UniversalClient
	// Set by start: the client's hub, whose lanes carry the commands, so
	// that announcing takes no connection beyond the library's own
	// (internal/store/hub.go).
	hub    *store.Hub
	redis  *store.Gated
	keys   store.Keys
	logger watermill.LoggerAdapter
	id     string
	host   string
	key    key

	roles map[string]int // under mu (the package's)
	refs  int

	level      atomic.Int32
	unreadable atomic.Int64
	first      chan struct{} // closed after the first announcement
	kick       chan struct{} // an announcement now, not at the next tick

	mu     sync.Mutex
	logged map[string]time.Time // kind -> last logged (Unreadable)

	// Of the run goroutine: what was logged last, so that a state is
	// logged when it begins, not at every announcement.
	failing, legacyLogged bool
	answered              bool // the last announcement succeeded (read by stop once run ended)

	cancel context.CancelFunc
	done   chan struct{}
}

func newAnnouncer(client redis.UniversalClient, prefix string, logger watermill.LoggerAdapter) *announcer {
	host, _ := os.Hostname()
	if host == "" {
		host = "-"
	}
	a := &announcer{client: client, keys: store.Keys{Prefix: prefix}, logger: logger,
		id: watermill.NewShortUUID(), host: strings.Join(strings.Fields(host), "_") + "/" + fmt.Sprint(os.Getpid()),
		roles: map[string]int{}, first: make(chan struct{}), kick: make(chan struct{}, 1), logged: map[string]time.Time{}}
	a.level.Store(store.Level1)
	return a
}

func (a *announcer) start() {
	a.hub = store.AcquireHub(a.client)
	a.redis = store.NewGated(a.hub)
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan struct{})
	go a.run(ctx)
}

// stopWait bounds how long the last release waits for the announcer to
// stop: with Redis silent, an announcement in flight ends only with the
// client's read timeouts and retries (about 12 s with go-redis's
// defaults), which Close must not wait for. The announcer then ends in
// the background.
const stopWait = time.Second

func (a *announcer) stop() {
	a.cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-a.done
		// Leaving at once lets the level move on without waiting for the
		// TTL; a failure only means the entry expires. Not tried when the
		// last announcement failed: Redis would most likely not answer
		// this one either.
		if a.answered {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, _ = store.Announce(ctx, a.redis, a.keys, a.info(), false, "", 0, false)
		}
		a.hub.Release()
	}()
	select {
	case <-stopped:
	case <-time.After(stopWait):
	}
}

func (a *announcer) info() store.ProcInfo {
	mu.Lock()
	roles := make([]string, 0, len(a.roles))
	for r := range a.roles {
		roles = append(roles, r)
	}
	mu.Unlock()
	sort.Strings(roles)
	role := strings.Join(roles, "+")
	if role == "" {
		role = "-"
	}
	return store.ProcInfo{ID: a.id, Level: store.LevelNewest, Version: Version, Role: role, Host: a.host, Unreadable: a.unreadable.Load()}
}

// run announces the process every store.AnnounceEvery (and at once when
// kicked). The process the registry gives the scan to scans a slice after
// each announcement, and announces again at once what it saw.
func (a *announcer) run(ctx context.Context) {
	defer close(a.done)
	t := time.NewTimer(0)
	defer t.Stop()
	var sc scan
	first := true
	for {
		select {
		case <-ctx.Done():
			if first {
				close(a.first)
			}
			return
		case <-t.C:
		case <-a.kick:
		}
		st, ok, err := a.announce(ctx, "", 0, first)
		if errors.Is(err, redis.ErrClosed) {
			// The client was closed under its publishers or subscribers:
			// nothing can be announced again, and the entry expires by its
			// TTL. Those components report the closed client themselves.
			a.logger.Debug("redisdelay: storage level announcements stopped: the Redis client was closed", nil)
			if first {
				close(a.first)
			}
			return
		}
		if ok && st.Scan {
			if seen, counts := sc.step(ctx, a); seen != "" {
				a.announce(ctx, seen, counts, false)
			}
		}
		if first {
			first = false
			close(a.first)
		}
		t.Reset(store.AnnounceEvery)
	}
}

func (a *announcer) announce(ctx context.Context, legacy string, counts time.Duration, first bool) (store.LevelState, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fresh := false
	if first {
		fresh, _ = store.Fresh(ctx, a.redis, a.keys)
	}
	st, err := store.Announce(ctx, a.redis, a.keys, a.info(), true, legacy, counts, fresh)
	a.answered = err == nil
	if errors.Is(err, redis.ErrClosed) {
		return st, false, err
	}
	if err != nil {
		if ctx.Err() == nil && !a.failing {
			a.logger.Error("redisdelay: cannot announce this process's storage level; writing as before until it can", err, nil)
		}
		a.failing = ctx.Err() == nil
		return st, false, err
	}
	a.failing = false
	switch {
	case !st.Legacy.IsZero() && !a.legacyLogged:
		a.logger.Info("redisdelay: a process of release 0.1.0 or older is active; storage level 1 is written while it is, and for the settle time after",
			watermill.LogFields{"seen": legacy, "counts_until": st.Legacy})
	case st.Legacy.IsZero() && a.legacyLogged:
		a.logger.Info("redisdelay: no process of release 0.1.0 or older seen any more", nil)
	}
	a.legacyLogged = !st.Legacy.IsZero()
	if was := int(a.level.Swap(int32(st.Level))); was != st.Level || first {
		log := a.logger.Info
		if first {
			log = a.logger.Debug // every start: not worth a line
		}
		log(fmt.Sprintf("redisdelay: writing storage level %d (was %d)", st.Level, was),
			watermill.LogFields{"oldest_reader_level": st.Read, "agreed": st.Agreed, "pin": st.Pin, "live_processes": st.Live})
	}
	return st, true, nil
}

// scan walks every partition of every registered topic once per cycle
// (scanCycle), a slice per announcement, while this process holds the
// scan's lock.
type scan struct {
	shards  []store.Shard
	next    int
	stepped bool // a first step was made
}

func (s *scan) step(ctx context.Context, a *announcer) (seen string, counts time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, store.AnnounceEvery)
	defer cancel()
	if s.next >= len(s.shards) && !s.reload(ctx, a) {
		return "", 0
	}
	cycle := max(scanCycle, time.Duration(len(s.shards)/scanRate)*time.Second)
	n := int((int64(len(s.shards))*int64(store.AnnounceEvery) + int64(cycle) - 1) / int64(cycle))
	if !s.stepped {
		n, s.stepped = scanFirst, true
	}
	end := min(len(s.shards), s.next+max(n, 1))
	seen, err := store.ScanLegacy(ctx, a.redis, s.shards[s.next:end], store.LegacyWindow)
	s.next = end
	if err != nil && ctx.Err() == nil {
		a.logger.Debug("redisdelay: storage level scan", watermill.LogFields{"error": err.Error()})
	}
	return seen, max(store.LegacyWindow, cycle*5/2)
}

// reload lists the partitions of every registered topic.
func (s *scan) reload(ctx context.Context, a *announcer) bool {
	s.next = 0
	topics, err := store.Topics(ctx, a.redis, a.keys)
	if err != nil {
		return false
	}
	parts, err := store.Partitions(ctx, a.redis, a.keys, 1<<16, topics...)
	if err != nil {
		return false
	}
	s.shards = s.shards[:0]
	for i, t := range topics {
		for p := range parts[i] {
			s.shards = append(s.shards, a.keys.Shard(t, p))
		}
	}
	return len(s.shards) > 0
}
