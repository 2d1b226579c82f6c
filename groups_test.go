package redisdelay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// groupState is what the consumer group's fair queues hold, for messages.
func groupState(t *testing.T, client redis.UniversalClient, tp, group string, parts int) map[string]string {
	out := map[string]string{}
	for p := range parts {
		m, _ := client.HGetAll(context.Background(), shardOf(tp, p).Fair(group)).Result()
		for k, v := range m {
			if !strings.Contains(k, "\x00") {
				out[fmt.Sprintf("p%d:%s", p, k)] = v
			}
		}
	}
	return out
}

// One big group's backlog, queued first, does not hold back the small
// groups queued after it: each turn serves every group once, so the small
// groups' messages all come out among the first deliveries, each group's
// in due order; without groups they would come after the whole backlog.
func TestGroups_RoundRobin(t *testing.T) {
	t.Parallel()
	// big + small*each < 1,024: the tie-break of equal due times wraps at
	// 1,024 messages (docs/guarantees.md), which would reorder a group.
	const big, small, each = 900, 10, 5
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})

	var msgs []*message.Message
	for i := range big {
		msgs = append(msgs, groupedMessage("big", i))
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	for s := range small {
		msgs = msgs[:0]
		for i := range each {
			msgs = append(msgs, groupedMessage(fmt.Sprint("small", s), i))
		}
		require.NoError(t, env.pub.Publish(env.topic, msgs...))
	}
	awaitQueuedInGroups(t, env.insp, env.topic, "g", big+small*each)
	st := groupStats(t, env.insp, env.topic, "g")
	require.EqualValues(t, small+1, st.ActiveGroups)
	require.EqualValues(t, 0, st.Ready)

	ch := subscribe(t, sub, env.topic)
	next := map[string]int{}
	lastSmall := 0
	for n := 1; n <= big+small*each; n++ {
		msg := receive(t, ch, 5*time.Second)
		g, seq := splitPayload(t, msg)
		require.Equal(t, next[g], seq, "group %s out of order", g)
		next[g]++
		if g != "big" {
			lastSmall = n
		}
		msg.Ack()
	}
	t.Logf("the last of %d small groups' messages was delivered %d of %d", small*each, lastSmall, big+small*each)
	// A turn of the ring serves each of the 11 groups once: the small
	// groups are done within their 5 turns, plus the batch in flight.
	require.LessOrEqual(t, lastSmall, (small+1)*each+2*32)
	nothing(t, ch, 200*time.Millisecond)
	awaitGroupsSettled(t, env.client, env.topic, "g", 1)
}

// With GroupConcurrency 1, subscribers in three processes (clients of
// their own) never run two messages of a group at once, and run each
// group's in due order, while groups run side by side.
func TestGroups_ConcurrencyOne(t *testing.T) {
	t.Parallel()
	const groups, each = 4, 8
	env := setup(t)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})

	h := newHandled()
	done := make(chan struct{}, groups*each)
	for range 3 {
		sub := newSubscriber(t, newClient(t), redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1})
		ch := subscribe(t, sub, env.topic)
		for range 2 {
			go func() {
				for msg := range ch {
					g := h.start(t, msg)
					time.Sleep(5 * time.Millisecond)
					h.end(g)
					msg.Ack()
					done <- struct{}{}
				}
			}()
		}
	}
	for g := range groups {
		for i := range each {
			require.NoError(t, env.pub.Publish(env.topic, groupedMessage(fmt.Sprint("g", g), i)))
		}
	}
	for range groups * each {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("handled %d of %d messages", h.count(), groups*each)
		}
	}
	h.mu.Lock()
	for g := range groups {
		name := fmt.Sprint("g", g)
		assert.Equal(t, 1, h.most[name], "group %s ran more than one at once", name)
		assert.Equal(t, seqs(each), h.order[name], "group %s", name)
	}
	h.mu.Unlock()
	awaitGroupsSettled(t, env.client, env.topic, "g", 1)
}

// A group capped at 1 gets its next message as soon as its last is acked:
// the subscription, having read all there was, waits for the bell that
// the ack rings when it gives the group's slot back, so that ack must not
// wait for the subscription's next read (as a plain message's ack may).
// It did: 55 ms a message, 18 messages a second in one group.
func TestGroups_ConcurrencyOneNextAtAck(t *testing.T) {
	t.Parallel()
	const n = 200
	env := setup(t)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1})
	ch := subscribe(t, sub, env.topic)
	for i := range n {
		require.NoError(t, env.pub.Publish(env.topic, groupedMessage("a", i)))
	}
	start := time.Now()
	for i := range n {
		msg := receive(t, ch, 5*time.Second)
		_, seq := splitPayload(t, msg)
		require.Equal(t, i, seq)
		msg.Ack()
	}
	took := time.Since(start)
	t.Logf("%d messages of one group capped at 1 in %s", n, took.Round(time.Millisecond))
	// Generous for a busy machine (25 ms a message); 11 s before the fix.
	require.Less(t, took, 5*time.Second, "the group's next message waited for something other than the ack")
	awaitGroupsSettled(t, env.client, env.topic, "g", 1)
}

// A nacked message of a group with GroupConcurrency 1 keeps its slot
// through its retry delay: the group's next message waits for it, and
// other groups go on meanwhile. Its retries and its dead letter keep its
// group, and a requeued dead letter goes back to it.
func TestGroups_RetryKeepsGroupOrder(t *testing.T) {
	t.Parallel()
	tp := topic()
	env := setup(t)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{tp}})
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1,
		MaxAttempts: 3,
		// a short retry delay, so the test sees other groups overtake it
		RetryDelay: func(int) time.Duration { return 150 * time.Millisecond }})
	ch := subscribe(t, sub, tp)
	require.NoError(t, env.pub.Publish(tp, groupedMessage("a", 0), groupedMessage("a", 1)))
	var seen []string
	for len(seen) < 5 {
		msg := receive(t, ch, 5*time.Second)
		seen = append(seen, string(msg.Payload)+"#"+msg.Metadata.Get(redisdelay.AttemptKey))
		if string(msg.Payload) != "a/0" {
			msg.Ack()
			continue
		}
		if len(seen) == 1 {
			// during its retry delay, another group's message goes on
			require.NoError(t, env.pub.Publish(tp, groupedMessage("b", 0)))
		}
		msg.Nack()
	}
	require.Equal(t, []string{"a/0#1", "b/0#1", "a/0#2", "a/0#3", "a/1#1"}, seen)

	dead, err := env.insp.DeadLetters(context.Background(), tp, "g", "", 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "a", dead[0].Message.Metadata.Get(redisdelay.GroupKey))
	awaitGroupsSettled(t, env.client, tp, "g", 1)

	ok, err := env.insp.RequeueDeadLetter(context.Background(), tp, "g", dead[0].ID)
	require.NoError(t, err)
	require.True(t, ok)
	msg := receive(t, ch, 5*time.Second)
	require.Equal(t, "a/0", string(msg.Payload))
	msg.Ack()
	awaitGroupsSettled(t, env.client, tp, "g", 1)
}

// KeepLastIfActive: while a message of a key is being handled, the
// messages published with that key become one follow-up, the latest,
// delivered once the running one is acked; with nothing running a message
// goes at once.
func TestKeepLastIfActive_Debounces(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pub := env.publisher(t, redisdelay.PublisherConfig{
		TopicBusinessKeyPolicy: map[string]redisdelay.BusinessKeyPolicy{env.topic: redisdelay.KeepLastIfActive}})
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})
	// Two subscribers: a subscription hands out its next message only once
	// the previous one is settled.
	first := subscribe(t, newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"}), env.topic)
	second := subscribe(t, newSubscriber(t, newClient(t), redisdelay.SubscriberConfig{ConsumerGroup: "g"}), env.topic)
	ch := make(chan *message.Message)
	for _, c := range []<-chan *message.Message{first, second} {
		go func() {
			for msg := range c {
				ch <- msg
			}
		}()
	}

	require.NoError(t, pub.Publish(env.topic, businessKeyMessage("k", 0, "m1", "")))
	running := receive(t, ch, 5*time.Second)
	require.Equal(t, "m1", string(running.Payload))
	for _, p := range []string{"m2", "m3", "m4"} {
		require.NoError(t, pub.Publish(env.topic, businessKeyMessage("k", 0, p, "")))
		time.Sleep(30 * time.Millisecond) // each falls due before the next
	}
	// another key is not held back
	require.NoError(t, pub.Publish(env.topic, businessKeyMessage("other", 0, "o1", "")))
	other := receive(t, ch, 5*time.Second)
	require.Equal(t, "o1", string(other.Payload))
	other.Ack()
	nothing(t, ch, 300*time.Millisecond)

	running.Ack()
	follow := receive(t, ch, 5*time.Second)
	require.Equal(t, "m4", string(follow.Payload))
	follow.Ack()
	nothing(t, ch, 300*time.Millisecond)
	awaitGroupsSettled(t, env.client, env.topic, "g", 1)

	// nothing running: at once
	require.NoError(t, pub.Publish(env.topic, businessKeyMessage("k", 0, "m5", "")))
	msg := receive(t, ch, 5*time.Second)
	require.Equal(t, "m5", string(msg.Payload))
	msg.Ack()
}

// A consumer that dies holding a grouped message gives its group's slot
// back when the message is reclaimed (after VisibilityTimeout), and a
// subscriber that closes hands its prefetched grouped messages back to the
// front of their groups.
func TestGroups_ReclaimAndClose(t *testing.T) {
	t.Parallel()
	env := setup(t)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})
	// a short visibility timeout, so the reclaim comes within the test
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1, VisibilityTimeout: 300 * time.Millisecond}

	proxy := newFaultProxy(t)
	crashing := newSubscriber(t, proxy.client(t), config)
	ch := subscribe(t, crashing, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, groupedMessage("a", 0), groupedMessage("a", 1)))
	first := receive(t, ch, 5*time.Second)
	require.Equal(t, "a/0", string(first.Payload))
	other := newSubscriber(t, newClient(t), config)
	och := subscribe(t, other, env.topic)
	nothing(t, och, 100*time.Millisecond) // a/1 waits for a/0's slot
	// The first subscriber's process loses Redis for good while its
	// handler holds a/0: no lease renewal, no hand-back.
	proxy.cut(0)
	msg := receive(t, och, 5*time.Second)
	require.Equal(t, "a/0", string(msg.Payload))
	require.Equal(t, "2", msg.Metadata.Get(redisdelay.AttemptKey))
	msg.Ack()
	msg = receive(t, och, 5*time.Second)
	require.Equal(t, "a/1", string(msg.Payload))
	msg.Ack()
	awaitGroupsSettled(t, env.client, env.topic, "g", 1)
}

// Bad groups and limits are refused with what to do.
func TestGroups_BadInput(t *testing.T) {
	t.Parallel()
	env := setup(t)
	for _, tc := range []struct {
		msg  *message.Message
		want string
	}{
		{groupedMessage(strings.Repeat("x", 257), 0), "is 257 bytes: use at most 256"},
		{groupedMessage("a\nb", 0), "control character U+000A"},
		{groupedMessage("\x01k", 0), "control character U+0001"},
		{groupedMessage("\xff", 0), "not valid UTF-8"},
		{func() *message.Message {
			m := businessKeyMessage("k", 0, "x", redisdelay.KeepLastIfActive)
			redisdelay.SetGroup(m, "tenant")
			return m
		}(), "drop one of them"},
	} {
		err := env.pub.Publish(env.topic, tc.msg)
		require.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
		require.ErrorContains(t, err, tc.want)
	}
	for _, tc := range []struct {
		config redisdelay.SubscriberConfig
		want   string
	}{
		{redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: -1}, "SubscriberConfig.GroupConcurrency is -1"},
		{redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupRateLimit: redisdelay.RateLimit{Messages: 1}}, "SubscriberConfig.GroupRateLimit.Per is 0s"},
	} {
		tc.config.Client = env.client
		_, err := redisdelay.NewSubscriber(tc.config, logger)
		require.ErrorContains(t, err, tc.want)
	}
	_ = delay.For
}

// A grouped message does not wait for a backlog of plain messages in the
// ready stream: a subscription reading the backlog picks grouped messages
// at least every 100 ms.
func TestGroups_NotBehindPlainBacklog(t *testing.T) {
	t.Parallel()
	const plain = 50_000
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})
	msgs := make([]*message.Message, plain)
	for i := range msgs {
		msgs[i] = newMessage("plain")
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	ch := subscribe(t, sub, env.topic)
	first := receive(t, ch, 5*time.Second)
	first.Ack()
	require.NoError(t, env.pub.Publish(env.topic, groupedMessage("a", 0)))
	for n := 2; n <= plain+1; n++ {
		msg := receive(t, ch, 5*time.Second)
		msg.Ack()
		if string(msg.Payload) == "a/0" {
			t.Logf("the grouped message came %d of %d", n, plain+1)
			require.Less(t, n, plain*4/5, "behind the plain backlog")
			return
		}
	}
	t.Fatal("the grouped message never came")
}
