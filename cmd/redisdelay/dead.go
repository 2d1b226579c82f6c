// The commands on dead letters: dead, requeue, purge, delete-dead.

package main

import (
	"fmt"
	"strconv"
	"strings"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

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

func (e *env) deadJSON(d redisdelay.DeadLetter) deadJSON {
	out := toDeadJSON(d)
	if e.flags.payload && d.Message != nil {
		out.payloadJSON = toPayloadJSON(d.Message.Payload, e.flags.maxPayload)
	}
	return out
}
