package redisdelay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// FindWaiting and FindWaitingKey read one waiting message, in any
// partition; DueHistogram counts by due time on the server.
func TestInspector_FindWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	for _, parts := range []int{1, 3} {
		t.Run("partitions="+strconv.Itoa(parts), func(t *testing.T) {
			topic := topic()
			pub := newPartitionedPublisher(t, env.client, parts)
			var uuids []string
			for n := range 6 {
				msg := delayed(delay.For(time.Duration(n+1)*time.Hour), "p"+strconv.Itoa(n))
				msg.Metadata.Set(redisdelay.BusinessKey, "order-"+strconv.Itoa(n))
				require.NoError(t, pub.Publish(topic, msg))
				uuids = append(uuids, msg.UUID)
			}
			for n, id := range uuids {
				w, ok, err := env.insp.FindWaiting(ctx, topic, id)
				require.NoError(t, err)
				require.True(t, ok, "message %d by UUID", n)
				assert.Equal(t, id, w.Message.UUID)
				assert.Equal(t, "p"+strconv.Itoa(n), string(w.Message.Payload))
				assert.WithinDuration(t, time.Now().Add(time.Duration(n+1)*time.Hour), w.Due, time.Minute)

				w, ok, err = env.insp.FindWaitingKey(ctx, topic, "order-"+strconv.Itoa(n))
				require.NoError(t, err)
				require.True(t, ok, "message %d by business key", n)
				assert.Equal(t, id, w.Message.UUID)
			}
			_, ok, err := env.insp.FindWaiting(ctx, topic, "no-such-uuid")
			require.NoError(t, err)
			assert.False(t, ok)
			_, ok, err = env.insp.FindWaitingKey(ctx, topic, "no-such-key")
			require.NoError(t, err)
			assert.False(t, ok)

			cancelled, err := env.insp.Cancel(ctx, topic, uuids[0])
			require.NoError(t, err)
			require.True(t, cancelled)
			_, ok, err = env.insp.FindWaiting(ctx, topic, uuids[0])
			require.NoError(t, err)
			assert.False(t, ok, "cancelled")

			now := time.Now()
			counts, err := env.insp.DueHistogram(ctx, topic, []time.Time{now, now.Add(150 * time.Minute), now.Add(270 * time.Minute)})
			require.NoError(t, err)
			// Left: due in 2, 3, 4, 5 and 6 hours.
			assert.Equal(t, []int64{0, 1, 2, 2}, counts)
		})
	}
}

func TestInspector_FindWaitingBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	_, _, err := env.insp.FindWaiting(ctx, topic(), "")
	require.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
	assert.ErrorContains(t, err, "message UUID is empty")
	_, _, err = env.insp.FindWaitingKey(ctx, topic(), "")
	assert.ErrorContains(t, err, "business key is empty")
	_, _, err = env.insp.FindWaiting(ctx, "", "x")
	assert.Error(t, err, "empty topic")
	_, err = env.insp.DueHistogram(ctx, "", []time.Time{time.Now()})
	assert.Error(t, err, "empty topic")

	_, err = env.insp.DueHistogram(ctx, topic(), nil)
	assert.ErrorContains(t, err, "got 0 edges: give 1 to 100")
	_, err = env.insp.DueHistogram(ctx, topic(), make([]time.Time, 101))
	assert.ErrorContains(t, err, "got 101 edges")
	now := time.Now()
	_, err = env.insp.DueHistogram(ctx, topic(), []time.Time{now, now})
	assert.ErrorContains(t, err, "is not after edge 0")
	counts, err := env.insp.DueHistogram(ctx, topic(), []time.Time{now})
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 0}, counts, "unknown topic: empty")
}
