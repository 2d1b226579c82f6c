package store

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

func TestCodec_RoundTrip(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	india := time.FixedZone("IST", 5*3600+1800)
	cases := map[string]message.Metadata{
		"no metadata":                         {},
		"delay.For in UTC":                    delayMetadata(delay.For(90 * time.Minute)),
		"delay.Until in a +01:00 zone":        delayMetadata(delay.Until(time.Date(2030, 1, 2, 3, 4, 5, 0, berlin))),
		"delay.Until in a +05:30 zone":        delayMetadata(delay.Until(time.Date(2030, 1, 2, 3, 4, 5, 0, india))),
		"negative duration (a past Until)":    {delay.DelayedForKey: "-3h2m1.5s", delay.DelayedUntilKey: "1999-12-31T23:59:59Z"},
		"non-canonical duration kept as text": {delay.DelayedForKey: "90s"},
		"fractional until kept as text":       {delay.DelayedUntilKey: "2030-01-02T03:04:05.123Z"},
		"-00:00 until kept as text":           {delay.DelayedUntilKey: "2030-01-02T03:04:05-00:00"},
		"millisecond until (after delivery)":  {delay.DelayedUntilKey: "2030-01-02T03:04:05.000+01:00"},
		"garbage delay values kept as text":   {delay.DelayedForKey: "soon", delay.DelayedUntilKey: "tomorrow"},
		"empty key and value":                 {"": ""},
		"ordinary keys":                       {"a": "1", "correlation_id": "x", "_redisdelay_error": "boom"},
		"named keys":                          {"_redisdelay_business_key": "order-1", "_redisdelay_priority": "high", "correlation_id": "c", "_redisdelay_schedule_tick": ""},
		"named keys with binary values":       {"_redisdelay_business_key": "\x00\xff", "_redisdelay_group": strings.Repeat("g", 300)},
		"sub-second duration in nanoseconds":  {delay.DelayedForKey: "1.5s"},
		"negative whole seconds":              {delay.DelayedForKey: "-1h0m0s"},
		"more keys than a small map holds": {"k1": "1", "k2": "2", "k3": "3", "k4": "4", "k5": "5", "k6": "6", "k7": "7", "k8": "8", "k9": "9",
			delay.DelayedForKey: "1s"},
	}
	for name, md := range cases {
		t.Run(name, func(t *testing.T) {
			msg := message.NewMessage("01JDZ3V6Q6R8Z0Y1X2W3V4T5S6", []byte("payload"))
			msg.Metadata = md
			got, err := Decode(Encode(msg))
			require.NoError(t, err)
			require.Equal(t, msg.UUID, got.UUID)
			require.Equal(t, msg.Payload, got.Payload)
			require.Equal(t, map[string]string(md), map[string]string(got.Metadata))
		})
	}
}

func delayMetadata(d delay.Delay) message.Metadata {
	msg := message.NewMessage("x", nil)
	delay.Message(msg, d)
	return msg.Metadata
}

// Watermill's delay keys are the bulk of a delayed message's metadata: they
// must shrink to a few bytes, which is what keeps a waiting message small.
func TestCodec_DelayKeysAreCompact(t *testing.T) {
	msg := message.NewMessage("01JDZ3V6Q6R8Z0Y1X2W3V4T5S6", make([]byte, 100))
	delay.Message(msg, delay.For(time.Hour))
	require.LessOrEqual(t, len(Encode(msg)), 1+1+26+1+100+16)
}

// A delay of whole seconds, and the package's own keys, take a few bytes
// (the sizes are the format: a change here breaks stored messages).
func TestCodec_WellKnownSizes(t *testing.T) {
	id := "0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11"
	size := func(md message.Metadata) int {
		msg := message.NewMessage(id, nil)
		msg.Metadata = md
		return len(Encode(msg)) - 1 - 16 - 1
	}
	require.Equal(t, 3, size(message.Metadata{delay.DelayedForKey: "1h30m0s"}))        // code, 2-byte varint of 5400 s
	require.Equal(t, 8, size(message.Metadata{delay.DelayedForKey: "1h30m0.5s"}))      // code, 7-byte varint of ns
	require.Equal(t, 9, size(message.Metadata{"_redisdelay_business_key": "order-1"})) // code, length, 7 bytes
	require.Equal(t, 18, size(message.Metadata{"correlation_id": "abcdefghijklmnop"}))
	require.Equal(t, 1+len("_redisdelay_business_key_x")+1+1, size(message.Metadata{"_redisdelay_business_key_x": "v"}))
}

func TestCodec_DecodesVersion1(t *testing.T) {
	// As the previous release stored it: every key as text.
	b := []byte{codecVersionV1}
	b = appendString(b, "id-1")
	b = binary.AppendUvarint(b, 2)
	b = appendString(appendString(b, delay.DelayedForKey), "1h0m0s")
	b = appendString(appendString(b, "k"), "v")
	b = append(b, "body"...)
	msg, err := Decode(b)
	require.NoError(t, err)
	require.Equal(t, "id-1", msg.UUID)
	require.Equal(t, "body", string(msg.Payload))
	require.Equal(t, map[string]string{delay.DelayedForKey: "1h0m0s", "k": "v"}, map[string]string(msg.Metadata))
}

func TestCodec_RejectsCorruptInput(t *testing.T) {
	valid := Encode(func() *message.Message {
		m := message.NewMessage("id", []byte("p"))
		delay.Message(m, delay.For(time.Second))
		return m
	}())
	unknownCode := append(appendString([]byte{codecVersion}, "id"), 1, 2*60+1, 0)
	named := Encode(func() *message.Message {
		m := message.NewMessage("id", nil)
		m.Metadata.Set("_redisdelay_business_key", "order-1")
		return m
	}())
	for name, b := range map[string][]byte{
		"empty":                  nil,
		"unknown version":        {codecNewest + 1, 1, 'x'},
		"UUID longer than input": {codecVersion, 50, 'x'},
		"too many entries":       append(appendString([]byte{codecVersion}, "id"), 100),
		// Found by FuzzCodec: the count was trusted to size a map.
		"huge entry count":      {codecVersion, 1, 'x', 0xb5, 0xe2, 0xdb, 0x1f, 0x52},
		"truncated delay value": valid[:len(valid)-3],
		"truncated named value": named[:len(named)-1],
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(b)
			require.ErrorIs(t, err, ErrCorrupt)
			require.NotErrorIs(t, err, ErrNewer)
		})
	}
	// What a newer release may write is not corrupt: a reader leaves it
	// for a process that reads it (level.go) instead of dead-lettering it.
	for name, b := range map[string][]byte{
		"newer format":           {codecVersionBinaryID + 1, 1, 'x'},
		"newest format":          {codecNewest, 1, 'x'},
		"unknown well-known key": unknownCode,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(b)
			require.ErrorIs(t, err, ErrNewer)
			require.NotErrorIs(t, err, ErrCorrupt)
		})
	}
}

// Level 1 is what release 0.1.0 decodes: the delay codes 0 and 1, every
// other key as text; each level decodes to the same message.
func TestCodec_Levels(t *testing.T) {
	msg := message.NewMessage("0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11", []byte("p"))
	msg.Metadata = message.Metadata{delay.DelayedForKey: "1h0m0s", delay.DelayedUntilKey: "2030-01-02T03:04:05+01:00",
		"_redisdelay_business_key": "order-1", "correlation_id": "c", "other": "x"}
	old := EncodeAt(msg, Level1)
	now := EncodeAt(msg, Level2)
	require.Less(t, len(now), len(old))
	for _, b := range [][]byte{old, now} {
		got, err := Decode(b)
		require.NoError(t, err)
		require.Equal(t, map[string]string(msg.Metadata), map[string]string(got.Metadata))
	}
	// Level 1's entries: only codes 0 and 1 (odd uvarints 1 and 3).
	r := reader{b: old[17:]}
	n := r.uvarint()
	codes := 0
	for range n {
		k := r.uvarint()
		if k%2 == 1 {
			require.LessOrEqual(t, k/2, uint64(wellKnownDelayedUntil))
			codes++
			r.varint()
			if k/2 == wellKnownDelayedUntil {
				r.varint()
			}
			continue
		}
		r.bytes(k / 2)
		r.string()
	}
	require.NoError(t, r.err)
	require.Equal(t, 2, codes)
	require.Equal(t, EncodeAt(msg, LevelNewest), Encode(msg))
}

// FuzzCodec: whatever the metadata, decoding restores it exactly; whatever
// the bytes, decoding fails cleanly or succeeds, never panics.
func FuzzCodec(f *testing.F) {
	f.Add("1h0m0s", "2030-01-02T03:04:05+01:00", "k", "v", []byte("payload"))
	f.Add("-1ns", "2030-01-02T03:04:05Z", "", "", []byte{})
	f.Add("1.5s", "2030-01-02T03:04:05.5-07:00", "\x00", "\xff", []byte{2, 0, 0})
	f.Add("-2562047h47m16s", "2030-01-02T03:04:05Z", "_redisdelay_business_key", "order-1", []byte{3})
	f.Fuzz(func(t *testing.T, forV, untilV, k, v string, payload []byte) {
		msg := message.NewMessage("id", payload)
		msg.Metadata = message.Metadata{delay.DelayedForKey: forV, delay.DelayedUntilKey: untilV, k: v}
		got, err := Decode(Encode(msg))
		require.NoError(t, err)
		require.Equal(t, map[string]string(msg.Metadata), map[string]string(got.Metadata))
		require.Equal(t, string(msg.Payload), string(got.Payload))
		_, _ = Decode(payload)
	})
}

func TestCodec_BinaryUUID(t *testing.T) {
	for _, id := range []string{"0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11", "ffffffff-ffff-ffff-ffff-ffffffffffff", "00000000-0000-0000-0000-000000000000"} {
		msg := message.NewMessage(id, []byte("p"))
		b := Encode(msg)
		require.Equal(t, byte(codecVersionBinaryID), b[0], id)
		got, err := Decode(b)
		require.NoError(t, err)
		require.Equal(t, id, got.UUID)
	}
	// Forms that would not come back byte for byte stay text (version 2).
	for _, id := range []string{"0B1E6C1A-7D7E-4C6F-9D3B-2F6A1E9C0D11", "0b1e6c1a7d7e4c6f9d3b2f6a1e9c0d11", "0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d1g",
		"0b1e6c1a-7d7e-4c6f-9d3b_2f6a1e9c0d11", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "id"} {
		b := Encode(message.NewMessage(id, nil))
		require.Equal(t, byte(codecVersion), b[0], id)
		got, err := Decode(b)
		require.NoError(t, err)
		require.Equal(t, id, got.UUID)
	}
	_, err := Decode([]byte{codecVersionBinaryID, 1, 2, 3})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "UUID cut short")
}

// Every encoding of a message begins with idPrefix of its UUID, and the
// prefixes of two UUIDs differ, whatever the metadata and payload: what
// recurringoverlap.lua recognises a tick's message by.
func TestCodec_IDPrefix(t *testing.T) {
	ids := []string{"0e5b6a3c-1f2d-5a4b-9c8d-7e6f5a4b3c2d", "0e5b6a3c-1f2d-5a4b-9c8d-7e6f5a4b3c2e", "01JDZ3V6Q6R8Z0Y1X2W3V4T5S6", "0E5B6A3C-1F2D-5A4B-9C8D-7E6F5A4B3C2D", ""}
	for _, id := range ids {
		for _, md := range []message.Metadata{{}, {"k": "v", delay.DelayedForKey: "1s"}} {
			msg := message.NewMessage(id, []byte("0e5b6a3c"))
			msg.Metadata = md
			require.True(t, strings.HasPrefix(string(Encode(msg)), idPrefix(id)), "UUID %q", id)
		}
		for _, other := range ids {
			if other != id {
				require.False(t, strings.HasPrefix(string(Encode(message.NewMessage(other, nil))), idPrefix(id)), "%q begins as %q", other, id)
			}
		}
	}
}

// A delayed message as delay.For makes it: the codec's hot path on both
// sides of a delayed publish.
func BenchmarkCodecDelayed(b *testing.B) {
	msg := message.NewMessage("0193a4b2-7c1d-7e3f-8a9b-0c1d2e3f4a5b", make([]byte, 256))
	delay.Message(msg, delay.For(50*time.Millisecond))
	body := Encode(msg)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			Encode(msg)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := Decode(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
