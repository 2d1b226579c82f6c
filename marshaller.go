package redisdelay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
)

// A message is stored as one compact binary value (in the stream field "m"
// and in the waiting and retry hashes), so moving it between structures is a
// copy that Lua never has to parse:
//
//	version byte (2)
//	uvarint len, UUID
//	uvarint count, then count metadata entries, each either
//	  uvarint 2×len, key, uvarint len, value            (any key)
//	  uvarint 2×code+1, compact value                    (a well-known key)
//	payload (the rest)
//
// Watermill's delay keys travel with almost every delayed message and, as
// text, take about 75 bytes; as well-known entries they take under 15. A
// value is stored compactly only when formatting the compact form gives back
// the exact text, so decoding always restores the metadata byte for byte.
// Version 1 (every key as text) is still decoded: messages stored by an
// earlier release are delivered after an upgrade.
const (
	codecVersion   = 2
	codecVersionV1 = 1
)

// Well-known metadata entries, by code.
const (
	wellKnownDelayedFor   = 0 // Go duration text → zigzag varint nanoseconds
	wellKnownDelayedUntil = 1 // RFC 3339 in whole seconds → zigzag varint Unix seconds, zigzag varint zone offset in seconds
)

var errCorrupt = errors.New("redisdelay: stored message is corrupt")

func encodeMessage(msg *message.Message) []byte {
	size := 1 + binary.MaxVarintLen64*2 + len(msg.UUID) + len(msg.Payload)
	keys := make([]string, 0, len(msg.Metadata))
	for k, v := range msg.Metadata {
		if k == AttemptKey {
			// Set on each delivery from the stored attempt count: a value
			// carried over from an earlier delivery (a forwarded message)
			// must not stick.
			continue
		}
		keys = append(keys, k)
		size += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	// Sorted keys make the encoding deterministic, which publish relies on to
	// recognise a retried Publish of the same message.
	sort.Strings(keys)

	b := make([]byte, 0, size)
	b = append(b, codecVersion)
	b = appendString(b, msg.UUID)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		v := msg.Metadata[k]
		if c, ok := appendWellKnown(b, k, v); ok {
			b = c
			continue
		}
		b = binary.AppendUvarint(b, 2*uint64(len(k)))
		b = append(b, k...)
		b = appendString(b, v)
	}
	return append(b, msg.Payload...)
}

// appendWellKnown appends k=v as a well-known entry if it is one and its
// compact form restores v exactly.
func appendWellKnown(b []byte, k, v string) ([]byte, bool) {
	switch k {
	case delay.DelayedForKey:
		d, err := time.ParseDuration(v)
		if err != nil || d.String() != v {
			return b, false
		}
		b = binary.AppendUvarint(b, 2*wellKnownDelayedFor+1)
		return binary.AppendVarint(b, int64(d)), true
	case delay.DelayedUntilKey:
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return b, false
		}
		_, offset := t.Zone()
		if formatUntil(t.Unix(), offset) != v {
			return b, false
		}
		b = binary.AppendUvarint(b, 2*wellKnownDelayedUntil+1)
		b = binary.AppendVarint(b, t.Unix())
		return binary.AppendVarint(b, int64(offset)), true
	}
	return b, false
}

func formatUntil(unix int64, offset int) string {
	return time.Unix(unix, 0).In(time.FixedZone("", offset)).Format(time.RFC3339)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeMessage decodes an encoded message. It never modifies b nor keeps a
// reference to it (everything it returns is copied), so callers may pass the
// bytes of an immutable string without copying them.
func decodeMessage(b []byte) (*message.Message, error) {
	if len(b) == 0 || (b[0] != codecVersion && b[0] != codecVersionV1) {
		return nil, fmt.Errorf("%w: unknown format (first byte %v)", errCorrupt, b[:min(len(b), 1)])
	}
	v1 := b[0] == codecVersionV1
	r := reader{b: b[1:]}
	id := r.string()
	n := r.uvarint()
	// Every entry takes at least two bytes. The check comes before the map
	// is sized by n: a corrupt count must not allocate gigabytes.
	if r.err == nil && n > uint64(len(r.b))/2 {
		r.err = fmt.Errorf("%w: %d metadata entries in %d bytes", errCorrupt, n, len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	md := make(message.Metadata, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		if v1 {
			k := r.string()
			md[k] = r.string()
			continue
		}
		k := r.uvarint()
		if k%2 == 0 {
			key := r.bytes(k / 2)
			md[key] = r.string()
			continue
		}
		switch k / 2 {
		case wellKnownDelayedFor:
			md[delay.DelayedForKey] = time.Duration(r.varint()).String()
		case wellKnownDelayedUntil:
			unix, offset := r.varint(), r.varint()
			md[delay.DelayedUntilKey] = formatUntil(unix, int(offset))
		default:
			if r.err == nil {
				r.err = fmt.Errorf("%w: unknown metadata code %d (written by a newer version?)", errCorrupt, k/2)
			}
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	msg := message.NewMessage(id, append([]byte(nil), r.b...))
	msg.Metadata = md
	return msg, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad length", errCorrupt)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad number", errCorrupt)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string { return r.bytes(r.uvarint()) }

func (r *reader) bytes(n uint64) string {
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: length %d beyond the %d bytes left", errCorrupt, n, len(r.b))
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
