package redisdelay_test

// Groups (GroupKey, GroupConcurrency, GroupRateLimit) combined with where
// messages wait: the far tier, high priority, cancel and reschedule.
//
// Each test of groups_*_test.go ends with awaitGroupsSettled
// (helpers_groups_test.go): once everything is settled, no group state is
// left in Redis.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// A grouped message delayed far enough goes to the far tier (the test
// binary's far tier takes messages due more than about 2.5s ahead, see
// TestMain), its group named in grpof all the same. Brought due by
// Inspector.Reschedule (an hour early), it is queued in its group: while
// the group's one slot (GroupConcurrency 1) is held it waits, counted in
// Grouped; then it is delivered through the redelivery stream with its
// group (field k). One due in 4s is unpacked by the scheduler and
// delivered through its group too.
func TestGroupsCombo_FarTier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := topic()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1})
	require.NoError(t, sub.SubscribeInitialize(tp))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{tp}})

	soon := groupedDelayed("a", 2, 4*time.Second)
	later := groupedDelayed("a", 1, time.Hour)
	require.NoError(t, env.pub.Publish(tp, soon, later))
	_, far := farKeys(t, tp)
	require.EqualValues(t, 2, far, "both went to the far tier")
	require.Equal(t, "a", groupOf(t, env.client, tp, 0, soon.UUID))
	require.Equal(t, "a", groupOf(t, env.client, tp, 0, later.UUID))

	require.NoError(t, env.pub.Publish(tp, groupedMessage("a", 0)))
	ch := subscribe(t, sub, tp)
	held := receive(t, ch, 5*time.Second)
	require.Equal(t, "a/0", string(held.Payload))

	ok, err := env.insp.Reschedule(ctx, tp, later.UUID, time.Now())
	require.NoError(t, err)
	require.True(t, ok)
	// due now: queued in its group behind the slot a/0 holds
	require.Eventually(t, func() bool {
		st := groupStats(t, env.insp, tp, "g")
		return st.Grouped == 1 && st.ActiveGroups == 1
	}, 5*time.Second, 10*time.Millisecond, "the rescheduled message is queued in its group")
	require.Empty(t, groupOf(t, env.client, tp, 0, later.UUID), "grpof names only waiting messages")
	nothing(t, ch, 200*time.Millisecond)

	held.Ack()
	msg := receive(t, ch, 5*time.Second)
	require.Equal(t, later.UUID, msg.UUID)
	require.Equal(t, "a", msg.Metadata.Get(redisdelay.GroupKey))
	require.Equal(t, "1", msg.Metadata.Get(redisdelay.AttemptKey))
	require.Equal(t, map[string]string{later.UUID: "a"}, redoGroups(t, env.client, tp, "g", 0), "delivered through its group's redelivery entry")
	msg.Ack()

	msg = receive(t, ch, 8*time.Second)
	require.Equal(t, soon.UUID, msg.UUID, "the one unpacked from the far tier")
	require.Equal(t, "a", redoGroups(t, env.client, tp, "g", 0)[soon.UUID])
	msg.Ack()
	nothing(t, ch, 200*time.Millisecond)
	buckets, far := farKeys(t, tp)
	assert.Zero(t, buckets)
	assert.Zero(t, far)
	assert.Zero(t, env.client.Exists(ctx, shardOf(tp, 0).GroupOf()).Val(), "grpof left behind")
	awaitGroupsSettled(t, env.client, tp, "g", 1)
}

// A high-priority grouped message (SetHighPriority) goes before the
// messages of its group queued earlier, high-priority ones among
// themselves in due order, and still counts against GroupConcurrency:
// with a cap of 1, subscribers in two processes run one message of the
// group at a time. Another group is not held back.
func TestGroupsCombo_HighPriority(t *testing.T) {
	t.Parallel()
	tp := topic()
	env := setup(t)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1}
	first := newSubscriber(t, env.client, config)
	require.NoError(t, first.SubscribeInitialize(tp))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{tp}})

	var msgs []*message.Message
	for i := range 4 {
		msgs = append(msgs, groupedMessage("a", i))
	}
	msgs = append(msgs, groupedMessage("b", 0), groupedMessage("b", 1))
	require.NoError(t, env.pub.Publish(tp, msgs...))
	awaitQueuedInGroups(t, env.insp, tp, "g", 6)
	for _, seq := range []int{100, 101} { // published after the others, due after them
		msg := groupedMessage("a", seq)
		redisdelay.SetHighPriority(msg)
		require.NoError(t, env.pub.Publish(tp, msg))
	}
	awaitQueuedInGroups(t, env.insp, tp, "g", 8)

	h := newHandled()
	done := make(chan struct{}, 8)
	for _, sub := range []*redisdelay.Subscriber{first, newSubscriber(t, newClient(t), config)} {
		ch := subscribe(t, sub, tp)
		go func() {
			for msg := range ch {
				g := h.start(t, msg)
				time.Sleep(5 * time.Millisecond) // overlapping handlers, were the cap not held
				h.end(g)
				msg.Ack()
				done <- struct{}{}
			}
		}()
	}
	for range 8 {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("handled %d of 8 messages", h.count())
		}
	}
	h.mu.Lock()
	assert.Equal(t, []int{100, 101, 0, 1, 2, 3}, h.order["a"])
	assert.Equal(t, []int{0, 1}, h.order["b"])
	assert.Equal(t, 1, h.most["a"], "group a ran more than one at once")
	assert.Equal(t, 1, h.most["b"], "group b ran more than one at once")
	h.mu.Unlock()
	awaitGroupsSettled(t, env.client, tp, "g", 1)
}

// Inspector.Cancel and Reschedule reach waiting grouped messages in both
// tiers (a business key of over 255 bytes keeps a message in the waiting
// set whatever its due time; one without goes to the far tier): a cancelled one is never
// delivered and leaves no grpof field; a rescheduled one falls due and is
// queued in its group, behind the message holding the group's slot
// (GroupConcurrency 1), then delivered in due order. Once queued in its
// group a message is no longer waiting: Cancel does not find it.
func TestGroupsCombo_CancelAndReschedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := topic()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1})
	require.NoError(t, sub.SubscribeInitialize(tp))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{tp}})

	keyed := func(msg *message.Message, key string) *message.Message {
		redisdelay.SetBusinessKey(msg, key)
		return msg
	}
	// a key of over 255 bytes keeps a message in the waiting set
	nearGone := keyed(groupedDelayed("a", 98, time.Hour), "near-gone"+strings.Repeat(".", 256))
	farGone := groupedDelayed("a", 99, time.Hour)
	farMoved := groupedDelayed("a", 1, time.Hour)
	nearMoved := keyed(groupedDelayed("a", 2, time.Hour), "near-moved"+strings.Repeat(".", 256))
	require.NoError(t, env.pub.Publish(tp, nearGone, farGone, farMoved, nearMoved))
	_, far := farKeys(t, tp)
	require.EqualValues(t, 2, far, "the two without a business key are in the far tier")
	for _, m := range []*message.Message{nearGone, farGone, farMoved, nearMoved} {
		require.Equal(t, "a", groupOf(t, env.client, tp, 0, m.UUID), "grpof of %s", m.Payload)
	}

	for _, m := range []*message.Message{nearGone, farGone} {
		ok, err := env.insp.Cancel(ctx, tp, m.UUID)
		require.NoError(t, err)
		require.True(t, ok, "cancel %s", m.Payload)
		require.Empty(t, groupOf(t, env.client, tp, 0, m.UUID), "cancelled %s keeps its grpof field", m.Payload)
	}
	require.EqualValues(t, 2, topicStats(t, env.insp, tp).Waiting)

	require.NoError(t, env.pub.Publish(tp, groupedMessage("a", 0)))
	ch := subscribe(t, sub, tp)
	held := receive(t, ch, 5*time.Second)
	require.Equal(t, "a/0", string(held.Payload))
	now := time.Now()
	for k, m := range []*message.Message{farMoved, nearMoved} {
		ok, err := env.insp.Reschedule(ctx, tp, m.UUID, now.Add(time.Duration(k)*100*time.Millisecond))
		require.NoError(t, err)
		require.True(t, ok, "reschedule %s", m.Payload)
	}
	require.Eventually(t, func() bool {
		st := groupStats(t, env.insp, tp, "g")
		return st.Grouped == 2 && topicStats(t, env.insp, tp).Waiting == 0
	}, 5*time.Second, 10*time.Millisecond, "the rescheduled messages are queued in their group")
	ok, err := env.insp.Cancel(ctx, tp, farMoved.UUID)
	require.NoError(t, err)
	require.False(t, ok, "a message queued in its group is no longer waiting")
	nothing(t, ch, 200*time.Millisecond)

	held.Ack()
	for _, want := range []*message.Message{farMoved, nearMoved} {
		msg := receive(t, ch, 5*time.Second)
		require.Equal(t, want.UUID, msg.UUID, "want %s, got %s", want.Payload, msg.Payload)
		require.Equal(t, "a", msg.Metadata.Get(redisdelay.GroupKey))
		msg.Ack()
	}
	nothing(t, ch, 300*time.Millisecond)
	assert.Zero(t, env.client.Exists(ctx, shardOf(tp, 0).GroupOf()).Val(), "grpof left behind: %v",
		env.client.HGetAll(ctx, shardOf(tp, 0).GroupOf()).Val())
	assert.Empty(t, businessKeyState(t, tp, 0))
	awaitGroupsSettled(t, env.client, tp, "g", 1)
}
