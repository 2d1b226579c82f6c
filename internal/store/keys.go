package store

import (
	"strconv"
	"strings"
)

// Keys is the key layout, in one place. A topic is split into one or more
// partitions (see PublisherConfig.Partitions); every key of a partition
// starts with the partition's shard (below) and carries its hash tag, so
// each script touches a single Redis Cluster slot, and partitions of one
// topic spread over the cluster's nodes.
//
//	<shard>:waiting          zset    UUID -> due score
//	<shard>:bodies           hash    UUID -> encoded message
//	<shard>:seq              string  FIFO tie-break counter
//	<shard>:prio             hash    UUID -> 1 for waiting high-priority messages
//	<shard>:fanout           hash    the due high-priority message being copied to the groups (see promote.lua)
//	<shard>:stream           stream  ready messages
//	<shard>:bkeys            hash    business key -> UUID of the waiting message holding it (a far mark, FarHolderUUID, while it is far
//	                                 in format 2; none in format 3, whose index marks the key: far3.go)
//	<shard>:bkeyof           hash    UUID of a waiting message -> its business key (absent: none holds one)
//	<shard>:grpof            hash    UUID of a waiting grouped message, in either tier -> its group (absent: none is grouped)
//	<shard>:gorphan          zset    UUID of a grouped message due while the topic had no consumer group -> its score (see promote.lua)
//	<shard>:groups           set     consumer groups
//	<shard>:g:<group>:retry  zset    retry member -> due score
//	<shard>:g:<group>:rbody  hash    retry member -> encoded message
//	<shard>:g:<group>:redo   stream  redeliveries for the group
//	<shard>:g:<group>:dead   stream  dead letters (fields m, a, r; k: a grouped message's group)
//	<shard>:g:<group>:fq     hash    grouped messages queued per group, and the groups' states (see fair.lua)
//	<shard>:g:<group>:fring  list    groups that may be served now, round-robin (see fair.lua)
//	<shard>:g:<group>:fprio  list    groups with high-priority messages queued (see fair.lua)
//	<shard>:g:<group>:fwait  zset    groups over their rate limit -> when they may go on (ms; see fair.lua)
//	<shard>:g:<group>:meta   hash    group policy and counters
//	<shard>:g:<group>:owner  string  consumer owning the partition (ordered; expires)
//	<shard>:g:<group>:handling:<consumer> string  what the consumer's handler has, as its last lease renewal
//	                         reported: "<m|r> <entry id> <handed ms>", "-" for nothing (expires; see extend.lua)
//	<shard>:g:<group>:members zset   ordered subscriptions of the group -> expiry (partition 0 only)
//	<shard>:g:<group>:owned  hash    ordered subscription -> partitions it owns (partition 0 only)
//	<shard>:g:<group>:paused string  ms time of Inspector.Pause while the group is paused (partition 0 only)
//	<shard>:g:<group>:rate   hash    the group's rate limiter, see gate.lua (partition 0 only; expires)
//	<shard>:g:<group>:running zset   concurrency slot holders -> lease expiry, see slot.lua (partition 0 only; expires)
//	<shard>:g:<group>:squeue zset    subscriptions waiting for a slot -> when they asked (partition 0 only; expires)
//	<shard>:g:<group>:sseen  zset    the same -> when they last asked (partition 0 only; expires)
//	<shard>:g:<group>:flow   pub/sub channel that tells the group's subscribers of a pause or resume (partition 0 only)
//	<shard>:far              zset    far bucket number -> when to unpack it (ms): the far tier, see far.go
//	<shard>:fb:<bucket>      list    a far bucket: due score (8 bytes) + encoded message, "" once cancelled
//	<shard>:fz               zset    format 2 far buckets: bucket number -> when to unpack it (ms)
//	<shard>:fc:<bucket>      list    a format 2 far bucket: elements as far.go describes (farElem), "" once cancelled
//	<shard>:fx:<n>           hash    far index shard: UUID key (see farField) -> bucket × 2^24 + position
//	                                 (format 1), or -(bucket × 2^24 + position) - 1 (format 2)
//	<shard>:fi:<n>           hash    format 3 index shard: fingerprint of a UUID or a business key -> place (far3.go)
//	<shard>:fic              hash    format 3 index's side table: far field of a UUID whose fingerprint collided -> place
//	<shard>:fkc              hash    format 3 index's side table of business keys: key -> place
//	<shard>:fmeta            hash    far tier counters: n (messages, both formats), p:<bucket> (popped), l:<bucket> (live); P:, L: for format 2;
//	                                 format 3's index: nk (its business key entries), iL and iS (its shape);
//	                                 the far filter's fb (blocks), fi (messages added); fr, ft, fj while it is rebuilt
//	<shard>:ff               string  far filter: a bitmap of the far tier's UUIDs, one bit each (see farfilter.go)
//	<shard>:fpark            list    far elements the scheduler could not read (a newer release's, or damaged), parked
//	                                 for a release that reads them: "<format>:<bucket>:<first due ms>:<element>" (unpack.lua)
//	<shard>:ffn              string  the far filter being rebuilt
//	<shard>:lease            string  owner of the partition's scheduling (expires)
//	<shard>:wake             pub/sub channel that wakes schedulers
//	<shard>:bell             string  "1" while a consumer waits for new entries of the partition (armed by ReadNew);
//	                         also the pub/sub channel that tells it of them (lib.lua's ring; "g": groups to serve)
//	<shard>:reg              string  "1" once a publish ran; gone after Redis lost its data (the publisher registers the topic again)
//	<shard>:dormant          string  "1" while no scheduler loop runs: nothing to schedule (publish wakes the schedulers)
//	<shard>:overlap          hash    schedule ID -> the tick of a schedule with Overlap "skip" let through last, in the
//	                         partition its ticks go to: "<UUID> <tick ms> <since ms> <entry> <cursor>" (see recurringoverlap.lua)
//	<shard>:schedulers       zset    schedulers of the topic -> expiry (partition 0 only)
//	<shard>:sleases          hash    scheduler -> leases it holds in the topic (partition 0 only)
//	<prefix>:topics          set     known topics (for Managers)
//	<prefix>:partitions      hash    topic -> partition count (absent: 1)
//	<prefix>:registered      pub/sub channel that tells Managers about a newly registered topic
//	<prefix>:wakedenied      string  why a scheduler may not subscribe to wake channels (expires; read by Health)
//	<prefix>:{schedules}:defs   hash  schedule ID -> JSON definition (see Schedule)
//	<prefix>:{schedules}:next   zset  schedule ID -> next tick not yet published (Unix ms)
//	<prefix>:{schedules}:claims zset  "<schedule ID>@<tick ms>" -> claim expiry: ticks being published (see recurringclaim.lua)
//	<prefix>:{schedules}:paused hash  schedule ID -> when it was paused (Unix ms); its next tick is parked (see recurringpause.lua)
//	<prefix>:{schedules}:skips  hash  schedule ID -> ticks skipped by its overlap policy; "<schedule ID>@last" -> the last one (Unix ms)
//	<prefix>:{schedules}:last   hash  schedule ID -> the tick published last, by its tick loop or TriggerSchedule (Unix ms)
//	<prefix>:{schedules}:wake   pub/sub channel that wakes the schedulers' tick loops when a schedule's next tick was set
//	<prefix>:dedup:<namespace>:{<key>} string  a deduplication key seen within its window (expires; see DedupKey)
//	<prefix>:{storage}:procs    zset  process ID -> when it stops counting: the storage level registry (level.go, announce.lua)
//	<prefix>:{storage}:pinfo    hash  process ID -> "<level> <release> <role> <host> <unreadable>"
//	<prefix>:{storage}:plevels  zset  process ID -> the storage level it reads
//	<prefix>:{storage}:levels   hash  read, since, write, changed, pin, pinat, settle, legacy, legacywhat, scanner, scanuntil, parked, parkedin (announce.lua)
//	<shard>:bell~s2, <shard>:wake~s2  pub/sub channels every process of release 0.2.0 or later listens to beside the bell and wake (LevelMark)
//
// The shard of partition 0 is <prefix>:{<topic>}, the layout of a topic
// before partitions existed, so such a topic reads as one partition; that
// of partition n > 0 is <prefix>:{<topic>~<n>}:p<n>. Topic names cannot
// contain braces, and the suffix after the tag repeats n, so no two
// (topic, partition) pairs share a key, even for a topic named "a~1".
type Keys struct {
	Prefix string
}

func (k Keys) Topics() string     { return k.Prefix + ":topics" }
func (k Keys) Partitions() string { return k.Prefix + ":partitions" }

// Shard is the key base of one partition of a topic.
func (k Keys) Shard(topic string, partition int) Shard {
	if partition == 0 {
		return Shard(k.Prefix + ":{" + topic + "}")
	}
	n := strconv.Itoa(partition)
	return Shard(k.Prefix + ":{" + topic + "~" + n + "}:p" + n)
}

// Schedules is the key base of the recurring schedules: one hash tag, so
// recurringclaim.lua runs on one Cluster slot; a tick's message goes to its
// topic's own keys in a separate call.
func (k Keys) Schedules() scheduleKeys { return scheduleKeys(k.Prefix + ":{schedules}") }

// scheduleKeys is the key base of the recurring schedules: see keys.
type scheduleKeys string

func (s scheduleKeys) Defs() string   { return string(s) + ":defs" }
func (s scheduleKeys) Next() string   { return string(s) + ":next" }
func (s scheduleKeys) Claims() string { return string(s) + ":claims" }
func (s scheduleKeys) Paused() string { return string(s) + ":paused" }
func (s scheduleKeys) Skips() string  { return string(s) + ":skips" }
func (s scheduleKeys) Last() string   { return string(s) + ":last" }
func (s scheduleKeys) Wake() string   { return string(s) + ":wake" }

func (k Keys) Registered() string { return k.Prefix + ":registered" }
func (k Keys) WakeDenied() string { return k.Prefix + ":wakedenied" }

// PartitionOfWake returns the topic and partition of a wake channel name.
func (k Keys) PartitionOfWake(channel string) (topic string, partition int, ok bool) {
	rest, ok := strings.CutPrefix(channel, k.Prefix+":{")
	if !ok {
		return "", 0, false
	}
	tag, tail, ok := strings.Cut(rest, "}")
	if !ok {
		return "", 0, false
	}
	if tail == ":wake" {
		return tag, 0, true
	}
	n, ok := strings.CutSuffix(tail, ":wake")
	if n, ok = strings.CutPrefix(n, ":p"); !ok {
		return "", 0, false
	}
	topic, ok = strings.CutSuffix(tag, "~"+n)
	p, err := strconv.Atoi(n)
	if !ok || err != nil || p < 1 || strconv.Itoa(p) != n {
		return "", 0, false
	}
	return topic, p, true
}

// Shard is the key base of one partition of a topic: see keys.
type Shard string

func (s Shard) Waiting() string { return string(s) + ":waiting" }
func (s Shard) Bodies() string  { return string(s) + ":bodies" }
func (s Shard) seq() string     { return string(s) + ":seq" }
func (s Shard) Prio() string    { return string(s) + ":prio" }
func (s Shard) Fanout() string  { return string(s) + ":fanout" }
func (s Shard) Stream() string  { return string(s) + ":stream" }
func (s Shard) Groups() string  { return string(s) + ":groups" }
func (s Shard) Wake() string    { return string(s) + ":wake" }
func (s Shard) Bell() string    { return string(s) + ":bell" }
func (s Shard) Lease() string   { return string(s) + ":lease" }
func (s Shard) Bkeys() string   { return string(s) + ":bkeys" }
func (s Shard) BkeyOf() string  { return string(s) + ":bkeyof" }
func (s Shard) GroupOf() string { return string(s) + ":grpof" }
func (s Shard) orphans() string { return string(s) + ":gorphan" }
func (s Shard) reg() string     { return string(s) + ":reg" }
func (s Shard) dormant() string { return string(s) + ":dormant" }
func (s Shard) Far() string     { return string(s) + ":far" }
func (s Shard) FarMeta() string { return string(s) + ":fmeta" }
func (s Shard) Overlap() string { return string(s) + ":overlap" }
func (s Shard) FarPark() string { return string(s) + ":fpark" }

func (s Shard) FarBucket(b int64) string { return string(s) + ":fb:" + strconv.FormatInt(b, 10) }

// FarZ and FarList are the far tier's keys of format 2 (see far.go): the
// buckets' zset and lists. Format 1's are Far and FarBucket.
func (s Shard) FarZ() string           { return string(s) + ":fz" }
func (s Shard) FarList(b int64) string { return string(s) + ":fc:" + strconv.FormatInt(b, 10) }
func (s Shard) farZset(v int) string {
	if v == 2 {
		return s.FarZ()
	}
	return s.Far()
}
func (s Shard) farBucketKey(v int, b int64) string {
	if v == 2 {
		return s.FarList(b)
	}
	return s.FarBucket(b)
}
func (s Shard) farIndex(n uint32) string {
	return string(s) + ":fx:" + strconv.FormatUint(uint64(n), 10)
}

func (s Shard) schedulers() string  { return string(s) + ":schedulers" }
func (s Shard) leaseCounts() string { return string(s) + ":sleases" }

func (s Shard) group(group string) string       { return string(s) + ":g:" + group }
func (s Shard) Retry(group string) string       { return s.group(group) + ":retry" }
func (s Shard) retryBodies(group string) string { return s.group(group) + ":rbody" }
func (s Shard) Redelivery(group string) string  { return s.group(group) + ":redo" }
func (s Shard) Dead(group string) string        { return s.group(group) + ":dead" }
func (s Shard) Meta(group string) string        { return s.group(group) + ":meta" }
func (s Shard) Owner(group string) string       { return s.group(group) + ":owner" }
func (s Shard) handling(group, consumer string) string {
	return s.group(group) + ":handling:" + consumer
}
func (s Shard) members(group string) string     { return s.group(group) + ":members" }
func (s Shard) ownedCounts(group string) string { return s.group(group) + ":owned" }
func (s Shard) Paused(group string) string      { return s.group(group) + ":paused" }
func (s Shard) rate(group string) string        { return s.group(group) + ":rate" }
func (s Shard) Running(group string) string     { return s.group(group) + ":running" }
func (s Shard) slotQueue(group string) string   { return s.group(group) + ":squeue" }
func (s Shard) slotSeen(group string) string    { return s.group(group) + ":sseen" }
func (s Shard) Flow(group string) string        { return s.group(group) + ":flow" }
func (s Shard) Fair(group string) string        { return s.group(group) + ":fq" }
func (s Shard) fairRing(group string) string    { return s.group(group) + ":fring" }
func (s Shard) fairPrio(group string) string    { return s.group(group) + ":fprio" }
func (s Shard) fairWait(group string) string    { return s.group(group) + ":fwait" }

// fairQueued is the field of a consumer group's fq hash that counts the
// messages queued in its groups (fair.lua's "\0n").
const fairQueued = "\x00n"

// fairKeys are a consumer group's fair queues (see fair.lua): fq, fring,
// fprio, fwait, in the order the scripts take them.
func (s Shard) fairKeys(group string) []string {
	return []string{s.Fair(group), s.fairRing(group), s.fairPrio(group), s.fairWait(group)}
}

// farFilter is the far filter of a partition (see farfilter.go), and
// farFilterNext the one a rebuild fills.
func (s Shard) farFilter() string     { return string(s) + ":ff" }
func (s Shard) farFilterNext() string { return string(s) + ":ffn" }
