package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/present"
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
	key           string
	payload       bool
	maxPayload    int
	listen        string
	readOnly      bool
	allowedHosts  []string      // ui --allowed-host
	basicAuthFile string        // ui --basic-auth-file
	tokenFile     string        // ui --token-file
	insecure      bool          // ui --insecure
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
				fs.DurationVar(&f.over, "over", 5*time.Second, "measure over `D`")
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
				fs.DurationVar(&f.maxOverdue, "max-overdue", 0, "a topic whose earliest waiting message is overdue by more than `D` has no working scheduler (default 1m)")
				fs.DurationVar(&f.stuckAfter, "stuck-after", 0, "a message held by a consumer with no sign of life for `D` is stuck (default: twice the group's visibility timeout)")
				fs.DurationVar(&f.consumerIdle, "consumer-idle", 0, "ready messages and no consumer active within `D` is a group that stopped (default: twice the visibility timeout)")
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
			name: "show", args: "<topic> <uuid> [--max-payload N]", summary: "show a waiting message or dead letter in full, payload included",
			help: "Shows the message with this UUID wherever it still is: waiting for its due time, or in the\n" +
				"dead letters of any consumer group (delivered and acknowledged messages are not kept). It prints\n" +
				"all metadata and the payload: text with control characters and other characters a terminal would\n" +
				"act on escaped (\\x1b, \\u202e), anything that is not UTF-8 text as a hex dump, at most\n" +
				"--max-payload bytes. With --json the payload is a string, or payload_base64 when not UTF-8.\n" +
				"Exit status 1 when no such message is found.",
			minArgs: 2, maxArgs: 2,
			flags: func(fs *flag.FlagSet, f *cmdFlags) { payloadFlags(fs, f, false) },
			check: func(_ []string, f *cmdFlags) error { return checkMaxPayload(f) },
			run:   cmdShow,
		},
		{
			name: "cancel", args: "<topic> (<uuid> | --key K | filter | --all) [--dry-run] [--resume C]", summary: "recall waiting messages: one, or those a filter selects",
			help: "Removes a delayed message that is still waiting, by its UUID or by its business key\n" +
				"(--key), so it is never delivered. Reports whether it was waiting (exit status 0 either\n" +
				"way; \"cancelled\": false in JSON): it is not when unknown, already cancelled, or already due.\n" +
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
				"was waiting (exit status 0 either way; \"rescheduled\": false in JSON): it is not when unknown,\n" +
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
				"status 0 either way; \"ran\": false in JSON). Warns when no scheduler holds the topic.\n" +
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
				"outlasts restarts. The group must exist.",
			minArgs: 2, maxArgs: 2,
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
			name: "ui", args: "[--addr-listen HOST:PORT] [--basic-auth-file F | --token-file F] [--read-only] [--allowed-host HOST]... [--insecure]", summary: "serve the web dashboard",
			help: "Serves the operator dashboard (see docs/dashboard.md) until interrupted: topics and groups\n" +
				"refreshing live, the messages of each state (waiting, ready, pending, retrying, dead) and the\n" +
				"consumers, waiting messages run now, cancelled or rescheduled, dead letters requeued or deleted after a\n" +
				"confirmation, consumer groups paused and resumed, recurring schedules paused, resumed, triggered and\n" +
				"removed. Authentication, never from the command line: HTTP basic from --basic-auth-file (lines\n" +
				"user:password) or $REDISDELAY_UI_BASIC_AUTH (user:password), bearer tokens from --token-file (one a\n" +
				"line) or $REDISDELAY_UI_TOKEN; passwords and tokens of 12 characters or more. --read-only hides and\n" +
				"refuses every action. On an address other than loopback it refuses to start without authentication or\n" +
				"--read-only, unless --insecure says something else protects it (a firewall, an authenticating proxy).\n" +
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
				fs.BoolVar(&f.insecure, "insecure", false, "serve an address other than loopback with neither authentication nor --read-only (something else protects it)")
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

// checkWaitingForm checks which form of cancel or reschedule the command
// line asks for: one message (a UUID or --key), a filter, or --all.
func checkWaitingForm(name string, pos []string, f *cmdFlags) error {
	if err := f.checkFilter(time.Now()); err != nil {
		return err
	}
	uuid := len(pos) > 1
	does, verb := name+"s", name
	if name == "run-now" {
		does, verb = "makes due now", "run now"
	}
	switch {
	case f.key != "" && uuid:
		return errors.New("give a UUID or --key, not both")
	case f.all && (uuid || f.key != ""):
		return fmt.Errorf("--all %s every waiting message: give it without a UUID or --key", does)
	case f.all && f.hasFilter():
		return fmt.Errorf("give --all or a filter, not both: --all %s every waiting message, a filter those it selects", does)
	case f.hasFilter() && uuid:
		return errors.New("give a UUID or a filter, not both: a filter selects messages by what they carry")
	case f.hasFilter() && f.key != "":
		return errors.New("give --key or a filter, not both (--key-prefix selects messages by the start of their business key)")
	case !uuid && f.key == "" && !f.bulk():
		return fmt.Errorf("give the UUID of the message to %s, --key K, %s or --all", verb, filterHelp)
	}
	if err := checkBulkExtras(f, "a UUID or --key", filterHelp+" or --all"); err != nil {
		return err
	}
	if f.resume != "" {
		return checkBulkCursor("--resume", f.resume)
	}
	return nil
}

// checkPage checks --offset and --limit before Redis is asked.
func checkPage(offset, limit int) error {
	if offset < 0 {
		return fmt.Errorf("--offset is %d: use 0 or more", offset)
	}
	if limit < 1 || limit > 10000 {
		return fmt.Errorf("--limit is %d: use 1 to 10000", limit)
	}
	return nil
}

// checkDeadID checks the form of a dead letter ID ("<ms>-<seq>", or
// "<partition>/<ms>-<seq>"), so a mistyped one is a usage error rather
// than an error from Redis or a silent no-op.
func checkDeadID(id string) error {
	rest := id
	if p, after, ok := strings.Cut(id, "/"); ok {
		if n, err := strconv.Atoi(p); err != nil || n < 1 {
			return fmt.Errorf("dead letter ID %q is malformed: its partition %q is not a number from 1 (see the IDs \"redisdelay dead\" lists)", id, p)
		}
		rest = after
	}
	ms, seq, ok := strings.Cut(rest, "-")
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("dead letter ID %q is malformed: use \"<ms>-<seq>\" or \"<partition>/<ms>-<seq>\" as \"redisdelay dead\" lists them", id)
	}
	return nil
}

// warnInvalidTopics reports registry entries that are not topic names,
// which the listing skips.
func (e *env) warnInvalidTopics() error {
	bad, err := e.insp.InvalidTopics(e.ctx)
	if err != nil || len(bad) == 0 {
		return err
	}
	quoted := make([]string, len(bad))
	for i, b := range bad {
		quoted[i] = strconv.Quote(b)
	}
	slices.Sort(quoted)
	fmt.Fprintf(e.stderr, "redisdelay: skipped %d entr%s of the topic registry %s that %s not a valid topic name: %s (remove with SREM)\n",
		len(bad), map[bool]string{true: "y", false: "ies"}[len(bad) == 1], strconv.Quote(e.opts.prefix+":topics"),
		map[bool]string{true: "is", false: "are"}[len(bad) == 1], strings.Join(quoted, ", "))
	return nil
}

func cmdTopics(e *env, _ []string) error {
	topics, err := e.insp.Topics(e.ctx)
	if err != nil {
		return err
	}
	if err := e.warnInvalidTopics(); err != nil {
		return err
	}
	slices.Sort(topics)
	if e.opts.json {
		return writeJSON(e.stdout, nonNil(topics))
	}
	if len(topics) == 0 {
		fmt.Fprintf(e.stdout, "no topics under prefix %q\n", e.opts.prefix)
		return nil
	}
	for _, t := range topics {
		fmt.Fprintln(e.stdout, printable(t))
	}
	return nil
}

// knownTopics fails when a topic is not registered under the prefix: a
// typo would otherwise show empty counts, or requeue and purge nothing.
func (e *env) knownTopics(topics ...string) error {
	all, err := e.insp.Topics(e.ctx)
	if err != nil {
		return err
	}
	for _, t := range topics {
		if !slices.Contains(all, t) {
			return fmt.Errorf("redisdelay: topic %q is not known under prefix %q (no Publisher or Subscriber has used it); see \"redisdelay topics\"", t, e.opts.prefix)
		}
	}
	return nil
}

// knownGroup fails when the topic or the group is unknown, and returns the
// topic's stats.
func (e *env) knownGroup(topic, group string) (redisdelay.TopicStats, error) {
	if err := e.knownTopics(topic); err != nil {
		return redisdelay.TopicStats{}, err
	}
	st, err := e.insp.Stats(e.ctx, topic)
	if err != nil {
		return st, err
	}
	var names []string
	for _, g := range st.Groups {
		if g.Group == group {
			return st, nil
		}
		names = append(names, g.Group)
	}
	known := "it has none"
	if len(names) > 0 {
		slices.Sort(names)
		known = "its groups: " + strings.Join(names, ", ")
	}
	return st, fmt.Errorf("redisdelay: topic %q has no consumer group %q (%s)", topic, group, known)
}

func groupStats(st redisdelay.TopicStats, group string) redisdelay.GroupStats {
	for _, g := range st.Groups {
		if g.Group == group {
			return g
		}
	}
	return redisdelay.GroupStats{Group: group}
}

func cmdStats(e *env, topics []string) error {
	if len(topics) == 0 {
		var err error
		if topics, err = e.insp.Topics(e.ctx); err != nil {
			return err
		}
		if err := e.warnInvalidTopics(); err != nil {
			return err
		}
		slices.Sort(topics)
	} else if err := e.knownTopics(topics...); err != nil {
		return err
	}
	all := make([]topicStatus, 0, len(topics))
	for _, t := range topics {
		st, err := e.insp.Stats(e.ctx, t)
		if err != nil {
			return err
		}
		slices.SortFunc(st.Groups, func(a, b redisdelay.GroupStats) int { return strings.Compare(a.Group, b.Group) })
		ts := topicStatus{TopicStats: st}
		if st.Waiting > 0 {
			if ts.overdue, err = e.insp.Overdue(e.ctx, t); err != nil {
				return err
			}
		}
		all = append(all, ts)
	}
	defer e.warnStalled(all)
	if e.opts.json {
		out := make([]statsJSON, 0, len(all))
		for _, st := range all {
			out = append(out, toStatsJSON(st))
		}
		return writeJSON(e.stdout, out)
	}
	if len(all) == 0 {
		fmt.Fprintf(e.stdout, "no topics under prefix %q\n", e.opts.prefix)
		return nil
	}
	writeStatsTable(e.stdout, all)
	return nil
}

func cmdWaiting(e *env, pos []string) error {
	topic, f := pos[0], e.flags
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	msgs, err := e.insp.Waiting(e.ctx, topic, f.offset, f.limit)
	if err != nil {
		return err
	}
	now := e.now()
	if e.opts.json {
		out := make([]waitingJSON, 0, len(msgs))
		for _, m := range msgs {
			out = append(out, e.waitingJSON(m, now))
		}
		return writeJSON(e.stdout, out)
	}
	if len(msgs) == 0 {
		fmt.Fprintf(e.stdout, "no waiting messages in topic %q", topic)
		if f.offset > 0 {
			fmt.Fprintf(e.stdout, " after offset %d", f.offset)
		}
		fmt.Fprintln(e.stdout)
		return nil
	}
	if f.payload {
		writeWaitingRecords(e.stdout, msgs, now, f.maxPayload)
	} else {
		writeWaitingTable(e.stdout, msgs, now)
	}
	if len(msgs) == f.limit {
		fmt.Fprintf(e.stderr, "(first %d shown; next page: --offset %d)\n", f.limit, f.offset+f.limit)
	}
	return nil
}

func cmdDead(e *env, pos []string) error {
	topic, group, f := pos[0], pos[1], e.flags
	if _, err := e.knownGroup(topic, group); err != nil {
		return err
	}
	dead, err := e.insp.DeadLetters(e.ctx, topic, group, f.after, f.limit)
	if err != nil {
		return err
	}
	if e.opts.json {
		out := make([]deadJSON, 0, len(dead))
		for _, d := range dead {
			out = append(out, e.deadJSON(d))
		}
		return writeJSON(e.stdout, out)
	}
	if len(dead) == 0 {
		fmt.Fprintf(e.stdout, "no dead letters in group %q of topic %q", group, topic)
		if f.after != "" {
			fmt.Fprintf(e.stdout, " after %s", f.after)
		}
		fmt.Fprintln(e.stdout)
		return nil
	}
	if f.payload {
		writeDeadRecords(e.stdout, group, dead, f.maxPayload)
	} else {
		writeDeadTable(e.stdout, dead)
	}
	if len(dead) == f.limit {
		fmt.Fprintf(e.stderr, "(first %d shown; next page: --after %s)\n", f.limit, dead[len(dead)-1].ID)
	}
	return nil
}

func cmdCancel(e *env, pos []string) error {
	topic := pos[0]
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	if e.flags.bulk() {
		return e.cancelWhere(topic)
	}
	// The Inspector looks in every partition, by the count stored in Redis.
	out := cancelJSON{Topic: topic, Key: e.flags.key}
	var err error
	if out.Key != "" {
		out.Cancelled, err = e.insp.CancelKey(e.ctx, topic, out.Key)
	} else {
		out.UUID = pos[1]
		out.Cancelled, err = e.insp.Cancel(e.ctx, topic, out.UUID)
	}
	switch {
	case err != nil:
		return err
	case e.opts.json:
		return writeJSON(e.stdout, out)
	case out.Key != "" && out.Cancelled:
		fmt.Fprintf(e.stdout, "cancelled the message holding business key %q in topic %q\n", out.Key, topic)
	case out.Key != "":
		fmt.Fprintf(e.stdout, "not cancelled: no waiting message holds business key %q in topic %q (unknown, already cancelled, or already due)\n", out.Key, topic)
	case out.Cancelled:
		fmt.Fprintf(e.stdout, "cancelled message %s in topic %q\n", out.UUID, topic)
	default:
		fmt.Fprintf(e.stdout, "not cancelled: no message %s is waiting in topic %q (unknown, already cancelled, or already due)\n", out.UUID, topic)
	}
	return nil
}

func cmdReschedule(e *env, pos []string) error {
	topic := pos[0]
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	f := e.flags
	due := time.Now().Add(f.in)
	if f.at != "" && f.at != "now" {
		due, _ = time.Parse(time.RFC3339Nano, f.at) // checked
	}
	if f.bulk() {
		err := e.rescheduleWhere(topic, due)
		if err == nil && !f.dryRun {
			e.warnUnscheduled(topic)
		}
		return err
	}
	out := rescheduleJSON{Topic: topic, Key: f.key, Due: due.UTC()}
	var err error
	if out.Key != "" {
		out.Rescheduled, err = e.insp.RescheduleKey(e.ctx, topic, out.Key, due)
	} else {
		out.UUID = pos[1]
		out.Rescheduled, err = e.insp.Reschedule(e.ctx, topic, out.UUID, due)
	}
	if err == nil && out.Rescheduled {
		// Show the due time as stored: Redis's clock sets it, to the ms.
		var w redisdelay.WaitingMessage
		var found bool
		if out.Key != "" {
			w, found, err = e.insp.FindWaitingKey(e.ctx, topic, out.Key)
		} else {
			w, found, err = e.insp.FindWaiting(e.ctx, topic, out.UUID)
		}
		if found {
			out.Due = w.Due.UTC()
		}
	}
	when := out.Due.Format(dueLayout)
	if err == nil && out.Rescheduled {
		e.warnUnscheduled(topic)
	}
	switch {
	case err != nil:
		return err
	case e.opts.json:
		return writeJSON(e.stdout, out)
	case out.Key != "" && out.Rescheduled:
		fmt.Fprintf(e.stdout, "rescheduled the message holding business key %q in topic %q to %s\n", out.Key, topic, when)
	case out.Key != "":
		fmt.Fprintf(e.stdout, "not rescheduled: no waiting message holds business key %q in topic %q (unknown, cancelled, or already due)\n", out.Key, topic)
	case out.Rescheduled:
		fmt.Fprintf(e.stdout, "rescheduled message %s in topic %q to %s\n", out.UUID, topic, when)
	default:
		fmt.Fprintf(e.stdout, "not rescheduled: no message %s is waiting in topic %q (unknown, cancelled, or already due)\n", out.UUID, topic)
	}
	return nil
}

// dueLayout shows a new due time to the millisecond, as it is kept.
const dueLayout = "2006-01-02T15:04:05.000Z07:00"

func cmdRequeue(e *env, pos []string) error {
	topic, group, ids := pos[0], pos[1], pos[2:]
	if _, err := e.knownGroup(topic, group); err != nil {
		return err
	}
	// --all alone keeps its output of before the bulk forms; counting it
	// or going on with it is the bulk form's.
	if f := e.flags; f.hasFilter() || (f.all && (f.dryRun || f.resume != "")) {
		return e.requeueWhere(topic, group)
	}
	out := requeueJSON{Topic: topic, Group: group, Missing: []string{}}
	if e.flags.all {
		n, err := e.insp.RequeueDeadLetters(e.ctx, topic, group)
		out.Requeued = n
		if err != nil {
			if n > 0 {
				fmt.Fprintf(e.stderr, "redisdelay: %s requeued before the error\n", deadLetters(n))
			}
			return err
		}
	} else {
		for _, id := range ids {
			ok, err := e.insp.RequeueDeadLetter(e.ctx, topic, group, id)
			if err != nil {
				if out.Requeued > 0 {
					fmt.Fprintf(e.stderr, "redisdelay: %s requeued before the error\n", deadLetters(out.Requeued))
				}
				return err
			}
			if ok {
				out.Requeued++
			} else {
				out.Missing = append(out.Missing, id)
			}
		}
	}
	if e.opts.json {
		return writeJSON(e.stdout, out)
	}
	fmt.Fprintf(e.stdout, "requeued %s to group %q of topic %q\n", deadLetters(out.Requeued), group, topic)
	if len(out.Missing) > 0 {
		fmt.Fprintf(e.stdout, "not found (already requeued or deleted?): %s\n", strings.Join(out.Missing, " "))
	}
	return nil
}

func cmdPurge(e *env, pos []string) error {
	topic, group := pos[0], pos[1]
	st, err := e.knownGroup(topic, group)
	if err != nil {
		return err
	}
	if !e.flags.yes {
		g := groupStats(st, group)
		return usagef(lookup("purge"), "purge: would delete %s of group %q in topic %q for good (see \"redisdelay dead %s %s\"); nothing deleted: add --yes to delete them",
			deadLetters(g.Dead), group, topic, topic, group)
	}
	n, err := e.insp.PurgeDeadLetters(e.ctx, topic, group)
	if err != nil {
		return err
	}
	if e.opts.json {
		return writeJSON(e.stdout, purgeJSON{Topic: topic, Group: group, Purged: n})
	}
	fmt.Fprintf(e.stdout, "purged %s of group %q in topic %q\n", deadLetters(n), group, topic)
	return nil
}

func cmdPause(e *env, pos []string) error {
	topic, group := pos[0], pos[1]
	// As Inspector.Pause: a group may be paused before its first
	// subscriber starts (docs/flow-control.md). Say so, in case of a typo.
	if _, err := e.knownGroup(topic, group); err != nil {
		fmt.Fprintf(e.stderr, "redisdelay: note: %s; it is paused all the same, before its first subscriber starts: check the name\n",
			strings.TrimPrefix(err.Error(), "redisdelay: "))
	}
	was, err := e.insp.Paused(e.ctx, topic, group)
	if err != nil {
		return err
	}
	if err := e.insp.Pause(e.ctx, topic, group); err != nil {
		return err
	}
	if e.opts.json {
		return writeJSON(e.stdout, pauseJSON{Topic: topic, Group: group, Paused: true, WasPaused: was})
	}
	if was {
		fmt.Fprintf(e.stdout, "group %q of topic %q was already paused\n", group, topic)
		return nil
	}
	fmt.Fprintf(e.stdout, "paused group %q of topic %q: its messages accumulate until \"redisdelay resume %s %s\"\n", group, topic, topic, group)
	return nil
}

func cmdResume(e *env, pos []string) error {
	topic, group := pos[0], pos[1]
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	was, err := e.insp.Resume(e.ctx, topic, group)
	if err != nil {
		return err
	}
	if e.opts.json {
		return writeJSON(e.stdout, pauseJSON{Topic: topic, Group: group, Paused: false, WasPaused: was})
	}
	if !was {
		fmt.Fprintf(e.stdout, "group %q of topic %q was not paused\n", group, topic)
		return nil
	}
	fmt.Fprintf(e.stdout, "resumed group %q of topic %q\n", group, topic)
	return nil
}

func cmdDeleteDead(e *env, pos []string) error {
	topic, group := pos[0], pos[1]
	if _, err := e.knownGroup(topic, group); err != nil {
		return err
	}
	if e.flags.hasFilter() {
		return e.deleteDeadWhere(topic, group)
	}
	id := pos[2]
	ok, err := e.insp.DeleteDeadLetter(e.ctx, topic, group, id)
	if err != nil {
		return err
	}
	if e.opts.json {
		return writeJSON(e.stdout, deleteJSON{Topic: topic, Group: group, ID: id, Deleted: ok})
	}
	if ok {
		fmt.Fprintf(e.stdout, "deleted dead letter %s of group %q in topic %q\n", id, group, topic)
	} else {
		fmt.Fprintf(e.stdout, "not deleted: no dead letter %s in group %q of topic %q\n", id, group, topic)
	}
	return nil
}

// deadLetters counts dead letters in words: "1 dead letter", "2 dead letters".
func deadLetters[N int | int64](n N) string {
	if n == 1 {
		return "1 dead letter"
	}
	return fmt.Sprintf("%d dead letters", n)
}

// waitingJSON and deadJSON add the payload when it was asked for.
func (e *env) waitingJSON(m redisdelay.WaitingMessage, now time.Time) waitingJSON {
	out := toWaitingJSON(m, now)
	if e.flags.payload && m.Corrupt == "" {
		out.payloadJSON = toPayloadJSON(m.Message.Payload, e.flags.maxPayload)
	}
	return out
}

func (e *env) deadJSON(d redisdelay.DeadLetter) deadJSON {
	out := toDeadJSON(d)
	if e.flags.payload && d.Message != nil {
		out.payloadJSON = toPayloadJSON(d.Message.Payload, e.flags.maxPayload)
	}
	return out
}

// showJSON is show's output: where the message was found.
type showJSON struct {
	Topic   string        `json:"topic"`
	UUID    string        `json:"uuid"`
	Waiting []waitingJSON `json:"waiting"`
	Dead    []groupDead   `json:"dead"`
}

type groupDead struct {
	Group string `json:"group"`
	deadJSON
}

// cmdShow looks for the UUID among the topic's waiting messages and every
// group's dead letters, a page at a time: the Inspector has no index by
// UUID, and an operator's look-up can afford the scan.
func cmdShow(e *env, pos []string) error {
	topic, uuid := pos[0], pos[1]
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	e.flags.payload = true
	now := e.now()
	var waiting []redisdelay.WaitingMessage
	for offset := 0; ; offset += showPage {
		page, err := e.insp.Waiting(e.ctx, topic, offset, showPage)
		if err != nil {
			return err
		}
		for _, m := range page {
			if m.Message.UUID == uuid {
				waiting = append(waiting, m)
			}
		}
		if len(page) < showPage {
			break
		}
	}
	st, err := e.insp.Stats(e.ctx, topic)
	if err != nil {
		return err
	}
	slices.SortFunc(st.Groups, func(a, b redisdelay.GroupStats) int { return strings.Compare(a.Group, b.Group) })
	type found struct {
		group string
		dead  redisdelay.DeadLetter
	}
	var dead []found
	for _, g := range st.Groups {
		for after := ""; ; {
			page, err := e.insp.DeadLetters(e.ctx, topic, g.Group, after, showPage)
			if err != nil {
				return err
			}
			for _, d := range page {
				if d.Message != nil && d.Message.UUID == uuid {
					dead = append(dead, found{g.Group, d})
				}
			}
			if len(page) < showPage {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	if len(waiting) == 0 && len(dead) == 0 {
		return fmt.Errorf("redisdelay: no waiting message and no dead letter has UUID %q in topic %q (delivered and acknowledged messages are not kept; see \"redisdelay stats %s\")", uuid, topic, topic)
	}
	if e.opts.json {
		out := showJSON{Topic: topic, UUID: uuid, Waiting: []waitingJSON{}, Dead: []groupDead{}}
		for _, m := range waiting {
			out.Waiting = append(out.Waiting, e.waitingJSON(m, now))
		}
		for _, d := range dead {
			out.Dead = append(out.Dead, groupDead{d.group, e.deadJSON(d.dead)})
		}
		return writeJSON(e.stdout, out)
	}
	writeWaitingRecords(e.stdout, waiting, now, e.flags.maxPayload)
	for i, d := range dead {
		if i > 0 || len(waiting) > 0 {
			fmt.Fprintln(e.stdout)
		}
		writeDeadRecords(e.stdout, d.group, []redisdelay.DeadLetter{d.dead}, e.flags.maxPayload)
	}
	return nil
}

// showPage is the page size of show's scan.
const showPage = 1000

func cmdSchedules(e *env, _ []string) error {
	all, err := e.insp.Schedules(e.ctx)
	if err != nil {
		return err
	}
	now := e.now()
	defer e.warnLateTicks(all, now)
	if e.opts.json {
		out := make([]scheduleJSON, 0, len(all))
		for _, s := range all {
			out = append(out, toScheduleJSON(s))
		}
		return writeJSON(e.stdout, out)
	}
	if len(all) == 0 {
		fmt.Fprintf(e.stdout, "no schedules under prefix %q\n", e.opts.prefix)
		return nil
	}
	writeSchedulesTable(e.stdout, all, now)
	return nil
}

// warnLateTicks warns, on stderr, of schedules whose next tick is overdue:
// no scheduler runs under the prefix.
func (e *env) warnLateTicks(all []redisdelay.Schedule, now time.Time) {
	for _, s := range all {
		if late := now.Sub(s.Next); s.Paused.IsZero() && late >= tickOverdue {
			fmt.Fprintf(e.stderr, "redisdelay: warning: schedule %q's next tick is overdue by %s: no scheduler publishes ticks under prefix %q "+
				"(run a redisdelay Manager, or a Subscriber without DisableScheduler)\n", printable(s.ID), present.Duration(late), e.opts.prefix)
		}
	}
}

// tickOverdue is how late a schedule's next tick must be for schedules to
// warn: a tick loop publishes a due tick at once, and takes over from a
// stopped one within a minute (its read of the schedules).
const tickOverdue = time.Minute

func cmdPauseSchedule(e *env, pos []string) error {
	was, err := e.insp.PauseSchedule(e.ctx, pos[0])
	switch {
	case err != nil:
		return e.scheduleErr(err, pos[0])
	case e.opts.json:
		return writeJSON(e.stdout, schedulePauseJSON{ID: pos[0], Paused: true, WasPaused: !was})
	case was:
		fmt.Fprintf(e.stdout, "paused schedule %q: no tick until \"redisdelay resume-schedule %s\"\n", pos[0], pos[0])
	default:
		fmt.Fprintf(e.stdout, "schedule %q was already paused\n", pos[0])
	}
	return nil
}

func cmdResumeSchedule(e *env, pos []string) error {
	was, err := e.insp.ResumeSchedule(e.ctx, pos[0])
	if err != nil {
		return e.scheduleErr(err, pos[0])
	}
	// The next tick as stored: counted from Redis's clock.
	out := schedulePauseJSON{ID: pos[0], Paused: false, WasPaused: was}
	all, err := e.insp.Schedules(e.ctx)
	if err != nil {
		return err
	}
	for _, s := range all {
		if s.ID == pos[0] && !s.Next.IsZero() {
			next := s.Next.UTC()
			out.Next = &next
		}
	}
	next := ""
	if out.Next != nil {
		next = fmt.Sprintf(": next tick at %s (%s)", out.Next.Format(time.RFC3339), dueIn(*out.Next, e.now()))
	}
	switch {
	case e.opts.json:
		return writeJSON(e.stdout, out)
	case was:
		fmt.Fprintf(e.stdout, "resumed schedule %q%s; the ticks it missed while paused are not published\n", pos[0], next)
	default:
		fmt.Fprintf(e.stdout, "schedule %q was not paused%s\n", pos[0], next)
	}
	return nil
}

func cmdTrigger(e *env, pos []string) error {
	if err := e.insp.TriggerSchedule(e.ctx, pos[0]); err != nil {
		return e.scheduleErr(err, pos[0])
	}
	if e.opts.json {
		if err := writeJSON(e.stdout, triggerJSON{ID: pos[0], Triggered: true}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "published a tick of schedule %q\n", pos[0])
	}
	if all, err := e.insp.Schedules(e.ctx); err == nil {
		for _, s := range all {
			if s.ID == pos[0] {
				e.warnUnscheduled(s.Topic)
			}
		}
	}
	return nil
}

// scheduleErr words an error of an action on a schedule for the CLI: an
// unknown ID points to the listing.
func (e *env) scheduleErr(err error, id string) error {
	if errors.Is(err, redisdelay.ErrUnknownSchedule) {
		return fmt.Errorf("redisdelay: no schedule %q under prefix %q: see \"redisdelay schedules\" for their IDs", id, e.opts.prefix)
	}
	return err
}

func cmdUnschedule(e *env, pos []string) error {
	removed, err := e.insp.RemoveSchedule(e.ctx, pos[0])
	switch {
	case err != nil:
		return err
	case e.opts.json:
		return writeJSON(e.stdout, unscheduleJSON{ID: pos[0], Removed: removed})
	case removed:
		fmt.Fprintf(e.stdout, "removed schedule %q\n", pos[0])
	default:
		fmt.Fprintf(e.stdout, "not removed: no schedule %q under prefix %q (see \"redisdelay schedules\")\n", pos[0], e.opts.prefix)
	}
	return nil
}
