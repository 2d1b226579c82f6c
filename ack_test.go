package redisdelay_test

// Asynchronous acknowledgements: an Ack hands out the next message at once
// and reaches Redis in a later batch. Until then the entry is still held:
// it must not come back after Close, after a connection drop or through
// lease renewal, and a crash before the flush must redeliver it, not lose
// it. redisdelay.HoldAcks keeps acks queued for as long as a test needs.

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

// ackPublish publishes n messages with payloads 0..n-1.
func ackPublish(t *testing.T, pub *redisdelay.Publisher, topic string, n int) []*message.Message {
	t.Helper()
	var msgs []*message.Message
	for i := 0; i < n; i++ {
		msgs = append(msgs, newMessage(strconv.Itoa(i)))
	}
	require.NoError(t, pub.Publish(topic, msgs...))
	return msgs
}

// ackSettled checks that the group holds nothing any more: nothing pending
// in either stream and no redelivery entry left.
func ackSettled(t *testing.T, client redis.UniversalClient, topic, group string) {
	t.Helper()
	ctx := context.Background()
	assert.Zero(t, pendingCount(t, client, topic, group), "ready stream entries still pending")
	p, err := client.XPending(ctx, shardOf(topic, 0).Redelivery(group), group).Result()
	require.NoError(t, err)
	assert.Zero(t, p.Count, "redelivery entries still pending")
	n, err := client.XLen(ctx, shardOf(topic, 0).Redelivery(group)).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "acked redelivery entries are deleted")
}

// Close right after the last Ack, with every ack still queued (some of
// ready-stream entries, some of redelivery entries, a Nack in between):
// Close writes them before handing back, so nothing comes again.
func TestAck_AckedMessagesNotRedeliveredAfterImmediateClose(t *testing.T) {
	t.Parallel()
	for _, held := range []bool{true, false} {
		t.Run("held="+strconv.FormatBool(held), func(t *testing.T) {
			t.Parallel()
			env := setup(t)
			config := redisdelay.SubscriberConfig{
				ConsumerGroup: "g", BatchSize: 8, VisibilityTimeout: 500 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
			}
			first := newSubscriber(t, env.client, config)
			if held {
				defer redisdelay.HoldAcks(first)()
			}
			require.NoError(t, first.SubscribeInitialize(env.topic))
			msgs := ackPublish(t, env.pub, env.topic, 40)
			ch := subscribe(t, first, env.topic)

			seen := map[string]int{}
			nacked := 0
			for len(seen) < len(msgs) || nacked > 0 {
				m := receive(t, ch, 3*time.Second)
				seen[m.UUID]++
				if m.Metadata.Get(redisdelay.AttemptKey) == "1" && len(seen)%5 == 0 {
					// Every fifth goes round the redelivery stream once.
					nacked++
					m.Nack()
					continue
				}
				if m.Metadata.Get(redisdelay.AttemptKey) == "2" {
					nacked--
				}
				m.Ack()
			}
			require.NoError(t, first.Close())
			ackSettled(t, env.client, env.topic, "g")
			for id, n := range seen {
				assert.LessOrEqual(t, n, 2, "message %s", id)
			}

			second := newSubscriber(t, env.client, config)
			nothing(t, subscribe(t, second, env.topic), 1200*time.Millisecond) // > VisibilityTimeout + CheckInterval
		})
	}
}

// Acks queued when the connection drops are written once Redis is back,
// before the subscription re-reads its pending entries: none of the acked
// messages comes again, every message arrives exactly once.
func TestAck_AcksSurviveConnectionDrop(t *testing.T) {
	t.Parallel()
	proxy := newFaultProxy(t)
	env := setup(t)
	sub := newSubscriber(t, proxy.client(t), redisdelay.SubscriberConfig{
		ConsumerGroup: "g", BatchSize: 20, CheckInterval: 200 * time.Millisecond, CloseTimeout: time.Second,
	})
	releaseAcks := redisdelay.HoldAcks(sub)
	defer releaseAcks()
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	msgs := ackPublish(t, env.pub, env.topic, 40) // two batches
	ch := subscribe(t, sub, env.topic)

	got := map[string]int{}
	take := func(n int, within time.Duration) {
		t.Helper()
		for i := 0; i < n; i++ {
			m := receive(t, ch, within)
			got[m.UUID]++
			m.Ack()
		}
	}
	take(10, 2*time.Second) // acks queued, not in Redis
	require.EqualValues(t, 20, pendingCount(t, env.client, env.topic, "g"))
	proxy.cut(0)
	take(10, time.Second)               // the rest of the first batch, from memory
	time.Sleep(2500 * time.Millisecond) // the next read fails (beyond the client's own retries)
	proxy.restore(t)
	// The acker stays held: only the flush before the re-read of pending
	// entries writes the 20 acks.
	take(20, 5*time.Second)
	nothing(t, ch, 500*time.Millisecond)
	releaseAcks()

	assert.Len(t, got, len(msgs))
	for _, m := range msgs {
		assert.Equal(t, 1, got[m.UUID], "message %s delivered %d times", m.Payload, got[m.UUID])
	}
	assert.Eventually(t, func() bool { return pendingCount(t, env.client, env.topic, "g") == 0 }, 3*time.Second, 20*time.Millisecond)
}

// Acked entries whose acknowledgement is still queued are held: renewal
// extends their lease and does not report them as pending entries the
// subscription lacks, so they are neither reclaimed nor re-read.
func TestAck_LeaseRenewalCountsQueuedAcksAsHeld(t *testing.T) {
	t.Parallel()
	env := setup(t)
	config := redisdelay.SubscriberConfig{
		ConsumerGroup: "g", VisibilityTimeout: 600 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	}
	sub := newSubscriber(t, env.client, config)
	other := newSubscriber(t, env.client, config)
	releaseAcks := redisdelay.HoldAcks(sub)
	defer releaseAcks()
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	ackPublish(t, env.pub, env.topic, 3)
	ch := subscribe(t, sub, env.topic)
	receive(t, ch, 2*time.Second).Ack()
	receive(t, ch, 2*time.Second).Ack()
	last := receive(t, ch, 2*time.Second)

	chOther := subscribe(t, other, env.topic)
	nothing(t, chOther, 2*time.Second) // > 3× VisibilityTimeout: the queued acks' lease is renewed
	assert.EqualValues(t, 3, pendingCount(t, env.client, env.topic, "g"), "two acks queued, one handled")
	assert.Zero(t, redisdelay.UnheldReports(sub), "queued acks reported as not held")

	last.Ack()
	releaseAcks()
	assert.Eventually(t, func() bool { return pendingCount(t, env.client, env.topic, "g") == 0 }, 2*time.Second, 20*time.Millisecond)
	nothing(t, ch, 300*time.Millisecond)
	nothing(t, chOther, 10*time.Millisecond)
	assert.Zero(t, redisdelay.UnheldReports(sub))
}

// A consumer that dies between the Ack and the flush (here: loses Redis for
// good, so neither the flush, nor renewals, nor the hand-back arrive)
// leaves the message pending: it is reclaimed and delivered again, never
// lost.
func TestAck_CrashBetweenAckAndFlushRedelivers(t *testing.T) {
	t.Parallel()
	proxy := newFaultProxy(t)
	env := setup(t)
	config := redisdelay.SubscriberConfig{
		ConsumerGroup: "g", VisibilityTimeout: 500 * time.Millisecond, CheckInterval: 100 * time.Millisecond, CloseTimeout: 100 * time.Millisecond,
	}
	crashing := newSubscriber(t, proxy.client(t), config)
	releaseAcks := redisdelay.HoldAcks(crashing)
	defer releaseAcks()
	require.NoError(t, crashing.SubscribeInitialize(env.topic))
	msg := newMessage("x")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	got := receive(t, subscribe(t, crashing, env.topic), 2*time.Second)
	got.Ack()
	proxy.cut(0) // for good
	releaseAcks()

	other := newSubscriber(t, env.client, config)
	again := receive(t, subscribe(t, other, env.topic), 5*time.Second)
	assert.Equal(t, msg.UUID, again.UUID)
	assert.Equal(t, "2", again.Metadata.Get(redisdelay.AttemptKey), "reclaimed as the next attempt")
	again.Ack()
	assert.Eventually(t, func() bool { return pendingCount(t, env.client, env.topic, "g") == 0 }, 2*time.Second, 20*time.Millisecond)
}

// An idle subscription skips lease renewals (it holds nothing, and its
// reads, on a connection of its own, cannot leave entries pending
// unnoticed): after the first, which reads the group's stored timeout,
// none run while idle; they run while it holds a message.
func TestAck_LeaseRenewalSkippedWhileIdle(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", VisibilityTimeout: 300 * time.Millisecond,
		DisableScheduler: true}) // renewals every 100ms
	ch := subscribe(t, sub, env.topic)
	time.Sleep(250 * time.Millisecond) // the first renewal
	idle := redisdelay.Renewals(sub)
	time.Sleep(time.Second)
	assert.Equal(t, idle, redisdelay.Renewals(sub), "renewals while idle")
	require.LessOrEqual(t, idle, int64(1))

	require.NoError(t, env.pub.Publish(env.topic, newMessage("m")))
	msg := receive(t, ch, 2*time.Second)
	time.Sleep(time.Second) // held: renewed
	held := redisdelay.Renewals(sub) - idle
	msg.Ack()
	assert.GreaterOrEqual(t, held, int64(5), "renewals while holding a message for 1s")
	t.Logf("FIGURE renewals every 100ms: %d while idle for 1.25s, %d while holding a message for 1s", idle, held)
}

// Renewals skipped while idle, the group's stored VisibilityTimeout became
// shorter (a subscriber configured with 600ms started): the first message
// fetched after that is renewed at once and at the new pace, so a handler
// holding it for 2s keeps it (it is not reclaimed and delivered again).
func TestAck_LeaseRenewalAfterIdleFollowsShorterStoredTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for renewals 2s apart")
	}
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", VisibilityTimeout: 6 * time.Second,
		CheckInterval: 100 * time.Millisecond, RetryDelay: func(int) time.Duration { return 100 * time.Millisecond }})
	ch := subscribe(t, sub, env.topic)
	// Renewals every 2s: the first at 2s, the one at 4s skipped; the next
	// tick (6s) would come 1.6s after the fetch, too late for 600ms.
	time.Sleep(4400 * time.Millisecond)
	shorter := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", VisibilityTimeout: 600 * time.Millisecond})
	require.NoError(t, shorter.SubscribeInitialize(env.topic)) // stores the group's policy
	require.NoError(t, env.pub.Publish(env.topic, newMessage("m")))
	msg := receive(t, ch, 2*time.Second)
	time.Sleep(2 * time.Second) // > 3× the stored timeout
	msg.Ack()
	nothing(t, ch, time.Second)
	assert.Equal(t, "1", msg.Metadata.Get(redisdelay.AttemptKey))
}

// An idle subscription's ack waits up to ackLinger to go with its next
// read: alone when no message comes, with the read when one does. Either
// way it reaches Redis.
func TestAck_IdleSubscriptionsAcksReachRedis(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ch := subscribe(t, env.subscriber(t, "g"), env.topic)
	settled := func() bool {
		p, err := env.client.XPending(context.Background(), shardOf(env.topic, 0).Stream(), "g").Result()
		return err == nil && p.Count == 0
	}
	for _, next := range []time.Duration{0, 10 * time.Millisecond, 200 * time.Millisecond} {
		require.NoError(t, env.pub.Publish(env.topic, newMessage("x")))
		receive(t, ch, 3*time.Second).Ack()
		time.Sleep(next) // the next message comes within the linger, or after it
		require.NoError(t, env.pub.Publish(env.topic, newMessage("y")))
		receive(t, ch, 3*time.Second).Ack()
		require.Eventually(t, settled, 2*time.Second, 5*time.Millisecond, "next message after %s", next)
	}
}
