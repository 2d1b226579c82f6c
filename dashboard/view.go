package dashboard

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redisdelay/watermill-redisdelay/internal/present"
)

// payloadView is a payload as a page shows it: text, or a hex dump of
// anything that is not printable UTF-8 text. html/template escapes both.
type payloadView struct {
	Text      string
	Hex       bool
	Size      int
	Truncated bool
}

// printable reports whether b is UTF-8 text without control characters
// other than tab and line breaks (nor bidi overrides, which would reorder
// what the operator reads).
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
		case unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r):
			return false
		}
	}
	return true
}

func viewPayload(b []byte) payloadView {
	v := payloadView{Size: len(b)}
	if len(b) > maxPayload {
		b, v.Truncated = b[:maxPayload], true
	}
	if printable(b) || (v.Truncated && printable(trimPartialRune(b))) {
		v.Text = string(b)
		return v
	}
	v.Hex, v.Text = true, hex.Dump(b)
	return v
}

// trimPartialRune drops a rune cut by truncation.
func trimPartialRune(b []byte) []byte {
	for n := 0; n < utf8.UTFMax && len(b) > 0; n++ {
		if utf8.Valid(b) {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

// preview is the start of a payload for a list: text on one line, or its
// size when binary.
func preview(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	cut := b[:min(len(b), previewLen*utf8.UTFMax)]
	if !printable(trimPartialRune(cut)) {
		return fmt.Sprintf("(binary, %d bytes)", len(b))
	}
	s := strings.Join(strings.Fields(string(trimPartialRune(cut))), " ")
	if utf8.RuneCountInString(s) > previewLen {
		s = string([]rune(s)[:previewLen])
	}
	if len(s) < len(b) {
		s += "…"
	}
	return s
}

func sortedMetadata(m message.Metadata) [][2]string {
	out := make([][2]string, 0, len(m))
	for k, v := range m {
		out = append(out, [2]string{k, v})
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// since says how far t is from now, in words: "in 5m0s", "3s ago",
// "in 1500d13h55m".
func since(t time.Time) string {
	d := time.Until(t)
	if d >= 0 {
		return "in " + present.Duration(d)
	}
	return present.Duration(-d) + " ago"
}

// percent is n as a share of max, for bar widths.
func percent(n, max int64) int64 {
	if max <= 0 {
		return 0
	}
	return n * 100 / max
}

// visible is present.Visible, the CLI's escaping of what a screen would
// not show as itself (control characters, Bidi controls, invalid UTF-8):
// html/template escapes the result as usual.
func visible(s string) string { return present.Visible(s) }
