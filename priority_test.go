package redisdelay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// awaitRedo waits until group g's redelivery stream holds n entries.
func awaitRedo(t *testing.T, client redis.UniversalClient, tp string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return client.XLen(context.Background(), shardOf(tp, 0).Redelivery("g")).Val() == n },
		5*time.Second, 10*time.Millisecond, "%d high-priority messages moved", n)
}

// A high-priority message overtakes a backlog of normal ones: it is
// handed out after the fetch in progress at most.
func TestPriority_OvertakesBacklog(t *testing.T) {
	env := setup(t)
	const batch, backlog = 8, 200
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BatchSize: batch, CheckInterval: 100 * time.Millisecond})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	for i := range backlog {
		require.NoError(t, env.pub.Publish(env.topic, newMessage(strconv.Itoa(i))))
	}
	ch := subscribe(t, sub, env.topic)
	urgent := high(newMessage("urgent"))
	require.NoError(t, env.pub.Publish(env.topic, urgent))
	awaitRedo(t, env.client, env.topic, 1) // the scheduler moved it to the group's redelivery stream
	for pos := 1; pos <= backlog+1; pos++ {
		msg := receive(t, ch, 5*time.Second)
		msg.Ack()
		if msg.UUID == urgent.UUID {
			require.LessOrEqual(t, pos, 2*batch, "delivered after the fetch in progress at most")
			require.Equal(t, "1", msg.Metadata.Get(redisdelay.AttemptKey))
			return
		}
	}
	t.Fatal("the high-priority message never came")
}

// While both kinds queue, normal messages keep getting delivered: every
// fetch takes up to BatchSize of each.
func TestPriority_DoesNotStarveNormal(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const batch, n = 8, 60
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BatchSize: batch, DisableScheduler: true})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}, CheckInterval: 100 * time.Millisecond})
	for i := range n {
		require.NoError(t, env.pub.Publish(env.topic, newMessage("n"+strconv.Itoa(i)), high(newMessage("h"+strconv.Itoa(i)))))
	}
	// Both kinds queue before consumption starts.
	awaitRedo(t, env.client, env.topic, n)
	ch := subscribe(t, sub, env.topic)
	var order []byte
	for range 2 * n {
		msg := receive(t, ch, 5*time.Second)
		order = append(order, msg.Payload[0])
		msg.Ack()
	}
	normalEarly := 0
	for _, c := range order[:4*batch] {
		if c == 'n' {
			normalEarly++
		}
	}
	require.GreaterOrEqual(t, normalEarly, batch, "normal messages among the first %d deliveries: %s", 4*batch, order)
	nothing(t, ch, 200*time.Millisecond)
}

// A delayed high-priority message is due when its delay says, reaches
// every consumer group once, and one published before any group exists
// waits in the ready stream for the first.
func TestPriority_DelayedGroupsAndNoGroup(t *testing.T) {
	t.Parallel()
	env := setup(t)

	// Moved while no group exists (a Manager schedules the topic), it goes
	// to the ready stream, where every group created later finds it.
	mgr := runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}, CheckInterval: 100 * time.Millisecond})
	early := high(newMessage("before any group"))
	require.NoError(t, env.pub.Publish(env.topic, early))
	require.Eventually(t, func() bool { return env.client.XLen(context.Background(), shardOf(env.topic, 0).Stream()).Val() == 1 },
		5*time.Second, 10*time.Millisecond)
	require.NoError(t, mgr.Close())

	subA := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "a", CheckInterval: 100 * time.Millisecond})
	subB := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "b", DisableScheduler: true})
	chA, chB := subscribe(t, subA, env.topic), subscribe(t, subB, env.topic)
	m := receive(t, chA, 5*time.Second)
	require.Equal(t, early.UUID, m.UUID)
	m.Ack()
	m = receive(t, chB, 5*time.Second)
	require.Equal(t, early.UUID, m.UUID)
	m.Ack()

	msg := high(delayed(delay.For(400*time.Millisecond), "later"))
	start := time.Now()
	require.NoError(t, env.pub.Publish(env.topic, msg))
	for _, ch := range []<-chan *message.Message{chA, chB} {
		got := receive(t, ch, 5*time.Second)
		require.Equal(t, msg.UUID, got.UUID)
		require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "never early")
		got.Ack()
	}
	nothing(t, chA, 200*time.Millisecond)
	nothing(t, chB, 10*time.Millisecond)
	exists, err := env.client.Exists(context.Background(), shardOf(env.topic, 0).Prio()).Result()
	require.NoError(t, err)
	require.Zero(t, exists, "the priority marks are removed when the messages move")
}

func TestPriority_CancelAndBadValue(t *testing.T) {
	env := setup(t)
	msg := high(delayed(delay.For(time.Hour), "x"))
	require.NoError(t, env.pub.Publish(env.topic, msg))
	ok, err := env.pub.Cancel(context.Background(), env.topic, msg.UUID)
	require.NoError(t, err)
	require.True(t, ok)
	exists, err := env.client.Exists(context.Background(), shardOf(env.topic, 0).Prio()).Result()
	require.NoError(t, err)
	require.Zero(t, exists, "a cancelled message leaves no priority mark behind")

	bad := newMessage("y")
	bad.Metadata.Set(redisdelay.PriorityKey, "urgent")
	err = env.pub.Publish(env.topic, bad)
	require.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
	require.ErrorContains(t, err, `metadata _redisdelay_priority is "urgent": use "high", or leave it empty (or "normal") for normal priority`)
}
