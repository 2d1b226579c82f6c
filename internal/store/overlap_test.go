package store

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// recurringoverlap.lua on states built by hand: the previous tick's message
// found behind more entries than a call reads (looked for on at the next
// call), in a group's retry set or redelivery stream, acknowledged, and
// the caller's stale view of the groups.
func TestRecurringOverlap_States(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	defer func(saved struct{ Entries, Members int }) { OverlapScan = saved }(OverlapScan)
	OverlapScan.Entries = 8

	sh := Keys{Prefix: "ovt"}.Shard("t", 0)
	prevUUID, nextUUID := "7f1c2e4a-8b3d-5c6e-9f0a-1b2c3d4e5f60", "7f1c2e4a-8b3d-5c6e-9f0a-1b2c3d4e5f61"
	next := OverlapTick{UUID: nextUUID, Tick: time.UnixMilli(2000)}
	var view OverlapView
	// check calls as a tick loop does: again while its view was wrong.
	check := func() (string, string) {
		t.Helper()
		for range 3 {
			status, reason, err := RecurringOverlap(ctx, c, sh, "s", &view, next)
			require.NoError(t, err)
			if status != "again" {
				return status, reason
			}
		}
		t.Fatal("again and again")
		return "", ""
	}
	recorded := func() OverlapRecord {
		t.Helper()
		v, err := c.HGet(ctx, sh.Overlap(), "s").Result()
		require.NoError(t, err)
		return parseOverlapRecord(v)
	}
	record := func() {
		t.Helper()
		from := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
		require.NoError(t, c.HSet(ctx, sh.Overlap(), "s", prevUUID+" 1000 "+from+" ? - -").Err())
	}
	body := func(id string) string { return string(Encode(message.NewMessage(id, []byte("p")))) }
	require.NoError(t, c.XGroupCreateMkStream(ctx, sh.Stream(), "g", "$").Err())
	require.NoError(t, c.SAdd(ctx, sh.Groups(), "g").Err())

	// Nothing recorded: let through, and recorded.
	status, _ := check()
	require.Equal(t, "go", status)
	require.Equal(t, OverlapRecord{UUID: nextUUID, Tick: time.UnixMilli(2000)}, recorded())
	require.Equal(t, recorded(), view.Prev)
	require.Equal(t, []string{"g"}, view.Groups)
	status, _ = check()
	require.Equal(t, "go", status, "the same tick again: a retried publish")

	// Behind 10 other entries, 8 read a call: undecided, then found, unread.
	record()
	for i := range 10 {
		require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: sh.Stream(), Values: []any{"m", body("other-" + strconv.Itoa(i))}}).Err())
	}
	require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: sh.Stream(), Values: []any{"m", body(prevUUID)}}).Err())
	status, reason := check()
	require.Equal(t, [2]string{"skip", "unknown"}, [2]string{status, reason})
	status, reason = check()
	require.Equal(t, [2]string{"skip", "ready"}, [2]string{status, reason}, "found at the second call")

	// Read by the group: pending; nacked into the retry set; redelivered.
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{sh.Stream(), ">"}, Count: 100}).Result()
	require.NoError(t, err)
	entry := res[0].Messages[10].ID
	status, reason = check()
	require.Equal(t, [2]string{"skip", "pending"}, [2]string{status, reason})
	for _, m := range res[0].Messages {
		require.NoError(t, c.XAck(ctx, sh.Stream(), "g", m.ID).Err())
	}
	member := "2:m" + entry
	require.NoError(t, c.ZAdd(ctx, sh.Retry("g"), redis.Z{Score: 1, Member: member}).Err())
	require.NoError(t, c.HSet(ctx, sh.retryBodies("g"), member, body(prevUUID)).Err())
	status, reason = check()
	require.Equal(t, [2]string{"skip", "retry"}, [2]string{status, reason})
	require.NoError(t, c.Del(ctx, sh.Retry("g"), sh.retryBodies("g")).Err())
	require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: sh.Redelivery("g"), Values: []any{"m", body(prevUUID), "a", 2}}).Err())
	status, reason = check()
	require.Equal(t, [2]string{"skip", "retry"}, [2]string{status, reason})

	// A caller whose view is wrong is told what to believe, and nothing
	// changes.
	view.Groups = []string{"g", "other"}
	status, _, err = RecurringOverlap(ctx, c, sh, "s", &view, next)
	require.NoError(t, err)
	require.Equal(t, "again", status)
	require.Equal(t, []string{"g"}, view.Groups)
	view.Prev = OverlapRecord{}
	status, _, err = RecurringOverlap(ctx, c, sh, "s", &view, next)
	require.NoError(t, err)
	require.Equal(t, "again", status)
	require.Equal(t, OverlapRecord{UUID: prevUUID, Tick: time.UnixMilli(1000)}, view.Prev)
	status, reason = check()
	require.Equal(t, [2]string{"skip", "retry"}, [2]string{status, reason})

	// Settled everywhere: finished, and the new tick recorded.
	require.NoError(t, c.Del(ctx, sh.Redelivery("g")).Err())
	status, _ = check()
	require.Equal(t, "go", status)
	require.Equal(t, nextUUID, recorded().UUID)

	// Waiting in the far tier: looked up there only when it may be.
	last, err := c.XRevRangeN(ctx, sh.Stream(), "+", "-", 1).Result()
	require.NoError(t, err)
	lastMs, _, _ := strings.Cut(last[0].ID, "-")
	ms, err := strconv.ParseInt(lastMs, 10, 64)
	require.NoError(t, err)
	from := strconv.FormatInt(ms+1, 10) // after the entries above
	// In format 2 (the script reads its index entry), then in format 3
	// (the caller confirms the fingerprint by FarPull).
	f := FarArgOf(prevUUID, 10*time.Minute, true)
	f.Place(time.Now().UnixMilli())
	_, err = Publish(ctx, c, sh, PublishOpts{MaxWaiting: 1 << 20}, []*fairCall{{PubArgs{Msgs: []PubMessage{
		{UUID: prevUUID, Delay: 10 * 60_000, Body: Encode(message.NewMessage(prevUUID, nil)), Far: f}}}}})
	require.NoError(t, err)
	for _, format := range []string{"2", "3"} {
		require.NoError(t, c.HSet(ctx, sh.Overlap(), "s", prevUUID+" 1000 "+from+" ? - -").Err())
		status, _ = check()
		require.Equal(t, "go", status, "format %s: recorded as never in the far tier: not looked up there", format)
		require.NoError(t, c.HSet(ctx, sh.Overlap(), "s", prevUUID+" 1000 "+from+" ? - f").Err())
		status, reason = check()
		require.Equal(t, [2]string{"skip", "waiting"}, [2]string{status, reason}, "format %s", format)
		if format == "2" {
			_, _, found, err := FarPull(ctx, c, sh, prevUUID, false)
			require.NoError(t, err)
			require.True(t, found)
			require.NoError(t, c.Del(ctx, sh.Waiting(), sh.Bodies()).Err())
			require.NoError(t, WriteFar3(ctx, c, sh, message.NewMessage(prevUUID, nil), time.Now().Add(10*time.Minute), "", false))
		}
	}
}

// A message that never entered the ready stream (a high-priority one goes
// to the groups' redelivery streams; a cancelled one nowhere), on a stream
// that grows faster than a call reads: the search ends at the entry that
// was last when it began, so the schedule is not skipped for good.
func TestRecurringOverlap_SearchEndsOnAGrowingStream(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	defer func(saved struct{ Entries, Members int }) { OverlapScan = saved }(OverlapScan)
	OverlapScan.Entries = 8

	sh := Keys{Prefix: "ovg"}.Shard("t", 0)
	prevUUID := "7f1c2e4a-8b3d-5c6e-9f0a-1b2c3d4e5f60"
	view := OverlapView{Prev: OverlapRecord{UUID: prevUUID, Tick: time.UnixMilli(1000)}, Groups: []string{"g"}}
	next := OverlapTick{UUID: "7f1c2e4a-8b3d-5c6e-9f0a-1b2c3d4e5f61", Tick: time.UnixMilli(2000)}
	require.NoError(t, c.XGroupCreateMkStream(ctx, sh.Stream(), "g", "$").Err())
	require.NoError(t, c.SAdd(ctx, sh.Groups(), "g").Err())
	from := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
	require.NoError(t, c.HSet(ctx, sh.Overlap(), "s", prevUUID+" 1000 "+from+" ? - p").Err())
	grow := func(n int) {
		for i := range n {
			require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: sh.Stream(), Values: []any{"m", "other-" + strconv.Itoa(i)}}).Err())
		}
	}
	grow(12)
	var reasons []string
	for range 5 {
		status, reason, err := RecurringOverlap(ctx, c, sh, "s", &view, next)
		require.NoError(t, err)
		if status == "go" {
			break
		}
		reasons = append(reasons, reason)
		grow(12) // more than a call reads
	}
	require.Equal(t, []string{"unknown"}, reasons, "12 entries to look at, 8 a call: decided at the second call")
}
