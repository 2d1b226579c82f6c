package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

func TestSchedules_Commands(t *testing.T) {
	prefix := "cli-" + t.Name()
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	keys, err := client.Keys(ctx, prefix+":*").Result()
	require.NoError(t, err)
	if len(keys) > 0 {
		require.NoError(t, client.Del(ctx, keys...).Err())
	}
	cli := func(args ...string) result {
		return runCLI(t, append([]string{"--addr", redisAddr, "--prefix", prefix}, args...)...)
	}

	r := cli("schedules")
	require.Equal(t, 0, r.code)
	assert.Equal(t, "no schedules under prefix \""+prefix+"\"\n", r.stdout)

	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix}, nil)
	require.NoError(t, err)
	defer pub.Close()
	require.NoError(t, pub.Schedule(ctx, redisdelay.Schedule{ID: "report", Spec: "0 9 * * 1-5", Timezone: "America/New_York",
		Topic: "reports", Payload: []byte("daily"), Metadata: map[string]string{"kind": "daily"}}))
	require.NoError(t, pub.Schedule(ctx, redisdelay.Schedule{ID: "ping", Spec: "@every 1h", Topic: "pings", Overlap: redisdelay.OverlapSkip}))
	// Two ticks skipped by the overlap policy, as a tick loop counts them.
	skips := store.Keys{Prefix: prefix}.Schedules().Skips()
	lastSkipped := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	require.NoError(t, client.HSet(ctx, skips, "ping", 2, "ping@last", lastSkipped.UnixMilli()).Err())

	r = cli("schedules")
	require.Equal(t, 0, r.code)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3)
	assert.Equal(t, []string{"ID", "SPEC", "TIMEZONE", "TOPIC", "NEXT", "IN", "LAST", "TICK", "OVERLAP", "SKIPPED"}, strings.Fields(lines[0]))
	next := time.Now().Truncate(time.Hour).Add(time.Hour).UTC().Format(time.RFC3339)
	assert.Equal(t, []string{"ping", "@every", "1h", "UTC", "pings", next}, strings.Fields(lines[1])[:6])
	assert.True(t, strings.HasSuffix(lines[1], "skip     2 (last 2026-11-24T09:00:00Z)"), "%q", lines[1])
	assert.Equal(t, []string{"report", "0", "9", "*", "*", "1-5", "America/New_York", "reports"}, strings.Fields(lines[2])[:8])
	assert.Equal(t, []string{"allow", "0"}, strings.Fields(lines[2])[len(strings.Fields(lines[2]))-2:])

	r = cli("--json", "schedules")
	require.Equal(t, 0, r.code)
	list := decode[[]scheduleJSON](t, r.stdout)
	require.Len(t, list, 2)
	assert.Equal(t, "report", list[1].ID)
	assert.Equal(t, "UTC", list[0].Timezone, "the zone in effect, not an empty string")
	assert.Equal(t, redisdelay.DefaultCatchUpWindow.Milliseconds(), list[0].CatchUpWindowMs, "the window in effect")
	assert.Equal(t, 5, list[1].PayloadBytes)
	assert.Equal(t, map[string]string{"kind": "daily"}, list[1].Metadata)
	assert.Equal(t, "allow", list[1].Overlap, "the policy in effect, not an empty string")
	assert.Zero(t, list[1].Skipped)
	assert.Nil(t, list[1].LastSkipped)
	assert.Equal(t, "skip", list[0].Overlap)
	assert.EqualValues(t, 2, list[0].Skipped)
	require.NotNil(t, list[0].LastSkipped)
	assert.Equal(t, lastSkipped, *list[0].LastSkipped)
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	assert.Equal(t, 9, list[1].Next.In(ny).Hour())

	// pause-schedule, resume-schedule and trigger.
	r = cli("pause-schedule", "ping")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "paused schedule \"ping\": no tick until \"redisdelay resume-schedule ping\"\n", r.stdout)
	assert.Equal(t, "schedule \"ping\" was already paused\n", cli("pause-schedule", "ping").stdout)
	assert.Equal(t, schedulePauseJSON{ID: "ping", Paused: true, WasPaused: true}, decode[schedulePauseJSON](t, cli("--json", "pause-schedule", "ping").stdout))
	lines = strings.Split(strings.TrimSpace(cli("schedules").stdout), "\n")
	assert.Equal(t, []string{"ping", "@every", "1h", "UTC", "pings", "paused", "since"}, strings.Fields(lines[1])[:7])
	list = decode[[]scheduleJSON](t, cli("--json", "schedules").stdout)
	require.NotNil(t, list[0].Paused, "paused, in JSON")
	r = cli("trigger", "ping")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "published a tick of schedule \"ping\"\n", r.stdout)
	assert.Contains(t, r.stderr, `redisdelay: warning: no scheduler holds topic "pings" (nothing waiting)`, "no scheduler runs in this test")
	assert.NotContains(t, r.stderr, "waiting messages waiting")
	assert.Contains(t, r.stderr, `redisdelay: warning: topic "pings" has no consumer group: 1 message(s) in its ready stream wait for the first`)
	st := cli("stats", "pings")
	require.Equal(t, 0, st.code, st.stderr)
	assert.Contains(t, st.stderr, `redisdelay: warning: topic "pings" has no consumer group: 1 message(s) in its ready stream`, "stats says so too")
	health := cli("health", "pings")
	assert.Equal(t, 1, health.code)
	assert.Contains(t, health.stdout+health.stderr, "no_consumer_group")
	list = decode[[]scheduleJSON](t, cli("--json", "schedules").stdout)
	require.NotNil(t, list[0].LastTick, "the trigger is the last tick")
	assert.WithinDuration(t, time.Now(), *list[0].LastTick, time.Minute)
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: prefix})
	require.NoError(t, err)
	stats, err := insp.Stats(ctx, "pings")
	require.NoError(t, err)
	assert.EqualValues(t, 1, stats.Stream, "the triggered tick's message")
	nextTick := time.Now().Truncate(time.Hour).Add(time.Hour).UTC()
	assert.Regexp(t, `^resumed schedule "ping": next tick at `+nextTick.Format(time.RFC3339)+` \(in [0-9hms]+\); the ticks it missed while paused are not published\n$`, cli("resume-schedule", "ping").stdout)
	assert.Regexp(t, `^schedule "ping" was not paused: next tick at `+nextTick.Format(time.RFC3339), cli("resume-schedule", "ping").stdout)
	resumed := decode[schedulePauseJSON](t, cli("--json", "resume-schedule", "ping").stdout)
	require.NotNil(t, resumed.Next)
	assert.Equal(t, nextTick, *resumed.Next)
	assert.Nil(t, decode[[]scheduleJSON](t, cli("--json", "schedules").stdout)[0].Paused)
	for _, cmd := range []string{"trigger", "pause-schedule", "resume-schedule"} {
		r = cli(cmd, "nope")
		assert.Equal(t, 1, r.code)
		assert.Equal(t, `redisdelay: no schedule "nope" under prefix "`+prefix+`": see "redisdelay schedules" for their IDs`+"\n", r.stderr, "points to the listing, not to a Go API")
	}

	// A tick overdue: no scheduler publishes them.
	require.NoError(t, client.ZAdd(ctx, store.Keys{Prefix: prefix}.Schedules().Next(), redis.Z{Score: float64(time.Now().Add(-5 * time.Minute).UnixMilli()), Member: "ping"}).Err())
	r = cli("schedules")
	require.Equal(t, 0, r.code)
	assert.Regexp(t, `ping .* overdue by 5m0s`, r.stdout, "never \"due now\" for a past tick")
	assert.Contains(t, r.stderr, `redisdelay: warning: schedule "ping"'s next tick is overdue by 5m0s: no scheduler publishes ticks under prefix`)

	r = cli("unschedule", "report")
	require.Equal(t, 0, r.code)
	assert.Equal(t, "removed schedule \"report\"\n", r.stdout)
	r = cli("unschedule", "report")
	require.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "not removed: no schedule \"report\"")
	r = cli("--json", "unschedule", "ping")
	require.Equal(t, 0, r.code)
	assert.Equal(t, unscheduleJSON{ID: "ping", Removed: true}, decode[unscheduleJSON](t, r.stdout))

	r = cli("unschedule")
	assert.Equal(t, 2, r.code, "an ID is required")
	r = cli("schedules", "extra")
	assert.Equal(t, 2, r.code, "no argument")
}
