package redisdelay

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A cron spec ticks in its schedule's time zone, daylight saving included:
// 9:00 in New York is 14:00 UTC in winter and 13:00 UTC from 8 March 2026.
func TestSchedule_NextTimezone(t *testing.T) {
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

// A tick's jitter is the same in every process (from the tick's UUID),
// within [0, Jitter), and adds to the delay metadata of the schedule.
func TestSchedule_Jitter(t *testing.T) {
	s := &Schedule{ID: "s", Topic: "t", Jitter: 10 * time.Second}
	tick := time.UnixMilli(1_800_000_000_000)
	a, b := tickMessage("p", s, tick), tickMessage("p", s, tick)
	require.Equal(t, a.Metadata, b.Metadata, "the same in every process")
	seen := map[string]bool{}
	for n := range 50 {
		m := tickMessage("p", s, tick.Add(time.Duration(n)*time.Second))
		d, err := time.ParseDuration(m.Metadata.Get(delay.DelayedForKey))
		require.NoError(t, err)
		require.True(t, d >= 0 && d < 10*time.Second, "jitter %s", d)
		seen[d.String()] = true
	}
	require.Greater(t, len(seen), 40, "spread over the window")

	s.Metadata = map[string]string{delay.DelayedForKey: "1m", delay.DelayedUntilKey: "2027-01-15T08:00:00.000Z"}
	m := tickMessage("p", s, tick)
	d, err := time.ParseDuration(m.Metadata.Get(delay.DelayedForKey))
	require.NoError(t, err)
	require.True(t, d >= time.Minute && d < time.Minute+10*time.Second, "added to the delay: %s", d)
	u, err := time.Parse(time.RFC3339Nano, m.Metadata.Get(delay.DelayedUntilKey))
	require.NoError(t, err)
	require.Equal(t, d-time.Minute, u.Sub(time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)), "both keys move alike")

	s.Jitter = -time.Second
	_, err = s.validate()
	require.ErrorIs(t, err, ErrInvalidSchedule)
}
