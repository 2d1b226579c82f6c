package redisdelay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A cron spec ticks in its schedule's time zone, daylight saving included:
// 9:00 in New York is 14:00 UTC in winter and 13:00 UTC from 8 March 2026.
func TestScheduleNextTimezone(t *testing.T) {
	tk, err := parseSpec("0 9 * * *", "America/New_York")
	require.NoError(t, err)
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	assert.Equal(t, utc("2026-03-06T14:00:00Z"), tk.next(utc("2026-03-06T12:00:00Z")).UTC())
	assert.Equal(t, utc("2026-03-07T14:00:00Z"), tk.next(utc("2026-03-06T14:00:00Z")).UTC(), "strictly after")
	assert.Equal(t, utc("2026-03-08T13:00:00Z"), tk.next(utc("2026-03-07T15:00:00Z")).UTC(), "after the DST change")

	utcTk, err := parseSpec("0 9 * * *", "")
	require.NoError(t, err)
	assert.Equal(t, utc("2026-03-07T09:00:00Z"), utcTk.next(utc("2026-03-07T08:00:00Z")).UTC(), "\"\" is UTC")

	sec, err := parseSpec("*/10 * * * * *", "Europe/Paris")
	require.NoError(t, err)
	assert.Equal(t, utc("2026-03-07T08:00:10Z"), sec.next(utc("2026-03-07T08:00:03Z")).UTC(), "6 fields: seconds first")

	every, err := parseSpec("@every 200ms", "")
	require.NoError(t, err)
	assert.Equal(t, time.UnixMilli(1400), every.next(time.UnixMilli(1234)), "@every: multiples since the epoch")
	assert.Equal(t, time.UnixMilli(1600), every.next(time.UnixMilli(1400)))
}
