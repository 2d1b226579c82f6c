package redisdelay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/ThreeDotsLabs/watermill/message"
)

// A message is stored as one compact binary value (in the stream field "m"
// and in the waiting and retry hashes), so moving it between structures is a
// copy that Lua never has to parse:
//
//	version byte (1)
//	uvarint len, UUID
//	uvarint count, then count × (uvarint len, key, uvarint len, value)
//	payload (the rest)
const codecVersion = 1

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
		b = appendString(b, k)
		b = appendString(b, msg.Metadata[k])
	}
	return append(b, msg.Payload...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func decodeMessage(b []byte) (*message.Message, error) {
	if len(b) == 0 || b[0] != codecVersion {
		return nil, fmt.Errorf("%w: unknown format (first byte %v)", errCorrupt, b[:min(len(b), 1)])
	}
	r := reader{b: b[1:]}
	id := r.string()
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: %d metadata entries in %d bytes", errCorrupt, n, len(r.b))
	}
	md := make(message.Metadata, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		k := r.string()
		md[k] = r.string()
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

func (r *reader) string() string {
	n := r.uvarint()
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
