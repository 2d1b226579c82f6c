package store

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// With the default timing a message due within about a minute always stays
// in the waiting set, one due two minutes or more ahead always goes far,
// and a far bucket is unpacked before its messages are due; locations stay
// exact in a Lua number for a century.
func TestFar_PlaceDefaults(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixMilli()
	for ms := int64(0); ms < 3*60_000; ms += 250 {
		for _, offset := range []int64{0, 1, 499, 59_999} {
			n := now + offset
			b, start, at, ok := farPlaceIn(defaultFarWidth, defaultFarLead, defaultFarMargin, n, n+ms)
			if ms <= 65_000 {
				require.False(t, ok, "delay %d ms went far", ms)
			}
			if ms >= 125_000 {
				require.True(t, ok, "delay %d ms stayed near", ms)
			}
			if ok {
				require.LessOrEqual(t, start, n+ms, "bucket starts after the message is due")
				require.Less(t, at+defaultFarLead.Milliseconds()-1, n+ms+1)
				require.Greater(t, at, n+defaultFarMargin.Milliseconds())
				require.Equal(t, b, (start-farEpoch)/defaultFarWidth.Milliseconds())
			}
		}
	}
	century := time.Date(2126, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	b, _, _, ok := farPlaceIn(defaultFarWidth, defaultFarLead, defaultFarMargin, now, century)
	require.True(t, ok)
	require.Less(t, b<<farPosBits+(1<<farPosBits-1), int64(1)<<53, "locations stay exact in Lua")
	_, _, _, ok = farPlaceIn(defaultFarWidth, defaultFarLead, defaultFarMargin, now, farEpoch-1)
	require.False(t, ok)
}

func TestFar_Loc(t *testing.T) {
	v, b, pos, err := farLoc("16777217")
	require.NoError(t, err)
	require.Equal(t, [3]int64{1, 1, 1}, [3]int64{int64(v), b, pos})
	v, b, pos, err = farLoc("-16777218") // format 2: negated, less one
	require.NoError(t, err)
	require.Equal(t, [3]int64{2, 1, 1}, [3]int64{int64(v), b, pos})
	for _, bad := range []string{"", "x", "1.5"} {
		_, _, _, err := farLoc(bad)
		require.ErrorContains(t, err, "is not a location", bad)
	}
}

func TestFar_Decode(t *testing.T) {
	body := string(Encode(message.NewMessage("0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11", []byte("p"))))
	start := int64(1_780_000_000_000)
	// format 1: score as a double, then the body
	var d [8]byte
	binary.BigEndian.PutUint64(d[:], math.Float64bits(float64(start*1024+5)))
	m, ok, bad := decodeFar(1, start, string(d[:])+body)
	require.True(t, ok)
	require.False(t, bad)
	require.Equal(t, farElem{Score: float64(start*1024 + 5), Body: body}, m)
	// format 2: relative score, flags, key
	var rel [4]byte
	minus7 := int32(-7)
	binary.BigEndian.PutUint32(rel[:], uint32(minus7))
	m, ok, _ = decodeFar(2, start, "\x02\x03"+string(rel[:])+"\x05order"+body)
	require.True(t, ok)
	require.Equal(t, farElem{Score: float64(start*1024 - 7), Body: body, Key: "order", Prio: true}, m)
	m, ok, _ = decodeFar(2, start, "\x02\x00"+string(rel[:])+body)
	require.True(t, ok)
	require.Equal(t, farElem{Score: float64(start*1024 - 7), Body: body}, m)
	// blank: skipped, not bad
	_, ok, bad = decodeFar(2, start, "")
	require.False(t, ok)
	require.False(t, bad)
	// unknown or damaged: refused
	for _, e := range []string{"\x04\x00" + string(rel[:]) + body, "\x03\x00\x00", "\x02\x04" + string(rel[:]) + body, "\x02\x02" + string(rel[:]) + "\x40ab", "\x02", string(d[:]) + body} {
		_, ok, bad = decodeFar(2, start, e)
		require.False(t, ok, "%q", e)
		require.True(t, bad, "%q", e)
	}
	_, ok, bad = decodeFar(1, start, "\x02\x00"+string(rel[:])+body)
	require.False(t, ok)
	require.True(t, bad, "a format 2 element in a format 1 bucket")
}

func TestFar_StoredUUID(t *testing.T) {
	for _, id := range []string{"0b1e6c1a-7d7e-4c6f-9d3b-2f6a1e9c0d11", "ORDER-1", ""} {
		body := Encode(message.NewMessage(id, []byte("p")))
		got, ok := storedUUID(body)
		require.True(t, ok, id)
		require.Equal(t, id, got)
	}
	for _, bad := range [][]byte{nil, {3, 1, 2}, {2, 50, 'x'}, {2}} {
		_, ok := storedUUID(bad)
		require.False(t, ok, "%v", bad)
	}
}
