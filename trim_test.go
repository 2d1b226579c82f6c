package redisdelay_test

// Safe trimming of topic streams, against the real test server. Every test
// uses a fresh topic and runs in parallel.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Trimming drops only entries every group has read and acknowledged: what a
// group has not read, or holds pending, stays and is delivered later.
func TestLifecycle_TrimKeepsEntriesAGroupHasNotAcknowledged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	stream := shardOf(env.topic, 0).Stream()
	for _, g := range []string{"a", "b"} {
		s := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: g, VisibilityTimeout: time.Minute, DisableScheduler: true})
		require.NoError(t, s.SubscribeInitialize(env.topic))
	}
	// Enough entries for several stream nodes: trimming removes whole nodes.
	const n = 300
	var msgs []*message.Message
	for i := 0; i < n; i++ {
		msgs = append(msgs, newMessage(strconv.Itoa(i)))
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	entries, err := env.client.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, n)
	ids := make([]string, n)
	for i, e := range entries {
		ids[i] = e.ID
	}

	readAs := func(group, consumer string, count int64) []string {
		res, err := env.client.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: count, Block: -1,
		}).Result()
		require.NoError(t, err)
		var read []string
		for _, m := range res[0].Messages {
			read = append(read, m.ID)
		}
		return read
	}
	// Group a reads and acks everything; group b acks 200, holds 50 pending
	// and has not read the last 50.
	readA := readAs("a", "ca", n)
	require.Len(t, readA, n)
	require.NoError(t, env.client.XAck(ctx, stream, "a", readA...).Err())
	readB := readAs("b", "cb", 250)
	require.Len(t, readB, 250)
	require.NoError(t, env.client.XAck(ctx, stream, "b", readB[:200]...).Err())

	runManager(t, env.client, redisdelay.ManagerConfig{
		Topics: []string{env.topic}, CheckInterval: 100 * time.Millisecond, TrimInterval: 200 * time.Millisecond,
	})
	require.Eventually(t, func() bool { return env.client.XLen(ctx, stream).Val() < n }, 3*time.Second, 20*time.Millisecond,
		"nothing trimmed although both groups acked the first 200 entries")
	time.Sleep(500 * time.Millisecond) // more trim rounds
	left, err := env.client.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	kept := map[string]bool{}
	for _, e := range left {
		kept[e.ID] = true
	}
	for i := 200; i < n; i++ {
		require.True(t, kept[ids[i]], "entry %d (%s; pending or unread for group b) was trimmed", i, ids[i])
	}
	t.Logf("stream trimmed from %d to %d entries", n, len(left))

	// The pending (reclaimed from the silent consumer cb, once a subscriber
	// lowers the group's visibility timeout) and the unread entries are all
	// delivered.
	b := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "b", VisibilityTimeout: 300 * time.Millisecond, DisableScheduler: true})
	ch := subscribe(t, b, env.topic)
	got := map[string]int{}
	deadline := time.After(5 * time.Second)
	for len(got) < 100 {
		select {
		case m := <-ch:
			got[string(m.Payload)]++
			m.Ack()
		case <-deadline:
			t.Fatalf("group b received %d of its 100 unacknowledged messages", len(got))
		}
	}
	for i := 200; i < n; i++ {
		assert.Equal(t, 1, got[strconv.Itoa(i)], "message %d", i)
	}
}

// Before any group exists nothing is trimmed: the entries wait for the
// first group.
func TestLifecycle_TrimWithoutGroupsKeepsEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	var msgs []*message.Message
	for i := 0; i < 300; i++ {
		msgs = append(msgs, newMessage(strconv.Itoa(i)))
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	runManager(t, env.client, redisdelay.ManagerConfig{
		Topics: []string{env.topic}, CheckInterval: 50 * time.Millisecond, TrimInterval: 100 * time.Millisecond,
	})
	require.Never(t, func() bool { return env.client.XLen(ctx, shardOf(env.topic, 0).Stream()).Val() != 300 },
		time.Second, 50*time.Millisecond, "entries trimmed with no group")
}
