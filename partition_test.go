package redisdelay_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// ptCollect receives n messages, acking each, and returns them by UUID;
// it fails on a duplicate.
func ptCollect(t *testing.T, ch <-chan *message.Message, n int, within time.Duration) map[string]*message.Message {
	t.Helper()
	got := map[string]*message.Message{}
	deadline := time.After(within)
	for len(got) < n {
		select {
		case msg := <-ch:
			require.NotNil(t, msg, "channel closed")
			_, dup := got[msg.UUID]
			require.False(t, dup, "message %s delivered twice", msg.UUID)
			got[msg.UUID] = msg
			msg.Ack()
		case <-deadline:
			t.Fatalf("received %d of %d messages within %s", len(got), n, within)
		}
	}
	return got
}

// Messages without a PartitionKey spread over the partitions (by the UUID
// of their call's first message), and a subscription reads all of them:
// every message once, immediate and delayed.
func TestPartition_SpreadAndAreAllConsumed(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const parts, n = 4, 400
	pub := newPartitionedPublisher(t, env.client, parts)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, BatchSize: 8})
	ch := subscribe(t, sub, env.topic)

	for i := range n {
		msg := newMessage(strconv.Itoa(i))
		if i%2 == 0 {
			delay.Message(msg, delay.For(200*time.Millisecond))
		}
		require.NoError(t, pub.Publish(env.topic, msg))
	}
	got := ptCollect(t, ch, n, 10*time.Second)
	require.Len(t, got, n)
	nothing(t, ch, 300*time.Millisecond)

	for part := range parts {
		length, err := env.client.XLen(context.Background(), shardOf(env.topic, part).Stream()).Result()
		require.NoError(t, err)
		assert.InDelta(t, n/parts, length, n/parts/2, "partition %d holds %d of %d messages", part, length, n)
	}
	st := topicStats(t, env.insp, env.topic)
	require.Equal(t, parts, st.Partitions)
	require.EqualValues(t, n, st.Stream)
	require.EqualValues(t, 0, st.Waiting)
}

// Messages with the same PartitionKey go to the same partition; a call
// whose messages go to several partitions is stored per partition.
func TestPartition_KeyPlacesMessages(t *testing.T) {
	env := setup(t)
	const parts = 8
	pub := newPartitionedPublisher(t, env.client, parts)
	var msgs []*message.Message
	for i := range 40 {
		msg := newMessage(strconv.Itoa(i))
		msg.Metadata.Set(redisdelay.PartitionKey, "order-"+strconv.Itoa(i%3))
		msgs = append(msgs, msg)
	}
	require.NoError(t, pub.Publish(env.topic, msgs...))
	used := 0
	for part := range parts {
		entries, err := env.client.XRange(context.Background(), shardOf(env.topic, part).Stream(), "-", "+").Result()
		require.NoError(t, err)
		keys := map[string]bool{}
		for _, e := range entries {
			m, err := redisdelay.DecodeMessage([]byte(e.Values["m"].(string)))
			require.NoError(t, err)
			keys[m.Metadata.Get(redisdelay.PartitionKey)] = true
		}
		if len(entries) > 0 {
			used++
		}
		// each key's messages are in one partition: a partition holds
		// 13 or 14 messages per key it has
		for k := range keys {
			n := 0
			for _, e := range entries {
				m, _ := redisdelay.DecodeMessage([]byte(e.Values["m"].(string)))
				if m.Metadata.Get(redisdelay.PartitionKey) == k {
					n++
				}
			}
			require.Contains(t, []int{13, 14}, n, "key %s in partition %d", k, part)
		}
	}
	require.GreaterOrEqual(t, used, 2, "three keys over eight partitions should use more than one")
}

// The first user of a topic stores its partition count; a Publisher or
// Subscriber configured with another count is refused, storing nothing,
// with an error that says what to do.
func TestPartition_CountMismatchIsRefused(t *testing.T) {
	env := setup(t)
	require.NoError(t, newPartitionedPublisher(t, env.client, 4).Publish(env.topic, newMessage("x")))

	err := newPartitionedPublisher(t, env.client, 2).Publish(env.topic, newMessage("y"))
	require.ErrorIs(t, err, redisdelay.ErrPartitionMismatch)
	require.ErrorContains(t, err, fmt.Sprintf("topic %q has 4 partitions in Redis", env.topic))
	require.ErrorContains(t, err, "PublisherConfig gives it 2")

	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.client, TopicPartitions: map[string]int{env.topic: 3}}, logger)
	require.NoError(t, err)
	require.ErrorIs(t, pub.Publish(env.topic, newMessage("z")), redisdelay.ErrPartitionMismatch)

	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	_, err = sub.Subscribe(context.Background(), env.topic)
	require.ErrorIs(t, err, redisdelay.ErrPartitionMismatch)
	require.ErrorContains(t, err, "SubscriberConfig gives it 1")
	require.ErrorIs(t, sub.SubscribeInitialize(env.topic), redisdelay.ErrPartitionMismatch)

	st := topicStats(t, env.insp, env.topic)
	require.EqualValues(t, 1, st.Stream, "only the first message is stored")
	require.Empty(t, st.Groups, "no group was created")

	// A topic used before partitions existed has no stored count and
	// reads as one partition.
	old := topic()
	require.NoError(t, env.client.XAdd(context.Background(), &redis.XAddArgs{Stream: shardOf(old, 0).Stream(), Values: []string{"m", "x"}}).Err())
	require.Equal(t, 1, topicStats(t, env.insp, old).Partitions)
}

func TestPartition_ConfigValidation(t *testing.T) {
	env := setup(t)
	for _, c := range []struct {
		pub  redisdelay.PublisherConfig
		want string
	}{
		{redisdelay.PublisherConfig{Partitions: -1}, "PublisherConfig.Partitions is -1: use 1 to 256"},
		{redisdelay.PublisherConfig{Partitions: 257}, "PublisherConfig.Partitions is 257: use 1 to 256"},
		{redisdelay.PublisherConfig{TopicPartitions: map[string]int{"t": 0}}, `PublisherConfig.TopicPartitions["t"] is 0: use 1 to 256`},
		{redisdelay.PublisherConfig{TopicPartitions: map[string]int{"a b": 2}}, "PublisherConfig.TopicPartitions key \"a b\" contains"},
	} {
		c.pub.Client = env.client
		_, err := redisdelay.NewPublisher(c.pub, logger)
		require.ErrorContains(t, err, c.want)
	}
	_, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g", Partitions: 300}, logger)
	require.ErrorContains(t, err, "SubscriberConfig.Partitions is 300")
	_, err = redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "g", TopicPartitions: map[string]int{"t": -2}}, logger)
	require.ErrorContains(t, err, `SubscriberConfig.TopicPartitions["t"] is -2`)
}

// A Manager reads each topic's partition count from Redis and schedules
// every partition: delayed messages of all partitions are delivered with
// the subscribers' schedulers off. Several Managers share the partitions.
func TestPartition_ManagerSchedulesEvery(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const parts, n = 5, 100
	pub := newPartitionedPublisher(t, env.client, parts)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, DisableScheduler: true})
	ch := subscribe(t, sub, env.topic)
	for range 2 {
		runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}, CheckInterval: 200 * time.Millisecond})
	}
	for i := range n {
		require.NoError(t, pub.Publish(env.topic, delayed(delay.For(100*time.Millisecond), strconv.Itoa(i))))
	}
	ptCollect(t, ch, n, 10*time.Second)
}

// Cancel finds a waiting message in whichever partition it is, and the
// Inspector lists the waiting messages of all partitions in due order.
func TestPartition_CancelAndWaiting(t *testing.T) {
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, 4)
	var uuids []string
	for i := range 12 {
		msg := delayed(delay.For(time.Duration(10+i)*time.Minute), strconv.Itoa(i))
		msg.Metadata.Set(redisdelay.PartitionKey, "k"+strconv.Itoa(i))
		require.NoError(t, pub.Publish(env.topic, msg))
		uuids = append(uuids, msg.UUID)
	}
	page, err := env.insp.Waiting(context.Background(), env.topic, 2, 5)
	require.NoError(t, err)
	require.Len(t, page, 5)
	for j, w := range page {
		require.Equal(t, uuids[2+j], w.Message.UUID, "due order across partitions")
	}
	for _, id := range uuids {
		ok, err := pub.Cancel(context.Background(), env.topic, id)
		require.NoError(t, err)
		require.True(t, ok, id)
	}
	require.EqualValues(t, 0, topicStats(t, env.insp, env.topic).Waiting)
}

// Dead letters of a partitioned topic are listed across partitions, oldest
// first, with IDs that name their partition, and can be paged, requeued
// and deleted by those IDs.
func TestPartition_DeadLetters(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const parts, n = 3, 9
	pub := newPartitionedPublisher(t, env.client, parts)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, MaxAttempts: 1})
	ch := subscribe(t, sub, env.topic)
	for i := range n {
		require.NoError(t, pub.Publish(env.topic, newMessage(strconv.Itoa(i))))
	}
	for range n {
		receive(t, ch, 5*time.Second).Nack()
	}
	dead := awaitDeadLetters(t, env.insp, env.topic, "g", n, 5*time.Second)
	partitioned := 0
	for j, d := range dead {
		if j > 0 {
			require.False(t, d.Time.Before(dead[j-1].Time), "oldest first")
		}
		if strings.Contains(d.ID, "/") {
			partitioned++
		}
	}
	require.Positive(t, partitioned, "some dead letters are in partitions > 0")

	var paged []string
	after := ""
	for {
		page, err := env.insp.DeadLetters(context.Background(), env.topic, "g", after, 2)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		for _, d := range page {
			paged = append(paged, d.ID)
		}
		after = page[len(page)-1].ID
	}
	var all []string
	for _, d := range dead {
		all = append(all, d.ID)
	}
	require.Equal(t, all, paged)

	ok, err := env.insp.DeleteDeadLetter(context.Background(), env.topic, "g", all[0])
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = env.insp.RequeueDeadLetter(context.Background(), env.topic, "g", all[1])
	require.NoError(t, err)
	require.True(t, ok)
	receive(t, ch, 5*time.Second).Ack()
	n2, err := env.insp.RequeueDeadLetters(context.Background(), env.topic, "g")
	require.NoError(t, err)
	require.Equal(t, n-2, n2)
	for range n - 2 {
		receive(t, ch, 5*time.Second).Ack()
	}

	_, err = env.insp.RequeueDeadLetter(context.Background(), env.topic, "g", "7/1-0")
	require.ErrorContains(t, err, `dead letter ID "7/1-0" names partition "7", but the topic has 3: pass an ID from DeadLetters`)
	_, err = env.insp.DeadLetters(context.Background(), env.topic, "g", "x/1-0", 10)
	require.ErrorContains(t, err, `names partition "x"`)
}

// A call whose messages go to several partitions is atomic per partition:
// a duplicate in one fails that partition's messages only, and the error
// says which partitions are stored.
func TestPartition_CallSpanningPartitionsFailsPerPartition(t *testing.T) {
	env := setup(t)
	const parts = 8
	pub := newPartitionedPublisher(t, env.client, parts)
	keyIn := func(part int) string {
		for i := 0; ; i++ {
			k := "k" + strconv.Itoa(i)
			if redisdelay.PartitionOf(k, parts) == part {
				return k
			}
		}
	}
	first := delayed(delay.For(time.Hour), "first")
	first.Metadata.Set(redisdelay.PartitionKey, keyIn(1))
	require.NoError(t, pub.Publish(env.topic, first))

	clash := delayed(delay.For(time.Hour), "other body")
	clash.UUID = first.UUID
	clash.Metadata.Set(redisdelay.PartitionKey, keyIn(1))
	fine := delayed(delay.For(time.Hour), "fine")
	fine.Metadata.Set(redisdelay.PartitionKey, keyIn(2))
	err := pub.Publish(env.topic, fine, clash)
	require.ErrorIs(t, err, redisdelay.ErrDuplicateMessage)
	require.ErrorContains(t, err, fmt.Sprintf("partition 1 of topic %q", env.topic))
	require.ErrorContains(t, err, "the messages to partitions [2] of topic")
	require.EqualValues(t, 2, topicStats(t, env.insp, env.topic).Waiting)
}

// The Watermill suite against a topic of three partitions, in the
// fresh-group configuration: order holds per partition only.
func TestPubSub_Partitioned(t *testing.T) {
	if testing.Short() {
		t.Skip("-short runs the universal suite once (TestPubSub_FreshGroup); partitions are covered by TestPartition*")
	}
	f := features(true, false)
	f.GuaranteedOrder, f.GuaranteedOrderWithSingleSubscriber = false, false
	newPS := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		env := setup(t)
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.client, Partitions: 3}, logger)
		require.NoError(t, err)
		sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
			Client: env.client, ConsumerGroup: group, Partitions: 3, CloseTimeout: 100 * time.Millisecond}, logger)
		require.NoError(t, err)
		return pub, sub
	}
	tests.TestPubSub(t, f, func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newPS(t, "g-"+watermill.NewShortUUID())
	}, newPS)
}

// Schedulers share a topic's partitions evenly, and take over those of
// one that stops.
func TestPartition_ManagersShare(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const parts = 6
	keepSchedulersBusy(t, env.client, newPartitionedPublisher(t, env.client, parts), env.topic, parts)
	holders := func() map[string]int {
		n := map[string]int{}
		for p := range parts {
			if o, err := env.client.Get(context.Background(), shardOf(env.topic, p).Lease()).Result(); err == nil {
				n[o]++
			}
		}
		return n
	}
	spread := func(want ...int) func() bool {
		return func() bool {
			h := holders()
			if len(h) != len(want) {
				return false
			}
			for _, n := range h {
				if n != want[0] {
					return false
				}
			}
			return true
		}
	}
	config := redisdelay.ManagerConfig{Topics: []string{env.topic}, CheckInterval: 100 * time.Millisecond}
	first := runManager(t, env.client, config)
	require.Eventually(t, spread(parts), 5*time.Second, 20*time.Millisecond, "one Manager holds all: %v", holders())
	runManager(t, env.client, config)
	runManager(t, env.client, config)
	require.Eventually(t, spread(2, 2, 2), 10*time.Second, 20*time.Millisecond, "three share: %v", holders())
	require.NoError(t, first.Close())
	require.Eventually(t, spread(3, 3), 10*time.Second, 20*time.Millisecond, "two share: %v", holders())
}

// A lone scheduler holds every partition of a topic at once: sharing waits
// for no heartbeat when there is nobody to share with. (It took one
// partition per heartbeat, so a Manager scheduled the eighth partition
// only after about eight check intervals.)
func TestPartition_LoneSchedulerTakesEvery(t *testing.T) {
	env := setup(t)
	const parts = 8
	keepSchedulersBusy(t, env.client, newPartitionedPublisher(t, env.client, parts), env.topic, parts)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}, CheckInterval: 10 * time.Second})
	require.Eventually(t, func() bool {
		held := 0
		for p := range parts {
			if env.client.Exists(context.Background(), shardOf(env.topic, p).Lease()).Val() == 1 {
				held++
			}
		}
		return held == parts
	}, 2*time.Second, 20*time.Millisecond, "every partition's lease is held within 2s, a fraction of the 10s check interval")
}
