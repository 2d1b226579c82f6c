package redisdelay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// rescheduleSub subscribes a fresh group to tp, with its own scheduler.
func rescheduleSub(t *testing.T, client redis.UniversalClient, tp string) <-chan *message.Message {
	t.Helper()
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	return subscribe(t, sub, tp)
}

// waitingDue is the due time of the waiting message uuid, by FindWaiting.
func waitingDue(t *testing.T, insp *redisdelay.Inspector, tp, uuid string) time.Time {
	t.Helper()
	w, found, err := insp.FindWaiting(context.Background(), tp, uuid)
	require.NoError(t, err)
	require.True(t, found, "message %s is not waiting", uuid)
	return w.Due
}

// Reschedule moves a waiting message earlier, in place: same UUID, body
// and business key; it is delivered once, not before the new due time,
// within a second of it: the scheduler, whose CheckInterval is 10 s and
// whose earliest message was an hour away, is woken. Moving one later
// keeps it from being delivered at its old time.
func TestReschedule_InPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	pub := newPublisherWithConfig(t, redisdelay.PublisherConfig{})
	early := businessKeyMessage("order-1", time.Hour, "early", "")
	late := delayed(delay.For(2*time.Hour), "late")
	require.NoError(t, pub.Publish(env.topic, early, late))
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", CheckInterval: 10 * time.Second})
	ch := subscribe(t, sub, env.topic)
	nothing(t, ch, 200*time.Millisecond) // the scheduler is asleep for its CheckInterval

	ok, err := pub.Reschedule(ctx, env.topic, late.UUID, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(time.Hour), waitingDue(t, env.insp, env.topic, late.UUID), time.Second)

	due := time.Now().Add(200 * time.Millisecond)
	ok, err = pub.Reschedule(ctx, env.topic, early.UUID, due)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, waitingDue(t, env.insp, env.topic, early.UUID).Before(due.Truncate(time.Millisecond)), "rounded up, never early")
	require.Equal(t, map[string]string{"order-1": early.UUID}, businessKeyState(t, env.topic, 0), "keeps its business key")

	got := receive(t, ch, time.Second)
	at := time.Now()
	require.Equal(t, early.UUID, got.UUID)
	require.Equal(t, "early", string(got.Payload))
	require.Equal(t, "order-1", got.Metadata.Get(redisdelay.BusinessKey))
	require.False(t, at.Before(due), "delivered %s early", due.Sub(at))
	t.Logf("delivered %s after the new due time", at.Sub(due))
	got.Ack()
	nothing(t, ch, 500*time.Millisecond) // once; late is an hour away now
	require.Equal(t, []string{late.UUID}, content(t, env.topic).waiting)
}

// dueWithin checks a rescheduled message's due time: not before the one
// asked for (to the ms), and at most a second after it (the time left is
// counted by Redis's clock from when the script ran).
func dueWithin(t *testing.T, want, got time.Time) {
	t.Helper()
	assert.False(t, got.Before(want.Truncate(time.Millisecond)), "due %s, before %s", got, want)
	assert.Less(t, got.Sub(want), time.Second, "due %s, long after %s", got, want)
}

// RescheduleKey (Publisher and Inspector) finds the message by its
// business key; a high-priority message keeps its priority; a due time in
// the past makes the message due at once.
func TestReschedule_KeyAndPriority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	pub := newPublisherWithConfig(t, redisdelay.PublisherConfig{})
	keyed := businessKeyMessage("order-1", time.Hour, "keyed", "")
	urgent := high(delayed(delay.For(time.Hour), "urgent"))
	require.NoError(t, pub.Publish(env.topic, keyed))
	require.NoError(t, pub.Publish(env.topic, urgent))

	later := time.Now().Add(2 * time.Hour)
	ok, err := env.insp.RescheduleKey(ctx, env.topic, "order-1", later)
	require.NoError(t, err)
	require.True(t, ok)
	dueWithin(t, later, waitingDue(t, env.insp, env.topic, keyed.UUID))
	ok, err = pub.RescheduleKey(ctx, env.topic, "order-1", later.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, ok)
	dueWithin(t, later.Add(time.Hour), waitingDue(t, env.insp, env.topic, keyed.UUID))

	ok, err = env.insp.Reschedule(ctx, env.topic, urgent.UUID, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.True(t, ok)
	prio, err := env.client.HGet(ctx, shardOf(env.topic, 0).Prio(), urgent.UUID).Result()
	require.NoError(t, err)
	require.Equal(t, "1", prio, "still high priority")

	ch := rescheduleSub(t, env.client, env.topic)
	got := receive(t, ch, 2*time.Second)
	require.Equal(t, urgent.UUID, got.UUID)
	require.Equal(t, "1", got.Metadata.Get(redisdelay.AttemptKey))
	got.Ack()
	require.Equal(t, []string{keyed.UUID}, content(t, env.topic).waiting)
}

// A message that is not waiting (unknown, delivered, cancelled, or in a
// retry set) is not rescheduled: false, and nothing changes.
func TestReschedule_NotWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	pub := newPublisherWithConfig(t, redisdelay.PublisherConfig{})
	now := delayed(delay.For(50*time.Millisecond), "soon")
	gone := businessKeyMessage("order-1", time.Hour, "gone", "")
	stays := delayed(delay.For(time.Hour), "stays")
	require.NoError(t, pub.Publish(env.topic, now, gone, stays))
	ok, err := pub.Cancel(ctx, env.topic, gone.UUID)
	require.NoError(t, err)
	require.True(t, ok)
	ch := rescheduleSub(t, env.client, env.topic)
	got := receive(t, ch, 2*time.Second)
	require.Equal(t, now.UUID, got.UUID)
	got.Nack() // in the group's retry set or redelivery stream: not waiting
	stayDue := waitingDue(t, env.insp, env.topic, stays.UUID)

	at := time.Now().Add(time.Minute)
	for name, try := range map[string]func() (bool, error){
		"unknown":        func() (bool, error) { return pub.Reschedule(ctx, env.topic, "nope", at) },
		"unknown key":    func() (bool, error) { return env.insp.RescheduleKey(ctx, env.topic, "nope", at) },
		"delivered":      func() (bool, error) { return pub.Reschedule(ctx, env.topic, now.UUID, at) },
		"cancelled":      func() (bool, error) { return env.insp.Reschedule(ctx, env.topic, gone.UUID, at) },
		"cancelled key":  func() (bool, error) { return pub.RescheduleKey(ctx, env.topic, "order-1", at) },
		"unknown topic":  func() (bool, error) { return env.insp.Reschedule(ctx, topic(), stays.UUID, at) },
		"other topic id": func() (bool, error) { return pub.Reschedule(ctx, topic(), stays.UUID, at) },
	} {
		ok, err := try()
		require.NoError(t, err, name)
		require.False(t, ok, name)
	}
	require.Equal(t, []string{stays.UUID}, content(t, env.topic).waiting, "nothing changed")
	require.Equal(t, stayDue, waitingDue(t, env.insp, env.topic, stays.UUID))
	require.Empty(t, businessKeyState(t, env.topic, 0))
}

// Bad input fails with an error saying what to fix, and changes nothing.
func TestReschedule_BadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	pub := newPublisherWithConfig(t, redisdelay.PublisherConfig{MaxDelay: 24 * time.Hour})
	msg := businessKeyMessage("k", time.Hour, "x", "")
	require.NoError(t, pub.Publish(env.topic, msg))
	before := topicState(t, env.topic)
	soon := time.Now().Add(time.Minute)

	_, err := pub.Reschedule(ctx, env.topic, "", soon)
	require.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
	require.EqualError(t, err, fmt.Sprintf(`redisdelay: invalid message: reschedule in topic %q: the message UUID is empty`, env.topic))
	_, err = env.insp.RescheduleKey(ctx, env.topic, "", soon)
	require.EqualError(t, err, fmt.Sprintf(`redisdelay: invalid message: reschedule in topic %q: the business key is empty`, env.topic))
	_, err = pub.Reschedule(ctx, "a{b", msg.UUID, soon)
	require.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
	_, err = env.insp.Reschedule(ctx, env.topic, msg.UUID, time.Time{})
	require.ErrorIs(t, err, redisdelay.ErrInvalidDelay)
	require.EqualError(t, err, fmt.Sprintf(`redisdelay: invalid delay metadata: reschedule message %q in topic %q: the due time is the zero time.Time: give the instant it is to be delivered (time.Now().Add(d) to delay it by d)`, msg.UUID, env.topic))
	_, err = pub.RescheduleKey(ctx, env.topic, "k", time.Now().Add(25*time.Hour))
	require.ErrorIs(t, err, redisdelay.ErrInvalidDelay)
	require.ErrorContains(t, err, fmt.Sprintf(`redisdelay: invalid delay metadata: reschedule business key "k" in topic %q: due in 25h0m0`, env.topic))
	require.ErrorContains(t, err, `beyond PublisherConfig.MaxDelay (24h0m0s): use a nearer due time, or raise PublisherConfig.MaxDelay if that is intended`)
	ok, err := env.insp.RescheduleKey(ctx, env.topic, "k", time.Now().Add(25*time.Hour))
	require.NoError(t, err, "the Inspector knows no MaxDelay")
	require.True(t, ok)
	before = topicState(t, env.topic)
	_, err = env.insp.Reschedule(ctx, env.topic, msg.UUID, time.Now().AddDate(101, 0, 0))
	require.ErrorIs(t, err, redisdelay.ErrInvalidDelay)
	require.ErrorContains(t, err, "beyond the limit of 100 years: use a nearer due time")
	_, err = pub.Reschedule(ctx, env.topic, msg.UUID, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))
	require.ErrorContains(t, err, "due in more than 292 years, beyond the limit of 100 years")
	require.Equal(t, before, topicState(t, env.topic), "nothing changed")

	require.NoError(t, pub.Close())
	_, err = pub.Reschedule(ctx, env.topic, msg.UUID, soon)
	require.ErrorIs(t, err, redisdelay.ErrClosed)
	_, err = pub.RescheduleKey(ctx, env.topic, "k", soon)
	require.ErrorIs(t, err, redisdelay.ErrClosed)
}

// Redis unreachable: the error names what was being rescheduled.
func TestReschedule_RedisDown(t *testing.T) {
	t.Parallel()
	env := setupUnreachable(t)
	soon := time.Now().Add(time.Minute)
	_, err := env.insp.RescheduleKey(context.Background(), "orders", "k", soon)
	require.ErrorContains(t, err, `redisdelay: reschedule business key "k" in topic "orders": read the partition counts of 1 topic(s): dial tcp 127.0.0.1:1`)
	_, err = env.pub.Reschedule(context.Background(), "orders", "id", soon)
	require.ErrorContains(t, err, `redisdelay: reschedule message "id" in topic "orders": dial tcp 127.0.0.1:1`)
}

// In a topic of 4 partitions a message is found in whichever partition it
// waits: by UUID (a multi-message call puts all its messages in the
// partition of its first UUID), by business key, and by key with a
// PartitionKey elsewhere; it stays in its partition, and is delivered once.
func TestReschedule_Partitioned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const parts = 4
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, parts)
	var msgs []*message.Message
	for i := range 8 {
		msgs = append(msgs, delayed(delay.For(time.Hour), fmt.Sprint("m", i)))
	}
	require.NoError(t, pub.Publish(env.topic, msgs...)) // all in the partition of msgs[0]
	var keyed []*message.Message
	for i := range 8 {
		m := businessKeyMessage(fmt.Sprint("order-", i), time.Hour, fmt.Sprint("k", i), "")
		require.NoError(t, pub.Publish(env.topic, m))
		keyed = append(keyed, m)
	}
	withPK := businessKeyMessage("pk-order", time.Hour, "pk", "")
	pk := "customer-0"
	for i := 1; redisdelay.PartitionOf(pk, parts) == redisdelay.PartitionOf("pk-order", parts); i++ {
		pk = fmt.Sprint("customer-", i)
	}
	withPK.Metadata.Set(redisdelay.PartitionKey, pk)
	require.NoError(t, pub.Publish(env.topic, withPK))

	due := time.Now().Add(300 * time.Millisecond)
	want := map[string]bool{}
	for i, m := range msgs {
		var ok bool
		var err error
		if i%2 == 0 {
			ok, err = pub.Reschedule(ctx, env.topic, m.UUID, due)
		} else {
			ok, err = env.insp.Reschedule(ctx, env.topic, m.UUID, due)
		}
		require.NoError(t, err)
		require.True(t, ok, m.UUID)
		want[m.UUID] = true
	}
	for i, m := range keyed {
		ok, err := pub.RescheduleKey(ctx, env.topic, fmt.Sprint("order-", i), due)
		require.NoError(t, err)
		require.True(t, ok)
		want[m.UUID] = true
	}
	ok, err := env.insp.RescheduleKey(ctx, env.topic, "pk-order", due)
	require.NoError(t, err)
	require.True(t, ok, "found outside the partition of the key")
	want[withPK.UUID] = true
	require.Equal(t, withPK.UUID, businessKeyState(t, env.topic, redisdelay.PartitionOf(pk, parts))["pk-order"], "stays in its partition")

	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts})
	ch := subscribe(t, sub, env.topic)
	require.Len(t, want, 17)
	for range 17 {
		got := receive(t, ch, 3*time.Second)
		require.True(t, want[got.UUID], "unexpected or twice: %s", got.UUID)
		require.False(t, time.Now().Before(due), "early")
		delete(want, got.UUID)
		got.Ack()
	}
	nothing(t, ch, 300*time.Millisecond)
	require.EqualValues(t, 0, topicStats(t, env.insp, env.topic).Waiting)
}
