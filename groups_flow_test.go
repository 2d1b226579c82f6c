package redisdelay_test

// Groups combined with flow control: rate limits, pause and handler
// timeouts.
//
// Each test of groups_*_test.go ends with awaitGroupsSettled
// (helpers_groups_test.go): once everything is settled, no group state is
// left in Redis.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// GroupRateLimit: each group takes a burst of Messages, then one message
// per Per/Messages (GCRA, fair.lua), whatever the other groups do. So by
// the time e after the publish, a group has delivered at most Messages +
// e/(Per/Messages) messages: in the first tenth of the interval at most 5,
// the burst. The bound is checked at every delivery (an upper bound only,
// no lower bound on timing). All are eventually delivered, each group in
// due order, with nothing published after the first call: a subscription
// whose groups are all asleep under their rate limit wakes by its own
// timer (nothing rings its bell then, and the default BlockTime, 30s, is
// far beyond the time the test allows).
func TestGroupsCombo_RateLimit(t *testing.T) {
	t.Parallel()
	const each = 15
	// the setting under test: 5 per 500ms per group, a burst of 5 then one per 100ms
	limit := redisdelay.RateLimit{Messages: 5, Per: 500 * time.Millisecond}
	emission := limit.Per / time.Duration(limit.Messages)
	env := setup(t)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupRateLimit: limit})
	ch := subscribe(t, sub, env.topic)
	awaitIdleSubscriptions(t, env.client, env.topic, 1)

	var msgs []*message.Message
	for i := range each {
		msgs = append(msgs, groupedMessage("a", i), groupedMessage("b", i))
	}
	start := time.Now()
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	got := map[string]int{}
	for range 2 * each {
		msg := receive(t, ch, 5*time.Second)
		since := time.Since(start)
		g, seq := splitPayload(t, msg)
		require.Equal(t, got[g], seq, "group %s out of order", g)
		got[g]++
		// 2ms: Redis's clock and ours, read at different moments
		allowed := limit.Messages + int((since+2*time.Millisecond)/emission)
		require.LessOrEqual(t, got[g], allowed, "group %s: %d messages delivered %s after the publish", g, got[g], since)
		msg.Ack()
	}
	t.Logf("%d messages of 2 groups delivered in %s", 2*each, time.Since(start).Round(time.Millisecond))
	require.Equal(t, map[string]int{"a": each, "b": each}, got)
	nothing(t, ch, 200*time.Millisecond)
	defer func() {
		if t.Failed() {
			now, err := env.client.Time(context.Background()).Result()
			t.Logf("Redis's clock at the end: %d ms (err %v); Stats: %+v", now.UnixMilli(), err, groupStats(t, env.insp, env.topic, "g"))
		}
	}()
	// An idle group whose limiter has not caught up waits in fwait until
	// it has, and is then deleted (fair_close), leaving nothing behind.
	awaitGroupsSettled(t, env.client, env.topic, "g", 1)
}

// Inspector.Pause holds back grouped messages too (two partitions: the
// partition 1 subscription reads the pause flag of partition 0): paused
// before they are published, they are queued in their groups and none is
// delivered; paused while they are being delivered, the fetch in flight is
// delivered and then nothing more. Resume delivers the rest, each once, in
// group order. The default BlockTime (30s) is far longer than the test's
// waits: the pause and resume notifications act, not the periodic check.
func TestGroupsCombo_Pause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const parts, groups, each = 2, 4, 10
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, parts)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, GroupConcurrency: 1})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	require.NoError(t, env.insp.Pause(ctx, env.topic, "g"))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})
	ch := subscribe(t, sub, env.topic)

	publish := func(from, to int) {
		var msgs []*message.Message
		for i := from; i < to; i++ {
			for g := range groups {
				msg := groupedMessage(fmt.Sprint("g", g), i)
				if i >= (from+to)/2 {
					delay.Message(msg, delay.For(200*time.Millisecond)) // due after the immediate ones
				}
				msgs = append(msgs, msg)
			}
		}
		require.NoError(t, pub.Publish(env.topic, msgs...))
	}
	publish(0, each)
	awaitQueuedInGroups(t, env.insp, env.topic, "g", groups*each)
	used := map[int]bool{}
	for g := range groups {
		used[redisdelay.PartitionOf(fmt.Sprint("g", g), parts)] = true
	}
	require.Len(t, used, parts, "the groups are in both partitions")
	nothing(t, ch, 500*time.Millisecond)
	st := groupStats(t, env.insp, env.topic, "g")
	require.True(t, st.Paused)
	require.EqualValues(t, groups*each, st.Grouped)
	require.EqualValues(t, groups, st.ActiveGroups)

	was, err := env.insp.Resume(ctx, env.topic, "g")
	require.NoError(t, err)
	require.True(t, was)
	next := receiveGroups(t, ch, groups*each, map[string]int{})
	nothing(t, ch, 200*time.Millisecond)
	awaitGroupsSettled(t, env.client, env.topic, "g", parts)

	// Paused while delivering: what was fetched comes, then nothing.
	publish(each, 4*each)
	next = receiveGroups(t, ch, groups, next)
	require.NoError(t, env.insp.Pause(ctx, env.topic, "g"))
	spill := 0
drain:
	for {
		select {
		case msg := <-ch:
			g, seq := splitPayload(t, msg)
			require.Equal(t, next[g], seq, "group %s out of order", g)
			next[g]++
			spill++
			msg.Ack()
		case <-time.After(500 * time.Millisecond):
			break drain
		}
	}
	t.Logf("%d messages fetched before the pause were delivered after it", spill)
	left := groups*3*each - groups - spill
	require.Positive(t, left, "the pause held nothing back")
	require.Eventually(t, func() bool {
		st := groupStats(t, env.insp, env.topic, "g")
		return st.Pending == 0 && st.Ready == 0 && st.Grouped == int64(left)
	}, 5*time.Second, 10*time.Millisecond, "the rest waits in the groups: %+v", groupStats(t, env.insp, env.topic, "g"))
	nothing(t, ch, 300*time.Millisecond)
	_, err = env.insp.Resume(ctx, env.topic, "g")
	require.NoError(t, err)
	next = receiveGroups(t, ch, left, next)
	for g := range groups {
		require.Equal(t, 4*each, next[fmt.Sprint("g", g)])
	}
	nothing(t, ch, 200*time.Millisecond)
	awaitGroupsSettled(t, env.client, env.topic, "g", parts)
}

// A handler that hangs on a grouped message (GroupConcurrency 1) holds
// its group's slot only until HandlerTimeout: the timed-out attempt is
// retried first (after the default RetryDelay, its slot kept meanwhile,
// so the group's next message waits, also for a second subscriber), and
// once its last attempt (MaxAttempts 2) times out it is dead-lettered
// with its group and the slot comes back: the group's next message is
// delivered. HandlerTimeout is the setting under test (the default is 30
// minutes); MaxAttempts 2 ends the test after two timeouts.
func TestGroupsCombo_HandlerTimeout(t *testing.T) {
	t.Parallel()
	tp := topic()
	env := setup(t)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{tp}})
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1, MaxAttempts: 2,
		HandlerTimeout: 300 * time.Millisecond}
	ch := fanIn(t,
		subscribe(t, newSubscriber(t, env.client, config), tp),
		subscribe(t, newSubscriber(t, newClient(t), config), tp))
	require.NoError(t, env.pub.Publish(tp, groupedMessage("a", 0), groupedMessage("a", 1), groupedMessage("b", 0)))

	var hung []*message.Message // never acked nor nacked by their handler
	var seen []string
	for len(seen) < 4 {
		msg := receive(t, ch, 5*time.Second)
		seen = append(seen, string(msg.Payload)+"#"+msg.Metadata.Get(redisdelay.AttemptKey))
		if string(msg.Payload) == "a/0" {
			hung = append(hung, msg)
			continue
		}
		msg.Ack()
	}
	var ofA []string
	for _, s := range seen {
		if strings.HasPrefix(s, "a/") {
			ofA = append(ofA, s)
		}
	}
	require.Equal(t, []string{"a/0#1", "a/0#2", "a/1#1"}, ofA, "all deliveries: %v", seen)
	require.Contains(t, seen, "b/0#1")
	dead := awaitDeadLetters(t, env.insp, tp, "g", 1, 5*time.Second)
	require.Equal(t, "a/0", string(dead[0].Message.Payload))
	require.Equal(t, "a", dead[0].Message.Metadata.Get(redisdelay.GroupKey))
	require.Contains(t, dead[0].Reason, "handler timed out after 300ms")
	for _, msg := range hung {
		msg.Ack() // late: ignored
	}
	nothing(t, ch, 300*time.Millisecond)
	require.Len(t, awaitDeadLetters(t, env.insp, tp, "g", 1, time.Second), 1)
	awaitGroupsSettled(t, env.client, tp, "g", 1)
}
