package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// command is one subcommand.
type command struct {
	name    string
	args    string // argument synopsis
	summary string // one line
	help    string // the command's usage text
	// minArgs and maxArgs bound the positional arguments (maxArgs -1: any).
	minArgs, maxArgs int
	flags            func(fs *flag.FlagSet, f *cmdFlags) // the command's own flags
	check            func(pos []string, f *cmdFlags) error
	run              func(e *env, pos []string) error
	// serve marks a command that runs until interrupted: --timeout bounds
	// connecting only.
	serve bool
}

// cmdFlags holds the commands' own flags, fresh for each run.
type cmdFlags struct {
	offset, limit int
	after         string
	all, yes      bool
	create        bool // pause --create (--force)
	key           string
	payload       bool
	maxPayload    int
	listen        string
	readOnly      bool
	allowedHosts  []string      // ui --allowed-host
	basicAuthFile string        // ui --basic-auth-file
	tokenFile     string        // ui --token-file
	insecure      bool          // ui --insecure
	uiTLSCert     string        // ui --ui-tls-cert
	uiTLSKey      string        // ui --ui-tls-key
	in            time.Duration // reschedule --in
	inSet         bool          // --in was given (--in 0s: due now)
	at            string        // reschedule --at ("now" too)
	group         string        // search --group
	cursor        string        // search --cursor

	// The filter flags (filterFlags); fromT and toT are --from and --to
	// as check parsed them.
	meta       map[string]string
	keyPrefix  string
	from, to   string
	fromT, toT time.Time

	dryRun bool   // --dry-run of a bulk action
	resume string // --resume of a bulk action

	over                                 time.Duration // throughput --over
	maxOverdue, stuckAfter, consumerIdle time.Duration // health's limits
}

// durationHelp is what a malformed duration flag is told.
const durationHelp = "parse error: give a duration such as 90s, 10m or 2h (a number and a unit: ns, us, ms, s, m, h)"

// durationFlag is a duration flag whose parse error explains itself
// (flag.DurationVar says only "parse error").
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s" // the zero value flag.PrintDefaults compares with
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New(durationHelp)
	}
	*f.d = d
	return nil
}

// durationVar defines a duration flag as flag.DurationVar does, with
// durationFlag's error.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationFlag{p}, name, usage)
}

// payloadFlags are the flags of the commands that can print payloads.
func payloadFlags(fs *flag.FlagSet, f *cmdFlags, toggle bool) {
	if toggle {
		fs.BoolVar(&f.payload, "payload", false, "show each message in full: all metadata and the payload")
	}
	fs.IntVar(&f.maxPayload, "max-payload", defaultMaxPayload, "print at most `N` bytes of a payload (0: all)")
}

func checkMaxPayload(f *cmdFlags) error {
	if f.maxPayload < 0 {
		return fmt.Errorf("--max-payload is %d: use 0 (no limit) or more", f.maxPayload)
	}
	return nil
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

var commands []*command

func init() {
	commands = []*command{
		{
			name: "topics", summary: "list the topics",
			help:    "Lists the topics Publishers and Subscribers with the key prefix have used.",
			maxArgs: 0, run: cmdTopics,
		},
		{
			name: "stats", args: "[topic...]", summary: "count a topic's messages, per consumer group",
			help: "Counts the messages of the topics (all topics when none is given): partitions, waiting (delayed,\n" +
				"not due yet), stream (entries in the ready stream), and per consumer group: ready (due, not fetched),\n" +
				"pending (fetched, not acked), retry (waiting for a retry delay), dead (dead letters now), dead total\n" +
				"and evicted (ever moved to the dead letters; evicted to respect MaxDeadLetters), consumers,\n" +
				"grouped (due messages with a group, see SetGroup, queued in their groups, not yet taken: not in ready)\n" +
				"and active groups (groups with messages queued or not settled yet).\n" +
				"Ready is \"?\" (-1 in JSON) when Redis cannot tell.",
			maxArgs: -1, run: cmdStats,
		},
		{
			name: "server", summary: "show the Redis server: version, memory, maxmemory policy",
			help: "Shows the Redis (or Valkey) server, or each master of a Cluster: its version, uptime, memory used\n" +
				"and its limit, and the maxmemory policy, with a warning (stderr) when it is not noeviction:\n" +
				"allkeys-* policies evict messages without an error at maxmemory (docs/operations.md).",
			maxArgs: 0, run: cmdServer,
		},
		{
			name: "throughput", args: "[topic...] [--over D]", summary: "measure messages per second, per topic and group",
			help: "Reads each topic's counters twice, --over apart (default 5s), and prints the rates between the\n" +
				"reads, by Redis's clock: messages made ready (delayed ones falling due, immediate ones published),\n" +
				"and per consumer group delivered (first deliveries) and dead-lettered. \"?\" when Redis cannot tell\n" +
				"(a stream was deleted, or entries deleted from its middle, meanwhile).",
			maxArgs: -1,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				durationVar(fs, &f.over, "over", 5*time.Second, "measure over `D`")
			},
			check: func(_ []string, f *cmdFlags) error {
				if f.over < 100*time.Millisecond || f.over > 10*time.Minute {
					return fmt.Errorf("--over is %s: give 100ms to 10m", f.over)
				}
				return nil
			},
			run: cmdThroughput,
		},
		{
			name: "health", args: "[topic...] [--max-overdue D] [--stuck-after D] [--consumer-idle D]", summary: "check the topics and the server; exit 1 when unhealthy",
			help: "Runs Inspector.Health on the topics (all by default) and the server: waiting messages overdue (no\n" +
				"scheduler), messages stuck with a consumer, ready messages with no active consumer, handler\n" +
				"timeouts, a maxmemory policy that evicts messages, schedulers refused wake-ups (ACL). Prints\n" +
				"\"healthy\" and exits 0, or the problems and exits 1 (with --json, the report either way).",
			maxArgs: -1,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				durationVar(fs, &f.maxOverdue, "max-overdue", 0, "a topic whose earliest waiting message is overdue by more than `D` has no working scheduler (default 1m)")
				durationVar(fs, &f.stuckAfter, "stuck-after", 0, "a message held by a consumer with no sign of life for `D` is stuck (default: twice the group's visibility timeout)")
				durationVar(fs, &f.consumerIdle, "consumer-idle", 0, "ready messages and no consumer active within `D` is a group that stopped (default: twice the visibility timeout)")
			},
			check: func(_ []string, f *cmdFlags) error {
				if f.maxOverdue < 0 || f.stuckAfter < 0 || f.consumerIdle < 0 {
					return errors.New("--max-overdue, --stuck-after and --consumer-idle take positive durations (0: the default)")
				}
				return nil
			},
			run: cmdHealth,
		},
		{
			name: "waiting", args: "<topic> [--offset N] [--limit N] [--payload]", summary: "list a topic's delayed messages, in due order",
			help: "Lists delayed messages not due yet, in due order: UUID, due time, payload size, metadata.\n" +
				"With --payload, each message in full (see \"redisdelay help show\" for how payloads are printed).",
			minArgs: 1, maxArgs: 1,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.IntVar(&f.offset, "offset", 0, "skip the first `N` messages")
				fs.IntVar(&f.limit, "limit", 100, "list at most `N` messages (1 to 10000)")
				payloadFlags(fs, f, true)
			},
			check: func(_ []string, f *cmdFlags) error {
				if err := checkMaxPayload(f); err != nil {
					return err
				}
				return checkPage(f.offset, f.limit)
			},
			run: cmdWaiting,
		},
		{
			name: "dead", args: "<topic> <group> [--after ID] [--limit N] [--payload]", summary: "list a group's dead letters, oldest first",
			help: "Lists the dead letters of a consumer group, oldest first: ID, time, attempts, UUID, reason.\nPass the last ID of a page to --after for the next page.\n" +
				"With --payload, each dead letter in full (see \"redisdelay help show\" for how payloads are printed).",
			minArgs: 2, maxArgs: 2,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.StringVar(&f.after, "after", "", "list the dead letters after the one with this `ID`")
				fs.IntVar(&f.limit, "limit", 100, "list at most `N` dead letters (1 to 10000)")
				payloadFlags(fs, f, true)
			},
			check: func(_ []string, f *cmdFlags) error {
				if err := checkMaxPayload(f); err != nil {
					return err
				}
				if f.after != "" {
					if err := checkDeadID(f.after); err != nil {
						return err
					}
				}
				return checkPage(0, f.limit)
			},
			run: cmdDead,
		},
		{
			name: "ready", args: "<topic> <group> [--limit N] [--cursor C] [--payload]", summary: "list a group's messages due and not fetched yet",
			help: "Lists the messages of a consumer group that are due and not yet fetched by its consumers: partition by\n" +
				"partition, the group's redelivery stream first (retries, requeued dead letters, grouped and\n" +
				"high-priority messages: its consumers fetch it first), then the topic's ready stream, each oldest\n" +
				"first. ID is <partition>:<r|m>:<entry ID>; QUEUED is when it was added to the stream. Grouped\n" +
				"messages queued in their groups (GROUPED in stats) are listed once a consumer's turn takes them.\n" +
				"A page reads at most --limit entries, whatever the backlog; the next page: --cursor C (on stderr).",
			minArgs: 2, maxArgs: 2, flags: listFlags, check: checkList, run: cmdReady,
		},
		{
			name: "pending", args: "<topic> <group> [--limit N] [--cursor C] [--payload]", summary: "list a group's messages held by its consumers",
			help: "Lists the messages consumers of the group fetched and have not settled (acked or nacked): the\n" +
				"consumer holding each, when it fetched it or last renewed its lease (a live subscription renews every\n" +
				"third of the visibility timeout), when the lease expires (then a scheduler reclaims it as a new\n" +
				"attempt: \"expired 4m0s ago\" means none runs, or the consumer is alive but cut off), the attempt.\n" +
				"Paged as \"redisdelay ready\".",
			minArgs: 2, maxArgs: 2, flags: listFlags, check: checkList, run: cmdPending,
		},
		{
			name: "retrying", args: "<topic> <group> [--limit N] [--cursor C] [--payload]", summary: "list a group's messages waiting for a retry delay",
			help: "Lists the messages of the group waiting in its retry set for their retry delay (after a Nack, a\n" +
				"handler timeout or a reclaim), partition by partition in due order: when each is due, and the attempt\n" +
				"it will be. Paged with --cursor; a message falling due between pages is not listed.",
			minArgs: 2, maxArgs: 2, flags: listFlags, check: checkList, run: cmdRetrying,
		},
		{
			name: "consumers", args: "<topic> [group]", summary: "list a topic's consumers: pending messages, last seen",
			help: "Lists the consumers Redis knows of each consumer group of the topic (or of one group): how many\n" +
				"messages each holds, how long it has been idle, and when it was last seen (it read or renewed a\n" +
				"lease). A live subscription reads at least every BlockTime (30 s) unless paused, and renews leases\n" +
				"while its handlers run: a consumer idle for minutes stopped (crashed, or hangs). Schedulers remove\n" +
				"consumers idle past the group's ConsumerIdleTimeout (1 h) once they hold nothing.",
			minArgs: 1, maxArgs: 2, run: cmdConsumers,
		},
		{
			name: "search", args: "<topic> [--group G] [--meta K=V]... [--key-prefix P] [--from T] [--to T] [--limit N] [--cursor C] [--payload]",
			summary: "find waiting messages or dead letters by metadata, business key or time",
			help: "Finds a topic's waiting messages, or with --group that group's dead letters, that match every\n" +
				"criterion given: metadata values (--meta, repeated), a business key prefix (--key-prefix), and\n" +
				"a due time (dead letters: the time they died) in [--from, --to). Times are RFC 3339, now, or a\n" +
				"signed duration from now: --from -2h, --to +10m. Without criteria every message matches.\n" +
				"It lists them as \"redisdelay waiting\" and \"redisdelay dead\" do, partition by partition as\n" +
				"stored (dead letters oldest first; waiting messages not in due order across the topic), reading on\n" +
				"until --limit match or all was read, but at most 100,000 stored messages: then, or at --limit, it\n" +
				"prints how to get the next page (--cursor C, on stderr; \"cursor\" in JSON, \"\" once all was read).\n" +
				"Give the next page the same --group and filter. Cost: a --from/--to range is looked up in Redis's\n" +
				"index, but metadata and key criteria are checked on every stored message read: a pass over N\n" +
				"messages takes N/10,000 Inspector calls, each reading 10,000.",
			minArgs: 1, maxArgs: 1,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.StringVar(&f.group, "group", "", "search the dead letters of consumer group `G` rather than the waiting messages")
				filterFlags(fs, f, "due (dead letters: that died)")
				fs.IntVar(&f.limit, "limit", 100, "list at most `N` matches (1 to 10000)")
				fs.StringVar(&f.cursor, "cursor", "", "go on from the cursor `C` a previous search printed (with the same --group and filter)")
				payloadFlags(fs, f, true)
			},
			check: func(_ []string, f *cmdFlags) error {
				if err := checkMaxPayload(f); err != nil {
					return err
				}
				if err := checkPage(0, f.limit); err != nil {
					return err
				}
				if err := f.checkFilter(time.Now()); err != nil {
					return err
				}
				switch {
				case f.cursor == "":
					return nil
				case f.group != "":
					return checkDeadCursor("--cursor", f.cursor)
				}
				return checkWaitingCursor("--cursor", f.cursor)
			},
			run: cmdSearch,
		},
		{
			name: "show", args: "<topic> (<uuid> | --key K) [--max-payload N]", summary: "find a message in any state and show it in full, with what happens next",
			help: "Finds the message with this UUID (or holding business key K) wherever it is: waiting for its due\n" +
				"time (near or far), waiting for the topic's first consumer group, and per consumer group ready,\n" +
				"queued in its group (SetGroup), pending with a consumer (which, since when, which attempt),\n" +
				"retrying (when, and why), dead, or acknowledged but still in the ready stream; it says what\n" +
				"happens next to it. Waiting messages are found by index; the other states by reading at most\n" +
				"10,000 entries of each stream (its oldest and newest), pending list, retry set, group queue and\n" +
				"dead letters, whatever the backlog: what that leaves unread is noted on stderr. It prints all\n" +
				"metadata and the payload: text with control characters and other characters a terminal would act\n" +
				"on escaped (\\x1b, \\u202e), anything that is not UTF-8 text as a hex dump, at most --max-payload\n" +
				"bytes. With --json the payload is a string, or payload_base64 when not UTF-8.\n" +
				"Exit status 3 when no such message is found.",
			minArgs: 1, maxArgs: 2,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				payloadFlags(fs, f, false)
				fs.StringVar(&f.key, "key", "", "find the message holding business key `K`")
			},
			check: func(pos []string, f *cmdFlags) error {
				switch {
				case len(pos) == 2 && f.key != "":
					return errors.New("give a UUID or --key, not both")
				case len(pos) == 1 && f.key == "":
					return errors.New("give the message's UUID, or --key K")
				}
				return checkMaxPayload(f)
			},
			run: cmdShow,
		},
		{
			name: "cancel", args: "<topic> (<uuid> | --key K | filter | --all) [--dry-run] [--resume C]", summary: "recall waiting messages: one, or those a filter selects",
			help: "Removes a delayed message that is still waiting, by its UUID or by its business key\n" +
				"(--key), so it is never delivered. Reports whether it was waiting (exit status 3 when it\n" +
				"was not; \"cancelled\": false in JSON): it is not when unknown, already cancelled, or already due.\n" +
				"\n" + bulkHelp("cancels", "waiting message of the topic", "a due time", "; with --all and --yes, every one"),
			minArgs: 1, maxArgs: 2,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.StringVar(&f.key, "key", "", "cancel the waiting message holding business key `K`")
				filterFlags(fs, f, "due")
				fs.BoolVar(&f.all, "all", false, "cancel every waiting message of the topic (with --yes)")
				fs.BoolVar(&f.yes, "yes", false, "really cancel them all, with --all")
				bulkFlags(fs, f)
			},
			check: func(pos []string, f *cmdFlags) error { return checkWaitingForm("cancel", pos, f) },
			run:   cmdCancel,
		},
		{
			name: "reschedule", args: "<topic> (<uuid> | --key K | filter | --all) (--in D | --at T) [--dry-run] [--resume C]", summary: "move waiting messages to a new due time: one, or those a filter selects",
			help: "Moves a delayed message that is still waiting, by its UUID or by its business key (--key), to\n" +
				"a new due time, in place: same UUID, body and key. --in 10m is due 10 minutes from now, --at an\n" +
				"RFC 3339 time (2030-01-02T15:04:05Z); a time already passed is due at once. Reports whether it\n" +
				"was waiting (exit status 3 when not; \"rescheduled\": false in JSON): it is not when unknown,\n" +
				"cancelled, or already due.\n" +
				"\n" + bulkHelp("moves to the new due time (--in: from the run's start)", "waiting message of the topic", "a due time", "; with --all and --yes, every one"),
			minArgs: 1, maxArgs: 2,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.StringVar(&f.key, "key", "", "reschedule the waiting message holding business key `K`")
				fs.Func("in", "due `D` from now (e.g. 90s, 10m, 2h; 0s: now, as run-now)", func(v string) error {
					d, err := time.ParseDuration(v)
					if err != nil {
						return errors.New("parse error: give a duration such as 90s, 10m or 2h (0s: now)")
					}
					f.in, f.inSet = d, true
					return nil
				})
				fs.StringVar(&f.at, "at", "", "due at `T`, an RFC 3339 time, or now")
				filterFlags(fs, f, "due")
				fs.BoolVar(&f.all, "all", false, "reschedule every waiting message of the topic (with --yes)")
				fs.BoolVar(&f.yes, "yes", false, "really reschedule them all, with --all")
				bulkFlags(fs, f)
			},
			check: func(pos []string, f *cmdFlags) error {
				if err := checkWaitingForm("reschedule", pos, f); err != nil {
					return err
				}
				switch {
				case f.at != "" && f.inSet:
					return errors.New("give --in or --at, not both")
				case f.at == "" && !f.inSet:
					return errors.New("give the new due time: --in D (from now; 0s: now) or --at T (RFC 3339, or now)")
				case f.in < 0:
					return fmt.Errorf("--in is %s: give a duration from now, 0s or more (0s: due now), or --at for a time", f.in)
				}
				if f.at != "" && f.at != "now" {
					if _, err := time.Parse(time.RFC3339Nano, f.at); err != nil {
						return fmt.Errorf("--at %q is not a time: give RFC 3339 (2030-01-02T15:04:05Z) or now", f.at)
					}
				}
				return nil
			},
			run: cmdReschedule,
		},
		{
			name: "run-now", args: "<topic> (<uuid> | --key K | filter | --all) [--dry-run] [--resume C]", summary: "make waiting messages due now: one, or those a filter selects",
			help: "Makes a delayed message that is still waiting due now, by its UUID or by its business key (--key),\n" +
				"in place (same UUID, body and key), by Redis's clock: the scheduler moves it to the consumer groups at\n" +
				"once, as at its due time (the same as \"reschedule --in 0s\"). Reports whether it was waiting (exit\n" +
				"status 3 when not; \"ran\": false in JSON). Warns when no scheduler holds the topic.\n" +
				"\n" + bulkHelp("makes due now", "waiting message of the topic", "a due time", "; with --all and --yes, every one"),
			minArgs: 1, maxArgs: 2,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.StringVar(&f.key, "key", "", "run the waiting message holding business key `K`")
				filterFlags(fs, f, "due")
				fs.BoolVar(&f.all, "all", false, "run every waiting message of the topic now (with --yes)")
				fs.BoolVar(&f.yes, "yes", false, "really run them all, with --all")
				bulkFlags(fs, f)
			},
			check: func(pos []string, f *cmdFlags) error { return checkWaitingForm("run-now", pos, f) },
			run:   cmdRunNow,
		},
		{
			name: "requeue", args: "<topic> <group> (<id>... | --all | filter) [--dry-run] [--resume C]", summary: "send dead letters back to their group",
			help: "Sends the given dead letters, or with --all every dead letter of the group, back to the group\nas a new first attempt.\n" +
				"\n" + bulkHelp("requeues", "dead letter of the group", "the time it died", ""),
			minArgs: 2, maxArgs: -1,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.BoolVar(&f.all, "all", false, "requeue every dead letter of the group")
				filterFlags(fs, f, "that died")
				bulkFlags(fs, f)
			},
			check: func(pos []string, f *cmdFlags) error {
				ids := len(pos) > 2
				if err := f.checkFilter(time.Now()); err != nil {
					return err
				}
				switch {
				case f.all && ids:
					return errors.New("give dead letter IDs or --all, not both")
				case f.all && f.hasFilter():
					return errors.New("give --all or a filter, not both: --all requeues every dead letter, a filter those it selects")
				case ids && f.hasFilter():
					return errors.New("give dead letter IDs or a filter, not both")
				case !ids && !f.bulk():
					return errors.New("give the IDs of the dead letters to requeue, " + filterHelp + " or --all")
				}
				if err := checkBulkExtras(f, "dead letter IDs", filterHelp+" or --all"); err != nil {
					return err
				}
				if f.resume != "" {
					if err := checkDeadCursor("--resume", f.resume); err != nil {
						return err
					}
				}
				for _, id := range pos[2:] {
					if err := checkDeadID(id); err != nil {
						return err
					}
				}
				return nil
			},
			run: cmdRequeue,
		},
		{
			name: "purge", args: "<topic> <group> --yes", summary: "delete all dead letters of a group",
			help: "Deletes every dead letter of the group for good. Without --yes it says what it would delete,\n" +
				"deletes nothing and exits with status 2.",
			minArgs: 2, maxArgs: 2,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.BoolVar(&f.yes, "yes", false, "really delete")
			},
			run: cmdPurge,
		},
		{
			name: "pause", args: "<topic> <group>", summary: "stop a group fetching messages of a topic",
			help: "Pauses the consumer group on the topic, in every process, until \"redisdelay resume\": its\n" +
				"subscribers fetch no new messages (those already fetched are still handled); messages keep\n" +
				"becoming due and accumulate (READY in \"redisdelay stats\"). The pause is kept in Redis and\n" +
				"outlasts restarts. An unknown group is refused (exit status 3), in case of a typo, unless\n" +
				"--create (or --force) asks to pause it before its first subscriber starts.",
			minArgs: 2, maxArgs: 2,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.BoolVar(&f.create, "create", false, "pause the group even though no subscriber created it yet")
				fs.BoolVar(&f.create, "force", false, "the same as --create")
			},
			run: cmdPause,
		},
		{
			name: "resume", args: "<topic> <group>", summary: "let a paused group fetch messages again",
			help:    "Resumes a paused consumer group: its subscribers are told and fetch again at once.\nReports whether the group was paused (exit status 0 either way).",
			minArgs: 2, maxArgs: 2,
			run: cmdResume,
		},
		{
			name: "delete-dead", args: "<topic> <group> (<id> | filter) [--dry-run] [--resume C]", summary: "delete one dead letter, or those a filter selects",
			help: "Deletes one dead letter for good. Reports whether it existed (exit status 0 either way).\n" +
				"\n" + bulkHelp("deletes for good", "dead letter of the group", "the time it died", "") +
				"\nTo delete every dead letter of the group: redisdelay purge <topic> <group> --yes.",
			minArgs: 2, maxArgs: 3,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				filterFlags(fs, f, "that died")
				bulkFlags(fs, f)
				// Declared to point whoever tries it at purge.
				fs.BoolVar(&f.all, "all", false, "not here: \"redisdelay purge <topic> <group> --yes\" deletes every dead letter")
			},
			check: func(pos []string, f *cmdFlags) error {
				if f.all {
					return errors.New("delete-dead has no --all: to delete every dead letter of the group, redisdelay purge <topic> <group> --yes")
				}
				if err := f.checkFilter(time.Now()); err != nil {
					return err
				}
				switch id := len(pos) > 2; {
				case id && f.hasFilter():
					return errors.New("give a dead letter ID or a filter, not both")
				case !id && !f.hasFilter():
					return errors.New("give the ID of the dead letter to delete or " + filterHelp + "; to delete every dead letter of the group: redisdelay purge <topic> <group> --yes")
				case id:
					if err := checkBulkExtras(f, "a dead letter ID", filterHelp); err != nil {
						return err
					}
					return checkDeadID(pos[2])
				case f.resume != "":
					return checkDeadCursor("--resume", f.resume)
				}
				return nil
			},
			run: cmdDeleteDead,
		},
		{
			name: "delete-group", args: "<topic> <group> --yes", summary: "delete a consumer group with everything it holds",
			help: "Deletes a consumer group of the topic with its position in the ready stream, pending messages,\n" +
				"retries and dead letters (Inspector.DeleteGroup): for a group no service consumes any more, which\n" +
				"keeps every later message in the ready stream. Stop its subscribers first: a running one creates\n" +
				"it again and reads everything still in the ready stream. Without --yes it says what it would\n" +
				"delete, deletes nothing and exits with status 2.",
			minArgs: 2, maxArgs: 2,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.BoolVar(&f.yes, "yes", false, "really delete")
			},
			run: cmdDeleteGroup,
		},
		{
			name: "schedules", summary: "list the recurring schedules",
			help: "Lists the recurring schedules (Publisher.Schedule): ID, spec, time zone, topic, the next tick\n" +
				"not yet published (UTC) and how long until it, the overlap policy (allow, or skip: a tick is\n" +
				"skipped while the previous tick's message is in flight) and how many ticks it skipped, with the\n" +
				"last. Managers publish the ticks.",
			maxArgs: 0, run: cmdSchedules,
		},
		{
			name: "unschedule", args: "<id>", summary: "remove a recurring schedule",
			help: "Removes a recurring schedule: no tick is published after it, except one being published.\n" +
				"Reports whether it existed (exit status 0 either way; \"removed\": false in JSON). A process that\n" +
				"registers it at start (Publisher.Schedule) registers it again.",
			minArgs: 1, maxArgs: 1, run: cmdUnschedule,
		},
		{
			name: "pause-schedule", args: "<id>", summary: "stop a recurring schedule ticking",
			help: "Pauses a recurring schedule: no tick is published until resume-schedule, except one being\n" +
				"published. Registering it again (Publisher.Schedule at a process's start) keeps it paused.",
			minArgs: 1, maxArgs: 1, run: cmdPauseSchedule,
		},
		{
			name: "resume-schedule", args: "<id>", summary: "let a paused schedule tick again",
			help: "Resumes a paused schedule at its first tick after now: the ticks it missed while paused are\n" +
				"not published.",
			minArgs: 1, maxArgs: 1, run: cmdResumeSchedule,
		},
		{
			name: "trigger", args: "<id>", summary: "publish one tick of a schedule now",
			help: "Publishes one tick of a schedule now, paused or not, as its tick loop would (same topic,\n" +
				"payload and metadata, the tick instant now), without moving its next tick.",
			minArgs: 1, maxArgs: 1, run: cmdTrigger,
		},
		{
			name: "ui", args: "[--addr-listen HOST:PORT] [--basic-auth-file F | --token-file F] [--read-only] [--allowed-host HOST]... [--ui-tls-cert F --ui-tls-key F] [--insecure]", summary: "serve the web dashboard",
			help: "Serves the operator dashboard (see docs/dashboard.md) until interrupted: topics and groups\n" +
				"refreshing live, the messages of each state (waiting, ready, pending, retrying, dead) and the\n" +
				"consumers, waiting messages run now, cancelled or rescheduled, dead letters requeued or deleted after a\n" +
				"confirmation, consumer groups paused and resumed, recurring schedules paused, resumed, triggered and\n" +
				"removed. Authentication, never from the command line: HTTP basic from --basic-auth-file (lines\n" +
				"user:password) or $REDISDELAY_UI_BASIC_AUTH (user:password), bearer tokens from --token-file (one a\n" +
				"line) or $REDISDELAY_UI_TOKEN; passwords and tokens of 12 characters or more; files readable by group\n" +
				"or others are refused (chmod 600), as ssh does. --read-only hides and refuses every action. On an\n" +
				"address other than loopback it refuses to start without authentication, read-only or not (every\n" +
				"payload shows), unless --insecure says something else protects it (a firewall, an authenticating\n" +
				"proxy). --ui-tls-cert and --ui-tls-key serve https directly (--tls-cert and --tls-key are Redis's).\n" +
				"Against DNS rebinding it answers only to loopback names, the --addr-listen address (the machine's\n" +
				"addresses for 0.0.0.0 or ::) and each --allowed-host: give the names you open it with.",
			maxArgs: 0, serve: true,
			flags: func(fs *flag.FlagSet, f *cmdFlags) {
				fs.StringVar(&f.listen, "addr-listen", "127.0.0.1:8080", "serve on this `host:port` (port 0: any free port)")
				fs.BoolVar(&f.readOnly, "read-only", false, "show only: no cancel, reschedule, run now, requeue, delete, pause, resume, trigger or remove")
				fs.Func("allowed-host", "also answer to this `host` or host:port (repeat, or separate with commas; \"*\": any), besides loopback and the --addr-listen address", func(v string) error {
					for _, h := range strings.Split(v, ",") {
						if h = strings.TrimSpace(h); h != "" {
							f.allowedHosts = append(f.allowedHosts, h)
						}
					}
					return nil
				})
				fs.StringVar(&f.basicAuthFile, "basic-auth-file", "", "require HTTP basic authentication by the users of `file` (lines user:password; # comments)")
				fs.StringVar(&f.tokenFile, "token-file", "", "accept the bearer tokens of `file` (one a line), as Authorization: Bearer <token>")
				fs.BoolVar(&f.insecure, "insecure", false, "serve an address other than loopback without authentication (something else protects it)")
				fs.StringVar(&f.uiTLSCert, "ui-tls-cert", "", "serve https with the PEM certificate (chain) of `file` (with --ui-tls-key)")
				fs.StringVar(&f.uiTLSKey, "ui-tls-key", "", "PEM private key `file` of --ui-tls-cert (not readable by group or others)")
			},
			run: cmdUI,
		},
	}
}

// bulkHelp is the part of an action's help about its bulk form.
func bulkHelp(does, subject, when, all string) string {
	return wrap(fmt.Sprintf("With a filter, it %s every %s that matches all the criteria given: "+
		"metadata values (--meta K=V, repeated), a business key prefix (--key-prefix P), and %s in "+
		"[--from, --to) (RFC 3339, now, or a signed duration from now: -2h, +10m)%s. --dry-run counts them "+
		"and changes nothing. Progress goes to stderr, at most a line a second. Interrupted (SIGINT, SIGTERM) "+
		"or failing, it prints the counts and the --resume cursor to go on from, and exits with status 1. "+
		"--timeout bounds each batch of 1,000 messages read, not the whole run.", does, subject, when, all), 100)
}

// wrap breaks a paragraph into lines of at most width characters.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(s) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// dueLayout shows a new due time to the millisecond, as it is kept.
const dueLayout = "2006-01-02T15:04:05.000Z07:00"

// showPage is the page size of show's scan.
const showPage = 1000

// tickOverdue is how late a schedule's next tick must be for schedules to
// warn: a tick loop publishes a due tick at once, and takes over from a
// stopped one within a minute (its read of the schedules).
const tickOverdue = time.Minute
