package redisdelay_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// A page far past the end of a partitioned topic is empty: offset + limit
// overflowed and panicked.
func TestInspector_WaitingOffsetNearMaxInt(t *testing.T) {
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, 3)
	for range 3 {
		require.NoError(t, pub.Publish(env.topic, delayed(delay.For(time.Hour), "x")))
	}
	for _, offset := range []int{math.MaxInt, math.MaxInt - 5, math.MaxInt / 2} {
		page, err := env.insp.Waiting(context.Background(), env.topic, offset, 10)
		require.NoError(t, err)
		assert.Empty(t, page)
	}
	page, err := env.insp.Waiting(context.Background(), env.topic, 1, 10_000)
	require.NoError(t, err)
	assert.Len(t, page, 2)
}

// A waiting body that cannot be decoded is listed as corrupt instead of
// failing the page.
func TestInspector_WaitingCorruptBody(t *testing.T) {
	env := setup(t)
	var ids []string
	for i := range 3 {
		// due within a second: in the waiting set, not the far tier
		msg := delayed(delay.For(time.Duration(i+1)*300*time.Millisecond), "x")
		ids = append(ids, msg.UUID)
		require.NoError(t, env.pub.Publish(env.topic, msg))
	}
	require.NoError(t, env.client.HSet(context.Background(), shardOf(env.topic, 0).Bodies(), ids[1], "garbage").Err())
	page, err := newInspector(t, env.client).Waiting(context.Background(), env.topic, 0, 10)
	require.NoError(t, err)
	require.Len(t, page, 3)
	for i, w := range page {
		assert.Equal(t, ids[i], w.Message.UUID)
	}
	assert.Empty(t, page[0].Corrupt)
	assert.Contains(t, page[1].Corrupt, "corrupt")
	assert.Empty(t, page[1].Message.Payload)
	assert.WithinDuration(t, time.Now().Add(600*time.Millisecond), page[1].Due, time.Second)
}

// Registry entries that are not valid topic names are left out of Topics
// (and so of Health and the Collector) and listed by InvalidTopics.
func TestInspector_InvalidRegistryEntries(t *testing.T) {
	needSingle(t, "reads the whole registry of the default prefix")
	env := setup(t)
	require.NoError(t, newPublisher(t, env.client).Publish(env.topic, newMessage("x")))
	reg := defaultKeys.Topics()
	require.NoError(t, env.client.SAdd(context.Background(), reg, "bad{name}", "").Err())
	t.Cleanup(func() { env.client.SRem(context.Background(), reg, "bad{name}", "") })

	topics, err := env.insp.Topics(context.Background())
	require.NoError(t, err)
	assert.Contains(t, topics, env.topic)
	assert.NotContains(t, topics, "bad{name}")
	assert.NotContains(t, topics, "")
	bad, err := env.insp.InvalidTopics(context.Background())
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"bad{name}", ""}, bad)
	_, err = env.insp.Health(context.Background(), redisdelay.HealthConfig{})
	require.NoError(t, err)
}
