package store

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// With the default timing a message due within about a minute always stays
// in the waiting set, one due two minutes or more ahead always goes far,
// and a far bucket is unpacked before its messages are due; locations stay
// exact in a Lua number for a century.
func TestFarPlaceDefaults(t *testing.T) {
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

func TestFarLoc(t *testing.T) {
	b, pos, err := farLoc("16777217")
	require.NoError(t, err)
	require.Equal(t, [2]int64{1, 1}, [2]int64{b, pos})
	for _, bad := range []string{"", "x", "-1", "1.5"} {
		_, _, err := farLoc(bad)
		require.ErrorContains(t, err, "is not a location", bad)
	}
}

func TestStoredUUID(t *testing.T) {
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
