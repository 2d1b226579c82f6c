package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// TestInspector_Counters: the growing counters of a topic of two partitions
// count messages made ready (published immediate, and delayed ones when
// due), first deliveries per group and dead letters, and do not shrink
// when the messages are acknowledged.
func TestInspector_Counters(t *testing.T) {
	env := setup(t)
	ctx := context.Background()

	c, err := env.insp.Counters(ctx, env.topic)
	require.NoError(t, err, "a topic nothing used yet")
	assert.Zero(t, c.Ready)
	assert.Empty(t, c.Groups)
	assert.WithinDuration(t, time.Now(), c.Time, 5*time.Second, "Redis's clock")

	_, err = env.insp.Counters(ctx, "bad topic\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "topic")

	pub := newPartitionedPublisher(t, env.client, 2)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 1, Partitions: 2})
	ch := subscribe(t, sub, env.topic)
	for n := range 5 {
		require.NoError(t, pub.Publish(env.topic, newMessage("now "+string(rune('a'+n)))))
	}
	require.NoError(t, pub.Publish(env.topic, delayed(delay.For(300*time.Millisecond), "soon")))
	for n := range 6 {
		m := receive(t, ch, 5*time.Second)
		if n == 0 {
			m.Nack()
		} else {
			m.Ack()
		}
	}
	awaitDeadLetters(t, env.insp, env.topic, "g", 1, 5*time.Second)

	c, err = env.insp.Counters(ctx, env.topic)
	require.NoError(t, err)
	assert.Equal(t, env.topic, c.Topic)
	assert.EqualValues(t, 6, c.Ready, "5 immediate + 1 delayed made ready, over both partitions")
	require.Len(t, c.Groups, 1)
	assert.Equal(t, redisdelay.GroupCounters{Group: "g", Delivered: 6, DeadTotal: 1}, c.Groups[0])
	st := topicStats(t, env.insp, env.topic)
	assert.Less(t, st.Stream, int64(7), "the stream itself may be trimmed; the counter is not")
}
