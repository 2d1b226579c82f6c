package main

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// defaultMaxPayload is how much of a payload --payload and show print
// unless --max-payload says otherwise: enough for a JSON document, not
// enough to flood a terminal with a large binary.
const defaultMaxPayload = 4096

// payloadJSON is the payload in JSON output, with --payload and in show:
// text as a string (JSON escapes control characters), anything that is not
// UTF-8 in base64.
type payloadJSON struct {
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 string  `json:"payload_base64,omitempty"`
	// PayloadTruncated says only the first --max-payload bytes are given.
	PayloadTruncated bool `json:"payload_truncated,omitempty"`
}

// cut returns the first max bytes of p (all of it when max is 0), not
// splitting a UTF-8 character of a text, and whether it cut.
func cut(p []byte, max int) ([]byte, bool) {
	if max <= 0 || len(p) <= max {
		return p, false
	}
	end := max
	if utf8.Valid(p) {
		for end > 0 && !utf8.RuneStart(p[end]) {
			end--
		}
	}
	return p[:end], true
}

func toPayloadJSON(p []byte, max int) payloadJSON {
	shown, truncated := cut(p, max)
	out := payloadJSON{PayloadTruncated: truncated}
	if utf8.Valid(shown) {
		s := string(shown)
		out.Payload = &s
	} else {
		out.PayloadBase64 = base64.StdEncoding.EncodeToString(shown)
	}
	return out
}

// isText says whether a payload reads as text: UTF-8 with no NUL byte
// (the test git uses for binary files). Other control characters are
// escaped when printed.
func isText(p []byte) bool {
	return utf8.Valid(p) && !bytes.ContainsRune(p, 0)
}

// writePayload prints a payload safely: text line by line with anything a
// terminal would act on escaped (see printable), anything else as a hex
// dump, and at most max bytes of it (0: all).
func writePayload(w io.Writer, p []byte, max int) {
	shown, truncated := cut(p, max)
	switch {
	case len(p) == 0:
		fmt.Fprintln(w, "payload:  empty")
		return
	case isText(p) || (truncated && isText(shown)):
		fmt.Fprintf(w, "payload:  %d bytes, text\n", len(p))
		for _, line := range strings.Split(strings.TrimSuffix(string(shown), "\n"), "\n") {
			fmt.Fprintln(w, "  "+printable(line))
		}
	default:
		fmt.Fprintf(w, "payload:  %d bytes, binary (not UTF-8 text): hex dump\n", len(p))
		for _, line := range strings.Split(strings.TrimSuffix(hex.Dump(shown), "\n"), "\n") {
			fmt.Fprintln(w, "  "+line)
		}
	}
	if truncated {
		fmt.Fprintf(w, "  (first %d of %d bytes shown; --max-payload 0 shows all)\n", len(shown), len(p))
	}
}

// writeMetadata prints every metadata pair, sorted, one a line.
func writeMetadata(w io.Writer, md message.Metadata) {
	if len(md) == 0 {
		fmt.Fprintln(w, "metadata: none")
		return
	}
	fmt.Fprintln(w, "metadata:")
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s=%s\n", printable(k), printable(md[k]))
	}
}

// writeWaitingRecords is the --payload view of waiting messages: one block
// each.
func writeWaitingRecords(w io.Writer, msgs []redisdelay.WaitingMessage, now time.Time, max int) {
	for i, m := range msgs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "uuid:     %s\n", printable(m.Message.UUID))
		fmt.Fprintf(w, "state:    waiting, due %s (%s)\n", m.Due.UTC().Format(time.RFC3339), dueIn(m.Due, now))
		if m.Corrupt != "" {
			fmt.Fprintf(w, "corrupt:  %s\n", printable(m.Corrupt))
			continue
		}
		writeMetadata(w, m.Message.Metadata)
		writePayload(w, m.Message.Payload, max)
	}
}

// writeDeadRecords is the --payload view of dead letters.
func writeDeadRecords(w io.Writer, group string, dead []redisdelay.DeadLetter, max int) {
	for i, d := range dead {
		if i > 0 {
			fmt.Fprintln(w)
		}
		uuid := "-"
		if d.Message != nil {
			uuid = printable(d.Message.UUID)
		}
		fmt.Fprintf(w, "uuid:     %s\n", uuid)
		fmt.Fprintf(w, "state:    dead letter %s of group %q since %s, after %d attempt(s)\n", d.ID, printable(group), d.Time.UTC().Format(time.RFC3339), d.Attempts)
		fmt.Fprintf(w, "reason:   %s\n", printable(oneLine(d.Reason)))
		if d.Message == nil {
			fmt.Fprintf(w, "corrupt:  the stored entry (%d bytes) could not be decoded\n", len(d.Body))
			continue
		}
		writeMetadata(w, d.Message.Metadata)
		writePayload(w, d.Message.Payload, max)
	}
}
