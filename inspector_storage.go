package redisdelay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// StorageInfo is what the processes sharing a KeyPrefix agreed to store
// (docs/upgrading.md). Each release reads up to a storage level and
// announces it; every process writes the newest level that every live
// reader reads, once all of them have read it for the settle time, and
// never above the operator's pin.
type StorageInfo struct {
	Level        int           // the level written now: Agreed under Pinned
	Agreed       int           // the level the live readers agreed on
	OldestReader int           // the oldest level a live reader reads (0: none announced yet)
	Since        time.Time     // when OldestReader last changed: Agreed follows it once settled
	Changed      time.Time     // when Agreed last changed
	Pinned       int           // the operator's ceiling (PinStorageLevel); 0: none
	Settle       time.Duration // how long every live reader must have read a level before it is written

	// OlderRelease is until when a process of release 0.1.0 or older
	// (which announces nothing) counts as live, zero when none was seen
	// within the window; OlderReleaseSeen says what the scan saw.
	OlderRelease     time.Time
	OlderReleaseSeen string

	// Parked counts the far messages schedulers could not read (a newer
	// release's format, or damaged) and parked for a release that reads
	// them, ParkedIn the partition of the last (its key base: the list is
	// ParkedIn + ":fpark"). Health reports them.
	Parked   int64
	ParkedIn string

	Processes []StorageProcess // the live processes, by ID
}

// Releases counts the live processes by release, oldest release first:
// "2 of 0.2.0, 1 of 0.3.0"; "" for none.
func (s StorageInfo) Releases() string {
	count := map[string]int{}
	var names []string
	for _, p := range s.Processes {
		if count[p.Version] == 0 {
			names = append(names, p.Version)
		}
		count[p.Version]++
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%d of %s", count[n], n)
	}
	return strings.Join(parts, ", ")
}

// StorageProcess is a live process as it announced itself.
type StorageProcess struct {
	ID      string
	Version string // its release (Version)
	Level   int    // the newest storage level it reads
	Role    string // publisher, subscriber, scheduler (a Manager's or a Subscriber's), or several joined by "+"
	Host    string // host name and process ID
	// Unreadable counts the stored items of a newer storage level it met
	// and left for a process that reads them (never dead-lettered).
	Unreadable int64
	Expires    time.Time // when it stops counting unless it announces again
}

// Storage reads the storage level registry.
func (i *Inspector) Storage(ctx context.Context) (StorageInfo, error) {
	r, err := store.ReadRegistry(ctx, i.client, i.keys)
	if err != nil {
		return StorageInfo{}, err
	}
	info := StorageInfo{Level: r.Level(), Agreed: r.Write, OldestReader: r.Read, Since: r.Since, Changed: r.Changed,
		Pinned: r.Pin, Settle: r.Settle, OlderRelease: r.Legacy, Parked: r.Parked, ParkedIn: r.ParkedIn}
	if !r.Legacy.IsZero() {
		info.OlderReleaseSeen = r.LegacyWhat
	}
	for _, p := range r.Procs {
		info.Processes = append(info.Processes, StorageProcess{ID: p.ID, Version: p.Version, Level: p.Level, Role: p.Role,
			Host: p.Host, Unreadable: p.Unreadable, Expires: p.Expires})
	}
	return info, nil
}

// PinStorageLevel caps the storage level every process writes at level
// (1 to StorageLevel), within one announcement (30 seconds); 0 removes
// the pin. Pin before rolling back to an older release once a newer level
// was written, then RewriteStorage (docs/upgrading.md). A pin never raises
// the level above what every live reader reads.
func (i *Inspector) PinStorageLevel(ctx context.Context, level int) error {
	return store.PinLevel(ctx, i.client, i.keys, level)
}

// SetStorageSettle sets the settle time every process applies (default 15
// minutes): a new storage level is written only once every live reader
// has read it this long, so a rollback within it finds nothing it cannot
// read. A negative d restores the default.
func (i *Inspector) SetStorageSettle(ctx context.Context, d time.Duration) error {
	return store.SetSettle(ctx, i.client, i.keys, d)
}

// StorageRewrite is what RewriteStorage did, and what it left.
type StorageRewrite struct {
	FarMoved int // far messages of a newer format moved into the waiting set
	Bodies   int // waiting and retry bodies re-encoded
	Dead     int // dead letters re-encoded (each a new entry at the end of its stream)
	// Undrained counts the ready and redelivery stream entries of a newer
	// level still to be read or acknowledged: stream entries cannot be
	// rewritten, so the rollback waits until running subscribers of this
	// release drained them (call again: 0).
	Undrained int
}

// RewriteStorage rewrites what every topic holds at rest to storage level
// (1: what release 0.1.0 reads), after PinStorageLevel(level) took effect,
// for a rollback: see docs/upgrading.md. Within 32 seconds of the pin it
// first waits for every process to have learnt of it. It reads every waiting, retry and
// dead-letter body of every topic: minutes for millions of messages.
func (i *Inspector) RewriteStorage(ctx context.Context, level int) (StorageRewrite, error) {
	var out StorageRewrite
	if level < 1 || level > StorageLevel {
		return out, fmt.Errorf("redisdelay: storage level %d: this release knows levels 1 to %d", level, StorageLevel)
	}
	r, err := store.ReadRegistry(ctx, i.client, i.keys)
	if err != nil {
		return out, err
	}
	if r.Level() > level {
		return out, fmt.Errorf("redisdelay: storage level %d is written: pin level %d first (redisdelay storage pin %d, or PinStorageLevel)", r.Level(), level, level)
	}
	// Every process learns of the pin at its next announcement: until
	// then it may still write the newer level.
	if wait := time.Until(r.PinnedAt.Add(store.AnnounceEvery + 2*time.Second)); r.Pin > 0 && wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	topics, err := i.Topics(ctx)
	if err != nil {
		return out, err
	}
	for _, topic := range topics {
		shards, err := i.shards(ctx, topic)
		if err != nil {
			return out, err
		}
		for _, sh := range shards {
			n, err := store.RewriteShard(ctx, i.client, sh, level)
			out.FarMoved, out.Bodies, out.Dead = out.FarMoved+n.Far, out.Bodies+n.Bodies, out.Dead+n.Dead
			if err != nil {
				return out, fmt.Errorf("redisdelay: rewrite topic %q: %w", topic, err)
			}
			u, err := store.NewerEntries(ctx, i.client, sh, level, 10000)
			out.Undrained += u
			if err != nil {
				return out, fmt.Errorf("redisdelay: count the entries of topic %q to drain: %w", topic, err)
			}
		}
	}
	return out, nil
}
