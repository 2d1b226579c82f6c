package store

import (
	"sync/atomic"
	"time"
)

// Watermill's delay metadata repeats from message to message: every message
// delayed by one duration within one second carries the same two texts.
// Publishing parses them (for the delay, and to store them compactly) and
// delivering formats them back, each with a few allocations; the last text
// and value of each direction are kept, so a run of such messages parses
// and formats them once. A memo is one immutable entry behind an atomic
// pointer: concurrent callers read it without a lock, and a miss replaces it.

type untilParsed struct {
	text  string
	t     time.Time
	exact bool // text is FormatUntil of t: stored compactly
}

type untilFormatted struct {
	unix   int64
	offset int
	text   string
}

type forParsed struct {
	text  string
	d     time.Duration
	exact bool // text is d.String(): stored compactly
}

type forFormatted struct {
	d    time.Duration
	text string
}

var (
	lastUntilParsed    atomic.Pointer[untilParsed]
	lastUntilFormatted atomic.Pointer[untilFormatted]
	lastForParsed      atomic.Pointer[forParsed]
	lastForFormatted   atomic.Pointer[forFormatted]
)

// ParseUntil parses an RFC 3339 time (with or without a fraction of a
// second), as time.Parse does, and reports whether FormatUntil gives the
// text back exactly.
func ParseUntil(v string) (t time.Time, exact bool, err error) {
	if m := lastUntilParsed.Load(); m != nil && m.text == v {
		return m.t, m.exact, nil
	}
	if t, err = time.Parse(time.RFC3339Nano, v); err != nil {
		return t, false, err
	}
	_, offset := t.Zone()
	exact = FormatUntil(t.Unix(), offset) == v
	lastUntilParsed.Store(&untilParsed{text: v, t: t, exact: exact})
	return t, exact, nil
}

// formatUntilMemo is FormatUntil, remembering the last result.
func formatUntilMemo(unix int64, offset int) string {
	if m := lastUntilFormatted.Load(); m != nil && m.unix == unix && m.offset == offset {
		return m.text
	}
	s := FormatUntil(unix, offset)
	lastUntilFormatted.Store(&untilFormatted{unix: unix, offset: offset, text: s})
	return s
}

// ParseFor parses a Go duration, as time.ParseDuration does, and reports
// whether its String gives the text back exactly.
func ParseFor(v string) (d time.Duration, exact bool, err error) {
	if m := lastForParsed.Load(); m != nil && m.text == v {
		return m.d, m.exact, nil
	}
	if d, err = time.ParseDuration(v); err != nil {
		return 0, false, err
	}
	exact = d.String() == v
	lastForParsed.Store(&forParsed{text: v, d: d, exact: exact})
	return d, exact, nil
}

// formatForMemo is d.String(), remembering the last result.
func formatForMemo(d time.Duration) string {
	if m := lastForFormatted.Load(); m != nil && m.d == d {
		return m.text
	}
	s := d.String()
	lastForFormatted.Store(&forFormatted{d: d, text: s})
	return s
}
