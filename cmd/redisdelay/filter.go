package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// filterHelp names the filter flags in usage errors.
const filterHelp = "a filter (--meta K=V, --key-prefix P, --from T, --to T)"

// filterFlags are the flags that select messages by what they carry, for
// search and the bulk forms of the actions.
func filterFlags(fs *flag.FlagSet, f *cmdFlags, when string) {
	fs.Func("meta", "select messages whose metadata holds `K=V`: key K with value V (repeat: all must hold)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		switch {
		case !ok:
			return fmt.Errorf("no '=' in %q: give K=V, a metadata key and its value (K= for an empty value)", v)
		case k == "":
			return fmt.Errorf("no key before '=' in %q: give K=V, a metadata key and its value", v)
		}
		if old, dup := f.meta[k]; dup && old != val {
			return fmt.Errorf("key %q given twice (%q and %q): no message holds both", k, old, val)
		}
		if f.meta == nil {
			f.meta = map[string]string{}
		}
		f.meta[k] = val
		return nil
	})
	fs.StringVar(&f.keyPrefix, "key-prefix", "", "select messages whose business key starts with `P`")
	fs.StringVar(&f.from, "from", "", "select messages "+when+" at or after `T`: an RFC 3339 time, now, or a signed duration from now (-2h, +10m)")
	fs.StringVar(&f.to, "to", "", "select messages "+when+" before `T` (as --from)")
}

// bulkFlags are the flags of the bulk forms of the actions.
func bulkFlags(fs *flag.FlagSet, f *cmdFlags) {
	fs.BoolVar(&f.dryRun, "dry-run", false, "count the messages it would act on, and change nothing")
	fs.StringVar(&f.resume, "resume", "", "go on with a bulk action that stopped, from the cursor `C` it printed (with the same filter)")
}

// hasFilter reports whether a filter flag was given.
func (f *cmdFlags) hasFilter() bool {
	return len(f.meta) > 0 || f.keyPrefix != "" || f.from != "" || f.to != ""
}

// bulk reports whether the command line asks for a bulk form.
func (f *cmdFlags) bulk() bool { return f.all || f.hasFilter() }

func (f *cmdFlags) filter() redisdelay.Filter {
	return redisdelay.Filter{Metadata: f.meta, BusinessKeyPrefix: f.keyPrefix, From: f.fromT, To: f.toT}
}

// checkFilter parses --from and --to, relative ones against now, so that
// a bad time is a usage error before Redis is asked.
func (f *cmdFlags) checkFilter(now time.Time) error {
	var err error
	if f.fromT, err = parseWhen("--from", f.from, now); err != nil {
		return err
	}
	if f.toT, err = parseWhen("--to", f.to, now); err != nil {
		return err
	}
	if !f.fromT.IsZero() && !f.toT.IsZero() && !f.toT.After(f.fromT) {
		return fmt.Errorf("--to %s is not after --from %s: give an increasing range, or one side only", f.to, f.from)
	}
	return nil
}

// parseWhen reads a --from or --to time: RFC 3339, "now", or a duration
// with its sign, which says which side of now it is on (a bare "10m"
// would leave that to guess: the past for dead letters, the future for
// waiting messages).
func parseWhen(name, v string, now time.Time) (time.Time, error) {
	switch {
	case v == "":
		return time.Time{}, nil
	case v == "now":
		return now, nil
	case strings.HasPrefix(v, "+") || strings.HasPrefix(v, "-"):
		if d, err := time.ParseDuration(v); err == nil {
			return now.Add(d), nil
		}
	default:
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s %q is not a time: give an RFC 3339 time (2030-01-02T15:04:05Z), now, or a signed duration from now (-2h, +10m, +90s)", name, v)
}

// checkBulkExtras fails when --dry-run, --resume or --yes come with the
// form that acts on one message (or on given ones), which they do not
// apply to.
func checkBulkExtras(f *cmdFlags, one, bulk string) error {
	if f.bulk() {
		return nil
	}
	for _, x := range []struct {
		set  bool
		name string
	}{{f.dryRun, "--dry-run"}, {f.resume != "", "--resume"}, {f.yes, "--yes"}} {
		if x.set {
			return fmt.Errorf("%s goes with %s, not with %s", x.name, bulk, one)
		}
	}
	return nil
}

// checkWaitingCursor checks the form of a cursor of a search of waiting
// messages ("<partition>:n:<score>:<member>" or
// "<partition>:f:<bucket>:<position>", as the Inspector writes them), so
// that a mangled one is a usage error; one naming a partition the topic
// lacks is left to the Inspector.
func checkWaitingCursor(name, c string) error {
	if strings.HasPrefix(c, "bulk:") {
		return fmt.Errorf("%s %q is the cursor of a bulk action (cancel, reschedule: for their --resume), not of a search: pass the one the search printed, unchanged", name, c)
	}
	if !searchCursor(c) {
		return fmt.Errorf("%s %q is not a cursor over waiting messages as redisdelay prints them (\"0:n:1838490454556672:<uuid>\"): pass the one printed, unchanged", name, c)
	}
	return nil
}

// checkBulkCursor checks the form of the cursor of a bulk action on
// waiting messages ("bulk:<partition>:far:<bucket>:<position>" or
// "bulk:<partition>:near:<n>"; a search's, which they printed before,
// is taken too).
func checkBulkCursor(name, c string) error {
	parts := strings.Split(c, ":")
	ok := searchCursor(c)
	if !ok && len(parts) >= 4 && parts[0] == "bulk" {
		_, err := strconv.ParseUint(parts[1], 10, 31)
		ok = err == nil
		switch {
		case len(parts) == 4 && parts[2] == "near":
			_, err := strconv.ParseUint(parts[3], 10, 64)
			ok = ok && err == nil
		case len(parts) == 5 && parts[2] == "far":
			_, err1 := strconv.ParseUint(parts[3], 10, 63)
			_, err2 := strconv.ParseUint(parts[4], 10, 63)
			ok = ok && err1 == nil && err2 == nil
		default:
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("%s %q is not a cursor of a bulk action as redisdelay prints them (\"bulk:0:near:1382\"): pass the one printed, unchanged", name, c)
	}
	return nil
}

// searchCursor reports whether c has the form of a search's cursor over
// waiting messages.
func searchCursor(c string) bool {
	parts := strings.SplitN(c, ":", 4)
	if len(parts) != 4 {
		return false
	}
	if _, err := strconv.ParseUint(parts[0], 10, 31); err != nil {
		return false
	}
	switch parts[1] {
	case "n":
		_, err := strconv.ParseFloat(parts[2], 64)
		return err == nil
	case "f":
		_, err1 := strconv.ParseInt(parts[2], 10, 64)
		_, err2 := strconv.ParseUint(parts[3], 10, 63)
		return err1 == nil && err2 == nil
	}
	return false
}

// checkDeadCursor checks the form of a cursor over dead letters: the ID of
// the last one read.
func checkDeadCursor(name, c string) error {
	if checkDeadID(c) != nil {
		return fmt.Errorf("%s %q is not a cursor over dead letters as redisdelay prints them (\"1795400834527-0\" or \"2/1795400834527-0\"): pass the one printed, unchanged", name, c)
	}
	return nil
}

// shellWord quotes s for a POSIX shell when it needs it, so a cursor
// printed in a hint can be pasted back as is: cursors hold message UUIDs,
// which are whatever the publisher chose. Characters a terminal would act
// on are escaped in bash's $'...' rather than printed.
func shellWord(s string) string {
	safe := s != ""
	for _, r := range s {
		if r >= utf8.RuneSelf || !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("@%+=:,./_-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	if printable(s) == s {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i, w := 0, 0; i < len(s); i += w {
		r, n := utf8.DecodeRuneInString(s[i:])
		w = n
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteString("'")
	return b.String()
}
