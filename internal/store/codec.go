package store

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
// copy that Lua never has to parse (recurringoverlap.lua only compares a body's
// first bytes with idPrefix, to recognise a message by its UUID):
//
//	version byte (2, or 3: see below)
//	uvarint len, UUID                                   (version 3: the 16 bytes of the UUID)
//	uvarint count, then count metadata entries, each either
//	  uvarint 2×len, key, uvarint len, value            (any key)
//	  uvarint 2×code+1, compact value                    (a well-known key: see wellKnown*)
//	payload (the rest)
//
// Watermill's delay keys travel with almost every delayed message and, as
// text, take about 75 bytes; as well-known entries they take under 15 (under
// 10 for a delay of whole seconds). The package's own metadata keys (a
// business key, a partition key, ...) are well-known too: their values stay
// text, their names become one byte. A value is stored compactly only when
// formatting the compact form gives back the exact text, so decoding always
// restores the metadata byte for byte. The codes are fixed forever (a new
// key takes a new code): an older release refuses a code it does not know as
// corrupt, which is why Subscribers and Managers are upgraded before
// Publishers (CHANGELOG).
// Version 3 is version 2 with the UUID as its 16 bytes, used when the UUID
// is in the canonical lower-case text form (watermill.NewUUID's), which
// decoding restores exactly: 20 bytes less per stored message. Versions 1
// (every key as text) and 2 are still decoded: messages stored by an
// earlier release are delivered after an upgrade.
const (
	codecVersion         = 2
	codecVersionBinaryID = 3
	codecVersionV1       = 1
)

// Well-known metadata entries, by code.
const (
	wellKnownDelayedFor     = 0 // Go duration text → zigzag varint nanoseconds
	wellKnownDelayedUntil   = 1 // RFC 3339 in whole seconds → zigzag varint Unix seconds, zigzag varint zone offset in seconds
	wellKnownDelayedForSecs = 2 // Go duration text of whole seconds → zigzag varint seconds
	wellKnownNamed          = 3 // codes from 3: the key namedKeys[code-3], its value as text (uvarint len, value)
)

// namedKeys are the metadata keys stored as a code and their value: the
// package's own (the root package's constants, checked by its tests) and
// Watermill's correlation ID. Append only: a code, once written, keeps its
// key.
var namedKeys = [...]string{
	"_redisdelay_business_key",
	"_redisdelay_business_key_policy",
	"_redisdelay_partition_key",
	"_redisdelay_priority",
	"_redisdelay_group",
	"_redisdelay_error",
	"_redisdelay_expires_at",
	"_redisdelay_handler_timeout",
	"_redisdelay_schedule",
	"_redisdelay_schedule_tick",
	"_redisdelay_scheduled_at",
	"correlation_id", // middleware.CorrelationIDMetadataKey
}

// NamedKeys lists the metadata keys the codec stores by code (for the root
// package's test that they match its constants).
func NamedKeys() []string { return namedKeys[:] }

func namedCode(k string) (uint64, bool) {
	// Every named key but one begins with '_': the cheap test first, since
	// this runs for every metadata entry of every stored message.
	if k == "" || (k[0] != '_' && k != "correlation_id") {
		return 0, false
	}
	for i, n := range namedKeys {
		if n == k {
			return wellKnownNamed + uint64(i), true
		}
	}
	return 0, false
}

// AttemptMeta is the metadata key of the delivery attempt (the package's
// AttemptKey): not stored, but set on each delivery from the stored count.
const AttemptMeta = "_redisdelay_attempt"

var ErrCorrupt = errors.New("redisdelay: stored message is corrupt")

// ErrNewer is wrapped by Decode's error for a body a newer release wrote:
// a format version or a metadata code this release does not know. Such a
// body is not corrupt: a process that cannot read it leaves it for one that
// can (see level.go), rather than dead-lettering it.
var ErrNewer = errors.New("redisdelay: stored message was written by a newer release")

// codecNewest is the highest format version byte a future release may
// write; a first byte above codecVersionBinaryID and up to this is a newer
// release's, above it, damage.
const codecNewest = 15

// Encode encodes msg at the newest storage level (tests and tools; the
// library's writers call EncodeAt with the level in use).
func Encode(msg *message.Message) []byte { return EncodeAt(msg, LevelNewest) }

// EncodeAt encodes msg as storage level lvl reads it: level 1 (release
// 0.1.0) knows the delay codes 0 and 1 only, so it gets every other key as
// text and a delay of whole seconds in nanoseconds.
func EncodeAt(msg *message.Message, lvl int) []byte {
	size := 1 + binary.MaxVarintLen64*2 + len(msg.UUID) + len(msg.Payload)
	keys := make([]string, 0, len(msg.Metadata))
	for k, v := range msg.Metadata {
		if k == AttemptMeta {
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
	if id, ok := binaryUUID(msg.UUID); ok {
		b = append(b, codecVersionBinaryID)
		b = append(b, id[:]...)
	} else {
		b = append(b, codecVersion)
		b = appendString(b, msg.UUID)
	}
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		v := msg.Metadata[k]
		if c, ok := appendWellKnown(b, k, v, lvl); ok {
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
func appendWellKnown(b []byte, k, v string, lvl int) ([]byte, bool) {
	switch k {
	case delay.DelayedForKey:
		d, exact, err := ParseFor(v)
		if err != nil || !exact {
			return b, false
		}
		if d%time.Second == 0 && lvl >= Level2 {
			b = binary.AppendUvarint(b, 2*wellKnownDelayedForSecs+1)
			return binary.AppendVarint(b, int64(d/time.Second)), true
		}
		b = binary.AppendUvarint(b, 2*wellKnownDelayedFor+1)
		return binary.AppendVarint(b, int64(d)), true
	case delay.DelayedUntilKey:
		t, exact, err := ParseUntil(v)
		if err != nil || !exact {
			return b, false
		}
		_, offset := t.Zone()
		b = binary.AppendUvarint(b, 2*wellKnownDelayedUntil+1)
		b = binary.AppendVarint(b, t.Unix())
		return binary.AppendVarint(b, int64(offset)), true
	}
	if lvl < Level2 {
		return b, false
	}
	if c, ok := namedCode(k); ok {
		b = binary.AppendUvarint(b, 2*c+1)
		return appendString(b, v), true
	}
	return b, false
}

func FormatUntil(unix int64, offset int) string {
	return time.Unix(unix, 0).In(time.FixedZone("", offset)).Format(time.RFC3339)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decode decodes an encoded message. It never modifies b nor keeps a
// reference to it (everything it returns is copied), so callers may pass the
// bytes of an immutable string without copying them.
func Decode(b []byte) (*message.Message, error) {
	if len(b) > 0 && b[0] > codecVersionBinaryID && b[0] <= codecNewest {
		return nil, fmt.Errorf("%w: format %d (this release reads up to %d)", ErrNewer, b[0], codecVersionBinaryID)
	}
	if len(b) == 0 || b[0] < codecVersionV1 || b[0] > codecVersionBinaryID {
		return nil, fmt.Errorf("%w: unknown format (first byte %v)", ErrCorrupt, b[:min(len(b), 1)])
	}
	v1 := b[0] == codecVersionV1
	r := reader{b: b[1:]}
	var id string
	if b[0] == codecVersionBinaryID {
		if len(r.b) < 16 {
			return nil, fmt.Errorf("%w: UUID cut short", ErrCorrupt)
		}
		id = textUUID(r.b[:16])
		r.b = r.b[16:]
	} else {
		id = r.string()
	}
	n := r.uvarint()
	// Every entry takes at least two bytes. The check comes before the map
	// is sized by n: a corrupt count must not allocate gigabytes.
	if r.err == nil && n > uint64(len(r.b))/2 {
		r.err = fmt.Errorf("%w: %d metadata entries in %d bytes", ErrCorrupt, n, len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	// The message's own empty map takes the entries when they fit in one
	// small map (8): one allocation fewer than a map of our own.
	msg := message.NewMessage(id, nil)
	md := msg.Metadata
	if n > 8 {
		md = make(message.Metadata, n)
		msg.Metadata = md
	}
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
			md[delay.DelayedForKey] = formatForMemo(time.Duration(r.varint()))
		case wellKnownDelayedUntil:
			unix, offset := r.varint(), r.varint()
			md[delay.DelayedUntilKey] = formatUntilMemo(unix, int(offset))
		case wellKnownDelayedForSecs:
			md[delay.DelayedForKey] = formatForMemo(time.Duration(r.varint()) * time.Second)
		default:
			if c := k/2 - wellKnownNamed; k/2 >= wellKnownNamed && c < uint64(len(namedKeys)) {
				md[namedKeys[c]] = r.string()
				continue
			}
			if r.err == nil {
				// Codes are never reused, so an unknown one is a newer
				// release's (or damage, which a newer release will see).
				r.err = fmt.Errorf("%w: metadata code %d (this release knows up to %d)", ErrNewer, k/2, wellKnownNamed+len(namedKeys)-1)
			}
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	msg.Payload = append([]byte(nil), r.b...)
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
		r.err = fmt.Errorf("%w: bad length", ErrCorrupt)
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
		r.err = fmt.Errorf("%w: bad number", ErrCorrupt)
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
		r.err = fmt.Errorf("%w: length %d beyond the %d bytes left", ErrCorrupt, n, len(r.b))
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// idPrefix is how every encoding of a message with this UUID begins (its
// version byte and UUID, as Encode writes them), so a script can recognise
// the message among stored ones by comparing the first bytes of their
// bodies, without decoding them (see recurringoverlap.lua).
func idPrefix(uuid string) string {
	if id, ok := binaryUUID(uuid); ok {
		return string(append([]byte{codecVersionBinaryID}, id[:]...))
	}
	return string(appendString([]byte{codecVersion}, uuid))
}

// binaryUUID returns the 16 bytes of a UUID in the canonical lower-case
// text form (8-4-4-4-12 hex digits), which textUUID gives back exactly.
func binaryUUID(s string) (id [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return id, false
	}
	j := 0
	for i := 0; i < 36; i += 2 {
		if s[i] == '-' {
			i--
			continue
		}
		hi, ok1 := fromHex(s[i])
		lo, ok2 := fromHex(s[i+1])
		if !ok1 || !ok2 {
			return id, false
		}
		id[j] = hi<<4 | lo
		j++
	}
	return id, true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// textUUID formats 16 bytes as a canonical lower-case UUID.
func textUUID(b []byte) string {
	const hex = "0123456789abcdef"
	var s [36]byte
	j := 0
	for i, c := range b[:16] {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			s[j] = '-'
			j++
		}
		s[j], s[j+1] = hex[c>>4], hex[c&15]
		j += 2
	}
	return string(s[:])
}

// storedUUID reads the UUID of an encoded message without decoding the rest.
func storedUUID(body []byte) (string, bool) {
	if len(body) == 0 {
		return "", false
	}
	if body[0] == codecVersionBinaryID {
		if len(body) < 17 {
			return "", false
		}
		return textUUID(body[1:17]), true
	}
	n, k := binary.Uvarint(body[1:])
	if k <= 0 || n > uint64(len(body)-1-k) {
		return "", false
	}
	return string(body[1+k : 1+k+int(n)]), true
}

// BodyLevel is the oldest storage level that decodes b: 2 when it uses a
// metadata code of level 2 (a named key, a delay in whole seconds), else 1;
// 0 when this release cannot read it (damaged, or a newer release's).
func BodyLevel(b []byte) int {
	if len(b) == 0 || b[0] < codecVersionV1 || b[0] > codecVersionBinaryID {
		return 0
	}
	if b[0] == codecVersionV1 {
		return Level1
	}
	lvl := Level1
	ok := eachEntry(b, func(k uint64, _, _ int) bool {
		if k%2 == 1 && k/2 != wellKnownDelayedFor && k/2 != wellKnownDelayedUntil {
			lvl = Level2 // a delay in whole seconds, or a named key
		}
		return true
	})
	if !ok {
		return 0
	}
	return lvl
}

// eachEntry walks the metadata entries of encoded message b (of version 2
// or 3), calling f with each entry's code k (as Encode writes it), where
// it starts in b and its length, until f returns false. It reports false
// when b is damaged or holds a code this release does not know.
func eachEntry(b []byte, f func(k uint64, at, n int) bool) bool {
	if len(b) == 0 || (b[0] != codecVersion && b[0] != codecVersionBinaryID) {
		return false
	}
	r := reader{b: b[1:]}
	if b[0] == codecVersionBinaryID {
		if len(r.b) < 16 {
			return false
		}
		r.b = r.b[16:]
	} else {
		r.string()
	}
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		at := len(b) - len(r.b)
		k := r.uvarint()
		switch {
		case k%2 == 0:
			r.bytes(k / 2)
			r.string()
		case k/2 == wellKnownDelayedFor || k/2 == wellKnownDelayedForSecs:
			r.varint()
		case k/2 == wellKnownDelayedUntil:
			r.varint()
			r.varint()
		case k/2 >= wellKnownNamed && k/2-wellKnownNamed < uint64(len(namedKeys)):
			r.string()
		default:
			return false
		}
		if r.err == nil && !f(k, at, len(b)-len(r.b)-at) {
			return true
		}
	}
	return r.err == nil
}
