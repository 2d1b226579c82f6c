package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Storage levels. What a release writes is a contract with every release
// that may run beside it: a body, far element or key mark that an older
// reader cannot read would be dead-lettered or stranded by it. So each
// release reads up to a level, announces it (announce.lua), and writes the
// newest level that every live reader reads and has read for the settle
// time; a process that announces nothing (release 0.1.0) counts as reading
// level 1 while the scan sees it (ScanLegacy). A storage change takes a
// new level: its writers check the level in use, its readers leave what
// they cannot read for a process that can (ErrNewer).
const (
	// Level1 is release 0.1.0's: the codec's delay codes 0 and 1 only,
	// every message in the waiting set (no far tier format 2, so no key
	// marks of its own and no far filter bits).
	Level1 = 1
	// Level2 (release 0.2.0): the codec's named metadata codes and
	// whole-second delays, the far tier's format 2 (business-keyed and
	// high-priority messages too), far marks as 16 bytes, the far filter.
	Level2 = 2
	// Level3 (issue 50): the far tier's format 3, its elements, its
	// fingerprint index and the business keys marked in it (far3.go).
	// Release 0.2.0 parks a format 3 element rather than reading it, so
	// level 3 is written only once every live process reads it.
	Level3 = 3
	// LevelNewest is the newest level this release reads and writes.
	LevelNewest = Level3
)

// writeFar2 makes publishers write far messages in format 2 whatever the
// level agreed (SetWriteFar2).
var writeFar2 atomic.Bool

// SetWriteFar2 makes every publisher of the process write far messages in
// format 2 (on), as at level 2, whatever the level agreed: for the tests
// and the bench, what this release writes while a process of release 0.2.0
// lives.
func SetWriteFar2(on bool) { writeFar2.Store(on) }

// WritesFar3 reports whether a publisher writing level lvl stores far
// messages in format 3.
func WritesFar3(lvl int) bool { return lvl >= Level3 && !writeFar2.Load() }

var (
	// LevelSettle is how long every live reader must have read a level
	// before it is written (unless the registry's settle field says
	// otherwise): a rollback within it finds nothing it cannot read.
	LevelSettle = 15 * time.Minute
	// AnnounceEvery is how often a process announces itself (and learns
	// the level to write, a pin included); it counts as live for
	// 3 × AnnounceEvery after its last announcement.
	AnnounceEvery = 30 * time.Second
	// LegacyWindow is how recently a consumer of a release that announces
	// nothing must have read to count as live, and how long a sighting
	// counts at least (internal/levels: 2.5 scan cycles).
	LegacyWindow = 5 * time.Minute
)

// levelSuffix marks a name (a consumer's, a scheduler's) with the level its
// process reads, so the scan tells a live reader of an older release (a
// name without it) from this one's.
const levelSuffix = "~s"

// NameAtLevel is name marked as a reader of level lvl.
func NameAtLevel(name string, lvl int) string { return name + levelSuffix + strconv.Itoa(lvl) }

// NameLevel is the level a consumer or scheduler name says its process
// reads: 1 for a name without the mark (release 0.1.0 marked none).
func NameLevel(name string) int {
	i := strings.LastIndex(name, levelSuffix)
	if i < 0 {
		return Level1
	}
	n, err := strconv.Atoi(name[i+len(levelSuffix):])
	if err != nil || n < 1 {
		return Level1
	}
	return n
}

// legacyName reports whether name is one release 0.1.0 gives a consumer
// ("<SubscriberConfig.Consumer>-<UUID>") or a scheduler (a UUID), with no
// level mark: consumers that other tools or tests name are not taken for
// it.
func legacyName(name string) bool {
	if NameLevel(name) >= Level2 || len(name) < 36 {
		return false
	}
	if _, ok := binaryUUID(name[len(name)-36:]); !ok {
		return false
	}
	return len(name) == 36 || name[len(name)-37] == '-'
}

// levelKeys is the registry's key base: one hash tag, so announce.lua runs
// on one Cluster slot. Its key names differ from every shard key's suffix,
// so a topic named "storage" does not collide.
type levelKeys string

func (k Keys) levels() levelKeys   { return levelKeys(k.Prefix + ":{storage}") }
func (l levelKeys) State() string  { return string(l) + ":levels" }
func (l levelKeys) Procs() string  { return string(l) + ":procs" }
func (l levelKeys) Info() string   { return string(l) + ":pinfo" }
func (l levelKeys) Levels() string { return string(l) + ":plevels" }

// ProcInfo is what a process announces of itself.
type ProcInfo struct {
	ID         string
	Level      int    // the newest level it reads
	Version    string // its release
	Role       string // publisher, subscriber, scheduler (joined by "+")
	Host       string
	Unreadable int64 // stored items of a newer level it met and left in place
	Expires    time.Time
}

func (p ProcInfo) encode() string {
	return fmt.Sprintf("%d %s %s %s %d", p.Level, p.Version, p.Role, p.Host, p.Unreadable)
}

func decodeProcInfo(id, v string) ProcInfo {
	p := ProcInfo{ID: id, Level: Level1}
	f := strings.Fields(v)
	if len(f) > 0 {
		p.Level, _ = strconv.Atoi(f[0])
	}
	if len(f) > 1 {
		p.Version = f[1]
	}
	if len(f) > 2 {
		p.Role = f[2]
	}
	if len(f) > 3 {
		p.Host = f[3]
	}
	if len(f) > 4 {
		p.Unreadable, _ = strconv.ParseInt(f[4], 10, 64)
	}
	return p
}

// LevelState is announce.lua's reply.
type LevelState struct {
	Level  int       // the level to write now
	Read   int       // the oldest level a live reader reads
	Agreed int       // the level agreed before the pin
	Pin    int       // an operator's ceiling (0: none)
	Since  time.Time // when Read last changed
	Live   int       // processes announced and live
	Legacy time.Time // until when a reader of release 0.1.0 counts (zero: none seen)
	Scan   bool      // the caller is to scan for readers of release 0.1.0 (ScanLegacy)
}

// Announce renews (live) or removes p in the registry, reports a legacy
// reader the scan saw (legacy not ""), to count for legacyFor, and returns
// the level to write, and whether p is to scan (for the next
// 3 × AnnounceEvery). fresh says the caller found nothing stored (Fresh;
// see announce.lua).
func Announce(ctx context.Context, c redis.Scripter, k Keys, p ProcInfo, live bool, legacy string, legacyFor time.Duration, fresh bool) (LevelState, error) {
	ttl := time.Duration(0)
	if live {
		ttl = 3 * AnnounceEvery
	}
	l := k.levels()
	f := "0"
	if fresh {
		f = "1"
	}
	if legacy == "" {
		legacyFor = 0
	}
	res, err := announceScript.Run(ctx, c, []string{l.State(), l.Procs(), l.Info(), l.Levels()},
		p.ID, ttl.Milliseconds(), p.encode(), LevelNewest, LevelSettle.Milliseconds(), legacyFor.Milliseconds(), legacy, f,
		(3 * AnnounceEvery).Milliseconds()).Int64Slice()
	if err == nil {
		err = replyShort("announce", len(res), 8)
	}
	if err != nil {
		return LevelState{}, err
	}
	s := LevelState{Level: int(res[0]), Read: int(res[1]), Agreed: int(res[2]), Pin: int(res[3]),
		Since: time.UnixMilli(res[4]), Live: int(res[5])}
	if res[6] > 0 {
		s.Legacy = time.UnixMilli(res[6])
	}
	s.Scan = res[7] == 1
	return s, nil
}

// Registry is the storage level registry as an operator reads it.
type Registry struct {
	Write      int           // the level agreed (before the pin); 1 when none was
	Read       int           // the oldest level a live reader reads (0: not known yet)
	Since      time.Time     // when Read last changed
	Changed    time.Time     // when Write last changed
	Pin        int           // 0: none
	PinnedAt   time.Time     // when the pin was set
	Settle     time.Duration // the settle time in force
	Legacy     time.Time     // until when a legacy reader counts (zero: none)
	LegacyWhat string        // what the scan saw last
	Parked     int64         // far elements parked (NoteParked)
	ParkedIn   string        // the shard of the last
	Procs      []ProcInfo    // live processes, by ID
}

// Level is the level written now: Write under the pin.
func (r Registry) Level() int {
	if r.Pin > 0 && r.Pin < r.Write {
		return r.Pin
	}
	return r.Write
}

// ReadRegistry reads the registry (live processes only).
func ReadRegistry(ctx context.Context, c redis.Cmdable, k Keys) (Registry, error) {
	l := k.levels()
	pipe := c.Pipeline()
	st := pipe.HGetAll(ctx, l.State())
	procs := pipe.ZRangeWithScores(ctx, l.Procs(), 0, -1)
	info := pipe.HGetAll(ctx, l.Info())
	now := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return Registry{}, fmt.Errorf("read the storage level registry: %w", err)
	}
	m := st.Val()
	num := func(f string) int64 { n, _ := strconv.ParseInt(m[f], 10, 64); return n }
	at := func(f string) time.Time {
		if n := num(f); n > 0 {
			return time.UnixMilli(n)
		}
		return time.Time{}
	}
	r := Registry{Write: int(num("write")), Read: int(num("read")), Since: at("since"), Changed: at("changed"),
		Pin: int(num("pin")), PinnedAt: at("pinat"), Settle: LevelSettle, LegacyWhat: m["legacywhat"],
		Parked: num("parked"), ParkedIn: m["parkedin"]}
	if r.Write == 0 {
		r.Write = Level1
	}
	if _, ok := m["settle"]; ok {
		r.Settle = time.Duration(num("settle")) * time.Millisecond
	}
	if l := at("legacy"); l.After(now.Val()) {
		r.Legacy = l
	}
	for _, z := range procs.Val() {
		exp := time.UnixMilli(int64(z.Score))
		if !exp.After(now.Val()) {
			continue
		}
		id := z.Member.(string)
		p := decodeProcInfo(id, info.Val()[id])
		p.Expires = exp
		r.Procs = append(r.Procs, p)
	}
	return r, nil
}

// NoteParked records in the registry that n far elements of sh were
// parked (unpack.lua): Health reports them whichever process runs.
func NoteParked(ctx context.Context, c Cmds, k Keys, sh Shard, n int64) error {
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, k.levels().State(), "parked", n)
		p.HSet(ctx, k.levels().State(), "parkedin", string(sh))
		return nil
	})
	return err
}

// NoteUnparked records in the registry that n parked far elements were
// moved on (Unpark): Health stops reporting them once none is left.
func NoteUnparked(ctx context.Context, c Cmds, k Keys, n int64) error {
	var left *redis.IntCmd
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		left = p.HIncrBy(ctx, k.levels().State(), "parked", -n)
		return nil
	}); err != nil || left.Val() > 0 {
		return err
	}
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, k.levels().State(), "parked", "parkedin")
		return nil
	})
	return err
}

// PinLevel sets (lvl > 0) or removes (lvl 0) the operator's ceiling on the
// level written. Every process follows within its next announcement.
func PinLevel(ctx context.Context, c redis.Cmdable, k Keys, lvl int) error {
	if lvl < 0 || lvl > LevelNewest {
		return fmt.Errorf("redisdelay: storage level %d: this release knows levels 1 to %d", lvl, LevelNewest)
	}
	if lvl == 0 {
		return c.HDel(ctx, k.levels().State(), "pin", "pinat").Err()
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		return err
	}
	return c.HSet(ctx, k.levels().State(), "pin", lvl, "pinat", now.UnixMilli()).Err()
}

// SetSettle sets the settle time for every process (d < 0: back to each
// release's default, LevelSettle).
func SetSettle(ctx context.Context, c redis.Cmdable, k Keys, d time.Duration) error {
	if d < 0 {
		return c.HDel(ctx, k.levels().State(), "settle").Err()
	}
	return c.HSet(ctx, k.levels().State(), "settle", d.Milliseconds()).Err()
}

// Fresh reports whether nothing is stored under k's prefix: no topic
// registered, or up to 100 registered (by SubscribeInitialize, say) whose
// first partitions hold no stream entry, waiting set or far tier.
func Fresh(ctx context.Context, c Cmds, k Keys) (bool, error) {
	topics, err := c.SMembers(ctx, k.Topics()).Result()
	if err != nil || len(topics) > 100 {
		return false, err
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.IntCmd, 0, 3*len(topics))
	for _, t := range topics {
		sh := k.Shard(t, 0)
		// A stream SubscribeInitialize made holds nothing: XLEN, not EXISTS.
		cmds = append(cmds, pipe.XLen(ctx, sh.Stream()), pipe.Exists(ctx, sh.Waiting()), pipe.Exists(ctx, sh.FarMeta()))
	}
	if len(cmds) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return false, err
		}
	}
	for _, cmd := range cmds {
		if cmd.Val() > 0 {
			return false, nil
		}
	}
	return true, nil
}

// ScanLegacy looks at partitions for a live reader named as release 0.1.0
// names them (legacyName): a consumer of one of their groups active within
// window, the holder of their scheduling lease or a scheduler member; and
// for processes listening to their bell or wake channel without the level
// mark's channel (LevelMark). It returns what
// it saw first ("" for nothing). Two pipelines, whatever the number of
// partitions.
func ScanLegacy(ctx context.Context, c Cmds, shards []Shard, window time.Duration) (string, error) {
	if len(shards) == 0 {
		return "", nil
	}
	pipe := c.Pipeline()
	groups := make([]*redis.XInfoGroupsCmd, len(shards))
	leases := make([]*redis.StringCmd, len(shards))
	scheds := make([]*redis.StringSliceCmd, len(shards))
	subs := make([]*redis.MapStringIntCmd, len(shards))
	live := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for i, sh := range shards {
		groups[i] = pipe.XInfoGroups(ctx, sh.Stream())
		leases[i] = pipe.Get(ctx, sh.Lease())
		scheds[i] = pipe.ZRangeByScore(ctx, sh.schedulers(), &redis.ZRangeBy{Min: live, Max: "+inf"})
		subs[i] = pipe.PubSubNumSub(ctx, sh.Bell(), LevelMark(sh.Bell()), sh.Wake(), LevelMark(sh.Wake()))
	}
	_, _ = pipe.Exec(ctx) // errors per command: a stream not created yet fails XINFO
	type ref struct {
		sh    Shard
		group string
		cmd   *redis.XInfoConsumersCmd
	}
	var refs []ref
	pipe = c.Pipeline()
	for i, sh := range shards {
		if err := leases[i].Err(); err != nil && !errors.Is(err, redis.Nil) {
			return "", err
		}
		if owner := leases[i].Val(); legacyName(owner) {
			return fmt.Sprintf("scheduler %s of %s", owner, sh), nil
		}
		for _, m := range scheds[i].Val() {
			if legacyName(m) {
				return fmt.Sprintf("scheduler %s of %s", m, sh), nil
			}
		}
		n := subs[i].Val()
		if d := n[sh.Bell()] - n[LevelMark(sh.Bell())]; d > 0 && unmarked(ctx, c, sh.Bell()) > 0 {
			return fmt.Sprintf("%d subscriber process(es) waiting on %s", d, sh.Bell()), nil
		}
		if d := n[sh.Wake()] - n[LevelMark(sh.Wake())]; d > 0 && unmarked(ctx, c, sh.Wake()) > 0 {
			return fmt.Sprintf("%d scheduler process(es) listening on %s", d, sh.Wake()), nil
		}
		for _, g := range groups[i].Val() {
			refs = append(refs, ref{sh, g.Name, pipe.XInfoConsumers(ctx, sh.Stream(), g.Name)})
		}
	}
	if len(refs) == 0 {
		return "", nil
	}
	_, _ = pipe.Exec(ctx)
	for _, r := range refs {
		for _, cs := range r.cmd.Val() { // a group dropped meanwhile has none
			if cs.Idle < window && legacyName(cs.Name) {
				return fmt.Sprintf("consumer %s of group %s on %s", cs.Name, r.group, r.sh), nil
			}
		}
	}
	return "", ctx.Err()
}

// legacyConfirm is how long after a count of more listeners of a channel
// than of its mark the scan counts again before it takes them for
// processes of release 0.1.0, which listen for as long as they run. A
// count can be wrong for a moment: while hundreds of a channel's listeners
// come and go, Valkey 9.1.2 answers PUBSUB NUMSUB for a few milliseconds
// with numbers such as 140,038,882,000,973 (a pointer's value, it seems),
// never equal for the channel and its mark (370 of 33,279 counts; Redis
// 7.0.15: none of 27,978). Taken for live readers of release 0.1.0, such
// a count made every process of the key prefix write storage level 1 for
// 5 minutes (the root package's tests on Valkey: far-tier tests failed in
// two runs of five).
var legacyConfirm = 500 * time.Millisecond

// unmarked counts the listeners of channel without its mark (see
// LevelMark) again, legacyConfirm from now; when that count fails, it
// answers 1: taking a live reader of release 0.1.0 for none would write
// what it cannot read.
func unmarked(ctx context.Context, c Cmds, channel string) int64 {
	select {
	case <-ctx.Done():
		return 1
	case <-time.After(legacyConfirm):
	}
	pipe := c.Pipeline()
	cmd := pipe.PubSubNumSub(ctx, channel, LevelMark(channel))
	if _, err := pipe.Exec(ctx); err != nil {
		return 1
	}
	n := cmd.Val()
	return n[channel] - n[LevelMark(channel)]
}

// LevelMark is the marker channel of a bell or wake channel: a process
// of this release listens to it beside the channel (Hub.ListenMarked), so
// PUBSUB NUMSUB of the two tells how many processes listening to the
// channel announce no level (release 0.1.0), idle ones included. The mark
// is level 2's in every release since 0.2.0, whatever level it reads:
// release 0.2.0's scan counts a listener without "~s2" as one of 0.1.0.
func LevelMark(channel string) string { return NameAtLevel(channel, Level2) }
