package redisdelay_test

// Per-message expiry (ExpiresAtKey) against the real test server: an expired
// message is never handed to a handler; it goes to the dead letters with a
// reason starting "expired", or is dropped, and is counted.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// A delayed message whose deadline passes while it waits is dead-lettered
// at its due time, unhandled, with reason "expired: ..." and Attempts 0; a
// message whose deadline is still ahead is delivered; both are counted.
func TestExpiry_ExpiredMessageIsDeadLetteredNeverHandled(t *testing.T) {
	t.Parallel()
	env := setup(t)
	m, reg := newMetrics(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", CheckInterval: 100 * time.Millisecond, Metrics: m})
	ch := subscribe(t, sub, env.topic)

	late := delayed(delay.For(400*time.Millisecond), "late")
	redisdelay.SetExpiresAt(late, time.Now().Add(150*time.Millisecond))
	ok := delayed(delay.For(400*time.Millisecond), "ok")
	redisdelay.SetExpiresAt(ok, time.Now().Add(time.Minute))
	require.NoError(t, env.pub.Publish(env.topic, late))
	require.NoError(t, env.pub.Publish(env.topic, ok))

	got := receive(t, ch, 3*time.Second)
	assert.Equal(t, ok.UUID, got.UUID, "only the message within its deadline is delivered")
	got.Ack()
	nothing(t, ch, 300*time.Millisecond)

	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 1, 3*time.Second)
	assert.Equal(t, late.UUID, dead[0].Message.UUID)
	assert.True(t, strings.HasPrefix(dead[0].Reason, "expired: "), "reason %q", dead[0].Reason)
	assert.Contains(t, dead[0].Reason, redisdelay.ExpiresAtKey)
	assert.Equal(t, 0, dead[0].Attempts, "never delivered")
	t.Logf("reason: %s", dead[0].Reason)

	tg := map[string]string{"topic": env.topic, "consumer_group": "g"}
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_expired_messages_total", tg))
	assert.Equal(t, 1.0, metricValue(t, reg, "redisdelay_dead_lettered_messages_total",
		map[string]string{"topic": env.topic, "consumer_group": "g", "source": "expired"}))
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_dead_lettered_messages_total",
		map[string]string{"topic": env.topic, "consumer_group": "g", "source": "nack"}), "not counted as a failed nack")
	g := groupStats(t, env.insp, env.topic, "g")
	assert.Zero(t, g.Pending+g.Retry+g.Ready, "nothing left in flight: %+v", g)
}

// Publish accepts a deadline already passed (the message is dead-lettered
// when delivered), and refuses one that does not parse.
func TestExpiry_PublishValidatesTheDeadline(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)

	bad := newMessage("bad")
	bad.Metadata.Set(redisdelay.ExpiresAtKey, "tomorrow")
	err := env.pub.Publish(env.topic, bad)
	require.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
	assert.Contains(t, err.Error(), redisdelay.ExpiresAtKey)
	assert.Contains(t, err.Error(), "SetExpiresAt")

	past := newMessage("past")
	redisdelay.SetExpiresAt(past, time.Now().Add(-time.Second))
	require.NoError(t, env.pub.Publish(env.topic, past))
	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 1, 3*time.Second)
	assert.Equal(t, past.UUID, dead[0].Message.UUID)
	nothing(t, ch, 200*time.Millisecond)

	// A zero time removes the deadline.
	redisdelay.SetExpiresAt(past, time.Time{})
	assert.NotContains(t, past.Metadata, redisdelay.ExpiresAtKey)
}

// DropExpired: the expired message is acknowledged, unhandled, with no
// dead letter; it is counted.
func TestExpiry_DropPolicy(t *testing.T) {
	t.Parallel()
	env := setup(t)
	m, reg := newMetrics(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", ExpiredMessages: redisdelay.DropExpired, Metrics: m})
	ch := subscribe(t, sub, env.topic)

	gone := newMessage("gone")
	redisdelay.SetExpiresAt(gone, time.Now().Add(-time.Millisecond))
	require.NoError(t, env.pub.Publish(env.topic, gone, newMessage("next")))
	got := receive(t, ch, 3*time.Second)
	assert.Equal(t, "next", string(got.Payload))
	got.Ack()

	tg := map[string]string{"topic": env.topic, "consumer_group": "g"}
	awaitMetric(t, reg, "redisdelay_expired_messages_total", tg, 1)
	assert.Equal(t, 0.0, metricValue(t, reg, "redisdelay_dead_lettered_messages_total",
		map[string]string{"topic": env.topic, "consumer_group": "g", "source": "expired"}))
	require.Eventually(t, func() bool {
		g := groupStats(t, env.insp, env.topic, "g")
		return g.Pending+g.Retry+g.Ready == 0
	}, 3*time.Second, 20*time.Millisecond, "both acknowledged")
	assert.EqualValues(t, 0, groupStats(t, env.insp, env.topic, "g").DeadTotal)
}

// A message that expires between its retries is not retried: handled once,
// nacked, then dead-lettered with Attempts 1 when the retry comes due.
func TestExpiry_DuringRetries(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", CheckInterval: 100 * time.Millisecond,
		RetryDelay: func(int) time.Duration { return 500 * time.Millisecond }})
	ch := subscribe(t, sub, env.topic)

	msg := newMessage("x")
	redisdelay.SetExpiresAt(msg, time.Now().Add(300*time.Millisecond))
	require.NoError(t, env.pub.Publish(env.topic, msg))
	got := receive(t, ch, 2*time.Second)
	assert.Equal(t, "1", got.Metadata.Get(redisdelay.AttemptKey))
	got.Nack()
	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 1, 3*time.Second)
	nothing(t, ch, 200*time.Millisecond)
	assert.Equal(t, 1, dead[0].Attempts)
	assert.True(t, strings.HasPrefix(dead[0].Reason, "expired: "), "reason %q", dead[0].Reason)
}

// An ordered subscription retries in place; the deadline is checked before
// each of those attempts too.
func TestExpiry_OrderedRetryInPlace(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Ordered: true,
		RetryDelay: func(int) time.Duration { return 400 * time.Millisecond }})
	ch := subscribe(t, sub, env.topic)

	msg := newMessage("x")
	redisdelay.SetExpiresAt(msg, time.Now().Add(200*time.Millisecond))
	require.NoError(t, env.pub.Publish(env.topic, msg, newMessage("after")))
	got := receive(t, ch, 2*time.Second)
	require.Equal(t, msg.UUID, got.UUID)
	got.Nack()
	next := receive(t, ch, 3*time.Second)
	assert.Equal(t, "after", string(next.Payload), "the expired message is not retried")
	next.Ack()
	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 1, 2*time.Second)
	assert.Equal(t, msg.UUID, dead[0].Message.UUID)
	assert.Equal(t, 1, dead[0].Attempts)
}

// An unknown ExpiredMessages policy is refused with the valid ones named.
func TestExpiry_UnknownPolicyRefused(t *testing.T) {
	env := setup(t)
	_, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g", ExpiredMessages: "ignore"}, logger)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ExpiredMessages")
	assert.Contains(t, err.Error(), string(redisdelay.DropExpired))
}

// A deadline that does not parse in a stored message (written around
// Publish) cannot expire it: the message is delivered, and the error logged.
func TestExpiry_UnreadableStoredDeadlineDelivers(t *testing.T) {
	t.Parallel()
	env := setup(t)
	// An entry added by hand, as another tool writes it, rings no bell
	// (see store.ReadNew): the Subscriber's sweep finds it within BlockTime.
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BlockTime: 200 * time.Millisecond})
	ch := subscribe(t, sub, env.topic)
	msg := newMessage("x")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	got := receive(t, ch, 2*time.Second)
	// Republished by hand with a broken deadline, as the encoded body.
	got.Metadata.Set(redisdelay.ExpiresAtKey, "soon")
	require.NoError(t, env.client.XAdd(context.Background(), &redis.XAddArgs{
		Stream: shardOf(env.topic, 0).Stream(), Values: []any{"m", redisdelay.EncodeForTest(got)}}).Err())
	got.Ack()
	again := receive(t, ch, 2*time.Second)
	assert.Equal(t, "soon", again.Metadata.Get(redisdelay.ExpiresAtKey))
	again.Ack()
}
