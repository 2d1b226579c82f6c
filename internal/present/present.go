// Package present formats for people what the CLI (cmd/redisdelay) and
// the dashboard both show, so the two say the same thing the same way:
// durations, sizes, texts from Redis with what a screen would act on
// escaped, and whether a scheduler took a topic's lease after an action.
package present

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// Duration formats a duration for a person, to the second: as Go does
// ("5m0s", "23h59m59s") under a day, in days, hours and minutes from a
// day up ("1d0h0m", "1500d13h55m"), where seconds no longer matter and
// Go's "36013h55m34s" is hard to read.
func Duration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	if d < 24*time.Hour-time.Second/2 {
		s = d.Round(time.Second).String()
	} else {
		m := int64(d.Round(time.Minute) / time.Minute)
		s = fmt.Sprintf("%dd%dh%dm", m/(24*60), m/60%24, m%60)
	}
	if neg {
		return "-" + s
	}
	return s
}

// Overdue says how late something due is: "overdue by 4m33s".
func Overdue(late time.Duration) string { return "overdue by " + Duration(late) }

// Bytes is a size in bytes for people: 1.5 MB.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// SchedulerMissing waits, after an action that made messages of topic due
// or wait, up to wait for a scheduler to hold one of the topic's leases,
// polling every 50 ms: the action woke the schedulers, and one whose loop
// retired takes the lease within milliseconds, a standby within 1.5
// CheckInterval (3 s by default). It reports whether none did, with the
// topic's last stats; an error reading them, or ctx ending, reports false
// (nothing is known to be missing).
func SchedulerMissing(ctx context.Context, insp *redisdelay.Inspector, topic string, wait time.Duration) (bool, redisdelay.TopicStats) {
	deadline := time.Now().Add(wait)
	for {
		st, err := insp.Stats(ctx, topic)
		if err != nil || st.Leased > 0 {
			return false, st
		}
		if time.Now().After(deadline) {
			return true, st
		}
		select {
		case <-ctx.Done():
			return false, st
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Visible writes what a terminal or a page would not show as itself as
// Go escapes: control characters and escape sequences (\x1b, \a), which a
// terminal acts on and a browser draws as boxes or not at all;
// bidirectional controls (\u202e, \u2066, \u200f), which reorder what the
// operator reads ("orders\u202egpj.exe" shows as "ordersexe.jpg"); other
// characters that do not print; and invalid UTF-8 (\xff). Texts from
// Redis (topic, group and schedule names, metadata, UUIDs, reasons) come
// from whoever published or registered them.
func Visible(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !shown(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, n := utf8.DecodeRuneInString(s[i:])
		w = n
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case shown(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}

// shown tells whether a rune shows as itself: printable (space included)
// and no Bidi control. The Bidi controls are format characters, which
// unicode.IsPrint already refuses; naming them keeps that so should
// IsPrint change.
func shown(r rune) bool {
	return unicode.IsPrint(r) && !unicode.Is(unicode.Bidi_Control, r)
}
