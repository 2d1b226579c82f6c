package redisdelay_test

// Groups combined with consumer groups: two of them, one of an older
// version, and none yet when grouped messages fall due.
//
// Each test of groups_*_test.go ends with awaitGroupsSettled
// (helpers_groups_test.go): once everything is settled, no group state is
// left in Redis.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Two consumer groups of a topic each receive every grouped message, each
// under its own GroupConcurrency (1 for x, 2 for y, each with three
// subscribers): what one consumer group holds does not count against the
// other's cap. A subscription holds one message of a capped group per
// read, so three subscriptions show the cap exactly.
func TestGroupsCombo_TwoConsumerGroups(t *testing.T) {
	t.Parallel()
	const n = 5
	env := setup(t)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})
	consumers := func(group string, limit int) <-chan *message.Message {
		var chs []<-chan *message.Message
		for range 3 {
			sub := newSubscriber(t, newClient(t), redisdelay.SubscriberConfig{ConsumerGroup: group, GroupConcurrency: limit})
			chs = append(chs, subscribe(t, sub, env.topic))
		}
		return fanIn(t, chs...)
	}
	x, y := consumers("x", 1), consumers("y", 2)
	var msgs []*message.Message
	for i := range n {
		msgs = append(msgs, groupedMessage("a", i))
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))

	gotX := receiveSet(t, x, 1)
	gotY := receiveSet(t, y, 2)
	require.Contains(t, gotX, "a/0")
	require.Contains(t, gotY, "a/0")
	require.Contains(t, gotY, "a/1")
	nothing(t, x, 300*time.Millisecond) // x's one slot is held
	nothing(t, y, 100*time.Millisecond) // y's two are

	// x moves on when its message is acked, whatever y holds
	gotX["a/0"].Ack()
	msg := receive(t, x, 5*time.Second)
	require.Equal(t, "a/1", string(msg.Payload))
	gotX["a/1"] = msg
	nothing(t, y, 100*time.Millisecond)
	gotY["a/0"].Ack()
	msg = receive(t, y, 5*time.Second)
	require.Equal(t, "a/2", string(msg.Payload))
	gotY["a/2"] = msg
	nothing(t, y, 100*time.Millisecond)
	nothing(t, x, 100*time.Millisecond)

	// the rest: both receive every message once
	gotX["a/1"].Ack()
	gotY["a/1"].Ack()
	gotY["a/2"].Ack()
	for _, c := range []struct {
		ch  <-chan *message.Message
		got map[string]*message.Message
	}{{x, gotX}, {y, gotY}} {
		for len(c.got) < n {
			msg := receive(t, c.ch, 5*time.Second)
			require.NotContains(t, c.got, string(msg.Payload), "delivered twice")
			c.got[string(msg.Payload)] = msg
			msg.Ack()
		}
	}
	for i := range n {
		assert.Contains(t, gotX, fmt.Sprint("a/", i))
		assert.Contains(t, gotY, fmt.Sprint("a/", i))
	}
	nothing(t, x, 200*time.Millisecond)
	nothing(t, y, 100*time.Millisecond)
	awaitGroupsSettled(t, env.client, env.topic, "x", 1)
	awaitGroupsSettled(t, env.client, env.topic, "y", 1)
}

// A consumer group whose subscribers predate groups (simulated: its meta
// hash lacks gv in both partitions) gets grouped messages in its
// redelivery stream when they fall due, in due order, with no group state:
// none is lost, and its subscribers read them as plain messages. First
// with no subscriber reading (the entries wait in the stream), then with
// one reading.
func TestGroupsCombo_ConsumerGroupOfOlderVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const parts, each = 2, 6
	groups := []string{"g0", "g1", "g2", "g3"}
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, parts)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "old", Partitions: parts, GroupConcurrency: 1})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	forgetGroups(t, env.client, env.topic, "old", parts)
	// and a consumer group of this version beside it: each is served its way
	current := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "new", Partitions: parts, GroupConcurrency: 1})
	require.NoError(t, current.SubscribeInitialize(env.topic))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})

	n := len(groups) * each
	publishDueReversed(t, pub, env.topic, groups, each)
	require.Eventually(t, func() bool {
		var redo int64
		for p := range parts {
			redo += env.client.XLen(ctx, shardOf(env.topic, p).Redelivery("old")).Val()
		}
		return redo == int64(n) && topicStats(t, env.insp, env.topic).Waiting == 0
	}, 5*time.Second, 10*time.Millisecond, "the grouped messages reach the redelivery streams")
	require.EqualValues(t, n, groupStats(t, env.insp, env.topic, "new").Grouped, "the current consumer group queues them in groups")
	st := groupStats(t, env.insp, env.topic, "old")
	require.Zero(t, st.Grouped)
	require.Zero(t, st.ActiveGroups)
	require.EqualValues(t, n, st.Ready)
	for p := range parts {
		require.Zero(t, env.client.Exists(ctx, shardOf(env.topic, p).Fair("old")).Val(), "partition %d has fair queues", p)
		entries, err := env.client.XRange(ctx, shardOf(env.topic, p).Redelivery("old"), "-", "+").Result()
		require.NoError(t, err)
		next := map[string]int{}
		for _, e := range entries {
			require.NotContains(t, e.Values, "k", "an old consumer group's entry names a group")
			m, err := redisdelay.DecodeMessage([]byte(e.Values["m"].(string)))
			require.NoError(t, err)
			g, seq := splitPayload(t, m)
			require.Equal(t, next[g], seq, "partition %d: group %s's entries out of due order", p, g)
			next[g]++
		}
	}

	ch := subscribe(t, sub, env.topic)
	next := receiveGroups(t, ch, n, map[string]int{})
	nothing(t, ch, 200*time.Millisecond)
	cur := subscribe(t, current, env.topic)
	receiveGroups(t, cur, n, map[string]int{})
	nothing(t, cur, 100*time.Millisecond)
	awaitGroupsSettled(t, env.client, env.topic, "new", parts)

	// With the subscriber reading (a Subscriber initializes a topic's
	// group once: Subscribe wrote no gv; forgetGroups makes sure).
	forgetGroups(t, env.client, env.topic, "old", parts)
	for _, g := range groups {
		next[g] = 0 // the second round numbers from 0 again
	}
	publishDueReversed(t, pub, env.topic, groups, each)
	receiveGroups(t, ch, n, next)
	receiveGroups(t, cur, n, map[string]int{})
	nothing(t, ch, 200*time.Millisecond)
	nothing(t, cur, 100*time.Millisecond)
	require.Zero(t, groupStats(t, env.insp, env.topic, "old").Grouped)
	awaitGroupsSettled(t, env.client, env.topic, "old", parts)
	awaitGroupsSettled(t, env.client, env.topic, "new", parts)
}

// Grouped messages that fall due while the topic has no consumer group
// wait for the first (they do not go to the ready stream, where a later
// consumer group would read them ungrouped): then GroupConcurrency 1 and
// the group's order hold for them as for any other. BatchSize 1: each
// subscription holds one message at a time, so two subscriptions could
// hold two of a group at once were the cap not held.
func TestGroupsCombo_PublishedBeforeAnyConsumerGroup(t *testing.T) {
	t.Parallel()
	const each = 4
	ctx := context.Background()
	env := setup(t)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})
	var msgs []*message.Message
	for i := range each {
		msgs = append(msgs, groupedMessage("a", i))
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	// With no consumer group to queue them for, the scheduler keeps them,
	// due, for the first one (promote.lua's gorphan): still Waiting.
	require.Eventually(t, func() bool {
		n, err := env.client.ZCard(ctx, shardKey(env.topic, 0, "gorphan")).Result()
		return err == nil && n == each
	}, 5*time.Second, 10*time.Millisecond, "the scheduler keeps them for a consumer group")
	require.EqualValues(t, each, topicStats(t, env.insp, env.topic).Waiting)
	n, err := env.client.XLen(ctx, shardOf(env.topic, 0).Stream()).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing in the ready stream")

	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1, BatchSize: 1}
	h := newHandled()
	done := make(chan struct{}, each)
	for _, c := range []redis.UniversalClient{env.client, newClient(t)} {
		ch := subscribe(t, newSubscriber(t, c, config), env.topic)
		go func() {
			for msg := range ch {
				g := h.start(t, msg)
				time.Sleep(50 * time.Millisecond) // overlapping handlers, were the cap not held
				h.end(g)
				msg.Ack()
				done <- struct{}{}
			}
		}()
	}
	for range each {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("handled %d of %d messages", h.count(), each)
		}
	}
	h.mu.Lock()
	assert.Equal(t, 1, h.most["a"], "group a ran more than one message at once (GroupConcurrency 1)")
	assert.Equal(t, seqs(each), h.order["a"], "group a's order")
	h.mu.Unlock()
	awaitGroupsSettled(t, env.client, env.topic, "g", 1)
}
