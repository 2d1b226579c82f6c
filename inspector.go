package redisdelay

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/levels"
	"github.com/redisdelay/watermill-redisdelay/internal/scheduling"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// InspectorConfig configures an Inspector.
type InspectorConfig struct {
	// Client is the Redis connection. Required. Never closed by the Inspector.
	Client redis.UniversalClient

	// KeyPrefix namespaces every Redis key (default DefaultKeyPrefix).
	KeyPrefix string
}

func (c *InspectorConfig) setDefaults() {
	c.KeyPrefix = defaultPrefix(c.KeyPrefix)
}

// Validate reports the first setting that cannot work.
func (c InspectorConfig) Validate() error {
	return validateCommon("InspectorConfig", c.Client, c.KeyPrefix)
}

// Inspector shows what a topic holds, and lets an operator act on dead
// letters: list, requeue and delete them. Safe for concurrent use; it keeps
// no state, so there is nothing to close.
type Inspector struct {
	client redis.UniversalClient
	keys   store.Keys
}

// NewInspector returns an Inspector.
func NewInspector(config InspectorConfig) (*Inspector, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	return &Inspector{client: config.Client, keys: store.Keys{Prefix: config.KeyPrefix}}, nil
}

// TopicStats counts the messages of a topic where they are, summed over
// its partitions.
type TopicStats struct {
	Topic string
	// Partitions is the topic's partition count, as stored in Redis.
	Partitions int
	// Waiting counts delayed messages not yet due, and grouped messages
	// (see GroupKey) due while the topic had no consumer group, which wait
	// for the first.
	Waiting int64
	// WaitingForGroup counts those grouped messages (of Waiting) that wait
	// for the topic's first consumer group: no scheduler has anything to
	// do with them until a group is created, so a partition holding only
	// them has no lease.
	WaitingForGroup int64
	// Stream counts entries in the ready streams, read or not: it shrinks
	// when every group has acknowledged an entry and a scheduler trims it.
	Stream int64
	// Leased counts the partitions whose scheduling lease a scheduler (of
	// a Manager, or of a subscriber without DisableScheduler) holds now.
	// A running scheduler holds the lease of each partition with waiting
	// messages, give or take a handover (up to 1.5 CheckInterval after its
	// holder stopped); a partition with nothing waiting may have none: its
	// scheduler's loop retired (dormant) or lets the lease lapse between
	// checks. So Leased == 0 with Waiting > WaitingForGroup means that no
	// scheduler runs for the topic, and due messages stay waiting: see
	// Overdue.
	Leased int
	Groups []GroupStats
}

// GroupStats counts a consumer group's messages of one topic.
type GroupStats struct {
	Group string
	// Ready counts messages due and not yet fetched by a consumer of the
	// group: new ones in the ready stream plus redeliveries. -1 when Redis
	// cannot tell (entries were deleted from the middle of the stream by hand).
	Ready int64
	// Pending counts messages fetched by a consumer and not yet acked.
	Pending int64
	// Retry counts nacked or reclaimed messages waiting for their retry delay.
	Retry int64
	// Dead counts the dead letters held now.
	Dead int64
	// DeadTotal counts messages ever moved to the dead letters, and
	// DeadEvicted those evicted to respect MaxDeadLetters.
	DeadTotal, DeadEvicted int64
	// Consumers counts the group's consumers known to Redis, including
	// crashed ones not cleaned up yet (see ConsumerIdleTimeout); in a topic
	// of several partitions, the most any partition has.
	Consumers int64
	// Paused is true while the group is paused (see Inspector.Pause).
	Paused bool
	// Grouped counts grouped messages (see GroupKey) due and queued in
	// their groups, not yet taken by a consumer (they are not in Ready);
	// ActiveGroups the groups holding queued or unsettled messages, summed
	// over partitions.
	Grouped, ActiveGroups int64
}

// Topics lists the topics publishers and subscribers with this key prefix
// have used. Registry entries that are not valid topic names (written by
// something other than this library) are left out: see InvalidTopics.
func (i *Inspector) Topics(ctx context.Context) ([]string, error) {
	topics, _, err := i.registry(ctx)
	return topics, err
}

// InvalidTopics lists the entries of the topic registry (the set
// <KeyPrefix>:topics) that are not valid topic names, which Topics, Health
// and the Collector skip. Nothing of this library writes them: remove
// them with SREM.
func (i *Inspector) InvalidTopics(ctx context.Context) ([]string, error) {
	_, invalid, err := i.registry(ctx)
	return invalid, err
}

func (i *Inspector) registry(ctx context.Context) (valid, invalid []string, err error) {
	all, err := store.Topics(ctx, i.client, i.keys)
	if err != nil {
		return nil, nil, wrap(err, "list topics")
	}
	valid = all[:0]
	for _, t := range all {
		if validateTopic(t) != nil {
			invalid = append(invalid, t)
		} else {
			valid = append(valid, t)
		}
	}
	return valid, invalid, nil
}

// shards returns the keys of each partition of a topic, by the count
// stored in Redis.
func (i *Inspector) shards(ctx context.Context, topic string) ([]store.Shard, error) {
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	if err != nil {
		return nil, err
	}
	out := make([]store.Shard, parts[0])
	for n := range out {
		out[n] = i.keys.Shard(topic, n)
	}
	return out, nil
}

// Stats counts a topic's messages. The counts are read without stopping
// traffic, so they are a near, not exact, snapshot of a busy topic.
func (i *Inspector) Stats(ctx context.Context, topic string) (TopicStats, error) {
	st := TopicStats{Topic: topic}
	if err := validateTopic(topic); err != nil {
		return st, err
	}
	fail := func(err error) (TopicStats, error) {
		return st, wrap(err, "stats of topic %q", topic)
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return fail(err)
	}
	st.Partitions = len(shards)
	index := map[string]int{} // group -> position in st.Groups
	for _, sh := range shards {
		part, err := i.partitionStats(ctx, sh)
		if err != nil {
			return fail(err)
		}
		st.Waiting += part.Waiting
		st.WaitingForGroup += part.WaitingForGroup
		st.Stream += part.Stream
		st.Leased += part.Leased
		for _, g := range part.Groups {
			n, ok := index[g.Group]
			if !ok {
				index[g.Group] = len(st.Groups)
				st.Groups = append(st.Groups, g)
				continue
			}
			sum := &st.Groups[n]
			if sum.Ready >= 0 && g.Ready >= 0 {
				sum.Ready += g.Ready
			} else {
				sum.Ready = -1
			}
			sum.Pending += g.Pending
			sum.Retry += g.Retry
			sum.Dead += g.Dead
			sum.DeadTotal += g.DeadTotal
			sum.DeadEvicted += g.DeadEvicted
			sum.Consumers = max(sum.Consumers, g.Consumers)
			sum.Grouped += g.Grouped
			sum.ActiveGroups += g.ActiveGroups
		}
	}
	if err := i.pausedGroups(ctx, topic, st.Groups); err != nil {
		return fail(err)
	}
	return st, nil
}

// pausedGroups sets Paused in the stats of the groups (see Pause).
func (i *Inspector) pausedGroups(ctx context.Context, topic string, groups []GroupStats) error {
	if len(groups) == 0 {
		return nil
	}
	names := make([]string, len(groups))
	for n, g := range groups {
		names[n] = g.Group
	}
	paused, err := store.PausedGroups(ctx, i.client, i.keys.Shard(topic, 0), names)
	if err != nil {
		return err
	}
	for n := range groups {
		groups[n].Paused = paused[n]
	}
	return nil
}

// partitionStats counts the messages of one partition.
func (i *Inspector) partitionStats(ctx context.Context, sh store.Shard) (TopicStats, error) {
	c, err := store.PartitionStats(ctx, i.client, sh)
	if err != nil {
		return TopicStats{}, err
	}
	st := TopicStats{Waiting: c.Waiting, WaitingForGroup: c.Orphans, Stream: c.Stream}
	if c.Leased {
		st.Leased = 1
	}
	for _, g := range c.Groups {
		st.Groups = append(st.Groups, GroupStats{Group: g.Group, Ready: g.Ready, Pending: g.Pending, Consumers: g.Consumers,
			Retry: g.Retry, Dead: g.Dead, DeadTotal: g.DeadTotal, DeadEvicted: g.DeadEvicted, Grouped: g.Grouped, ActiveGroups: g.Active})
	}
	return st, nil
}

func toInt64(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// Overdue reports how long the earliest waiting message of a topic (over
// its partitions) is overdue, by Redis's clock: 0 when none is due. A
// scheduler moves due messages within milliseconds, so a value that grows
// means that no scheduler runs for the topic (no Manager, and subscribers
// with DisableScheduler) or that it cannot keep up: TopicStats.Leased
// tells which.
func (i *Inspector) Overdue(ctx context.Context, topic string) (time.Duration, error) {
	if err := validateTopic(topic); err != nil {
		return 0, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return 0, wrapErr(err, "overdue messages of topic %q", topic)
	}
	var overdue time.Duration
	for _, sh := range shards {
		d, err := store.Overdue(ctx, i.client, sh)
		if err != nil {
			return 0, wrap(err, "overdue messages of topic %q", topic)
		}
		overdue = max(overdue, d)
	}
	return overdue, nil
}

// Lookups for the operator dashboard (package dashboard): one waiting
// message by UUID or business key, and how many fall due when, without
// reading the whole waiting set of a large topic.

// maxHistogramEdges bounds DueHistogram's buckets: one ZCOUNT per bucket
// and partition.
const maxHistogramEdges = 100

// DueHistogram counts a topic's waiting messages by due time: with edges
// e0 < e1 < ... < en, it returns n+2 counts, of the messages due before e0
// (overdue, when e0 is now), in [e0, e1), ..., in [en-1, en), and at en or
// later. It counts the waiting set on the server (ZCOUNT), and the far
// tier (messages due more than about two minutes ahead: see "far tier" in
// docs/internals.md) by its per-minute buckets, each counted in the bin of
// its first minute, so a far message may be counted up to a minute early;
// the cost grows with the number of such minutes, not of messages. A bucket
// unpacked while it reads may be counted twice or not at all. At most 100
// edges.
func (i *Inspector) DueHistogram(ctx context.Context, topic string, edges []time.Time) ([]int64, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	if len(edges) == 0 || len(edges) > maxHistogramEdges {
		return nil, fmt.Errorf("redisdelay: DueHistogram got %d edges: give 1 to %d", len(edges), maxHistogramEdges)
	}
	for n, e := range edges {
		if n > 0 && !e.After(edges[n-1]) {
			return nil, fmt.Errorf("redisdelay: DueHistogram edge %d (%s) is not after edge %d (%s): give increasing times",
				n, e.Format(time.RFC3339Nano), n-1, edges[n-1].Format(time.RFC3339Nano))
		}
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return nil, wrap(err, "due histogram of topic %q", topic)
	}
	out := make([]int64, len(edges)+1)
	if err := store.DueCounts(ctx, i.client, shards, edges, out); err != nil {
		return nil, wrap(err, "due histogram of topic %q", topic)
	}
	return out, nil
}

// TopicCounters are a topic's counters that only grow, summed over its
// partitions: read them twice and divide the difference by the time
// between the reads for a rate. They restart from 0 when a ready stream is
// deleted (by hand, or by Inspector.DeleteGroup of the last group): a
// counter smaller than its last read means a restart, not a negative rate.
type TopicCounters struct {
	Topic string
	// Time is Redis's clock when the counters were read.
	Time time.Time
	// Ready counts the entries ever added to the ready streams (Redis 7's
	// entries-added of XINFO STREAM): messages made ready, delayed ones
	// when they fall due and immediate ones when published. Redeliveries
	// and requeued dead letters are not counted.
	Ready int64
	// Groups are the consumer groups created on a ready stream, by name.
	Groups []GroupCounters
}

// GroupCounters are a consumer group's growing counters of one topic.
type GroupCounters struct {
	Group string
	// Delivered counts ready stream entries delivered to the group's
	// consumers for the first time (Redis 7's entries-read of XINFO
	// GROUPS). -1 when Redis cannot tell (entries were deleted from the
	// middle of a stream by hand).
	Delivered int64
	// DeadTotal counts messages ever moved to the group's dead letters,
	// as in GroupStats.
	DeadTotal int64
}

// Counters reads a topic's growing counters in two or three round trips
// of 2 + 2×partitions + partitions×groups commands, none of which reads a
// list of messages, so sampling it every few seconds costs Redis little
// whatever the depth of the topic.
func (i *Inspector) Counters(ctx context.Context, topic string) (TopicCounters, error) {
	out := TopicCounters{Topic: topic}
	if err := validateTopic(topic); err != nil {
		return out, err
	}
	fail := func(err error) (TopicCounters, error) {
		return out, wrap(err, "counters of topic %q", topic)
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return fail(err)
	}
	c, err := store.Counters(ctx, i.client, shards)
	if err != nil {
		return fail(err)
	}
	out.Time, out.Ready = c.Time, c.Ready
	index := map[string]int{}
	for _, g := range c.Groups {
		k, ok := index[g.Group]
		if !ok {
			k = len(out.Groups)
			index[g.Group] = k
			out.Groups = append(out.Groups, GroupCounters{Group: g.Group})
		}
		sum := &out.Groups[k]
		if g.Delivered < 0 || sum.Delivered < 0 {
			sum.Delivered = -1
		} else {
			sum.Delivered += g.Delivered
		}
		sum.DeadTotal += g.DeadTotal
	}
	slices.SortFunc(out.Groups, func(a, b GroupCounters) int { return strings.Compare(a.Group, b.Group) })
	return out, nil
}

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

// RedisServer is what Inspector.Servers reads of a Redis (or Valkey)
// server from INFO.
type RedisServer struct {
	// Addr is the node's address on a Cluster, "" otherwise.
	Addr string
	// Name is "redis" or "valkey"; Version its version; Mode standalone,
	// cluster or sentinel.
	Name, Version, Mode string
	Uptime              time.Duration
	// UsedMemory and PeakMemory are in bytes; MaxMemory too, 0 when
	// unbounded (maxmemory 0).
	UsedMemory, PeakMemory, MaxMemory int64
	MaxMemoryPolicy                   string
	// Warning says, in a sentence, what the configuration risks when the
	// maxmemory policy is not noeviction; "" when it is.
	Warning string
	// InfoDenied is true when the Redis user may not run INFO (an ACL
	// without +info): nothing else is known then.
	InfoDenied bool
}

// Servers reads the version, memory and maxmemory policy of the Redis
// server (of each master of a Cluster), with a warning for a policy other
// than noeviction: allkeys-* policies evict messages without an error,
// volatile-* ones the leases and ordered ownerships (see
// docs/operations.md, memory and eviction).
func (i *Inspector) Servers(ctx context.Context) ([]RedisServer, error) {
	infos, err := store.ReadServers(ctx, i.client)
	if err != nil {
		return nil, wrap(err, "read the Redis server's INFO")
	}
	out := make([]RedisServer, len(infos))
	for n, s := range infos {
		out[n] = RedisServer{Addr: s.Addr, Name: s.Name, Version: s.Version, Mode: s.Mode, Uptime: s.Uptime,
			UsedMemory: s.UsedMemory, PeakMemory: s.PeakMemory, MaxMemory: s.MaxMemory, MaxMemoryPolicy: s.Policy,
			InfoDenied: s.Denied, Warning: policyWarning(s.Addr, s.Policy, s.MaxMemory)}
	}
	return out, nil
}

// policyWarning is RedisServer.Warning.
func policyWarning(addr, policy string, maxmemory int64) string {
	if policy == "" || policy == "noeviction" {
		return ""
	}
	w := scheduling.EvictionRisk{Addr: addr, Policy: policy, Messages: strings.HasPrefix(policy, "allkeys-")}.Detail()
	if maxmemory == 0 {
		w += " (maxmemory is not set, so nothing is evicted until it is: set noeviction before a limit)"
	}
	return w
}

// Version is this release of the library (CHANGELOG.md). Processes announce
// it, with the storage level they read, in Redis: Inspector.Storage and
// `redisdelay storage` list the versions live.
const Version = "0.3.0-dev"

// StorageLevel is the newest storage level this release reads and writes.
// It writes it only once every live process reads it (docs/upgrading.md).
const StorageLevel = store.LevelNewest

func init() { levels.Version = Version }
