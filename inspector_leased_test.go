package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// TopicStats.Leased tells whether a scheduler runs for a topic: none
// without one (subscribers with DisableScheduler only), every partition
// with waiting messages while a Manager runs, none once it stopped.
func TestInspectorStatsLeased(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	tp := topic()
	pub := newPartitionedPublisher(t, client, 2)
	insp := newInspector(t, client)
	// Near and far (the far tier) messages, enough to fill both partitions.
	for n := range 8 {
		d := 30 * time.Second
		if n%2 == 1 {
			d = time.Hour
		}
		require.NoError(t, pub.Publish(tp, delayed(delay.For(d), "x")))
	}
	st := topicStats(t, insp, tp)
	require.Equal(t, 2, st.Partitions)
	require.EqualValues(t, 8, st.Waiting)
	assert.Equal(t, 0, st.Leased, "no scheduler runs")

	mgr := runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}, CheckInterval: 100 * time.Millisecond})
	require.Eventually(t, func() bool { return topicStats(t, insp, tp).Leased == 2 }, 5*time.Second, 20*time.Millisecond)
	// Held all along while messages wait, not only right after a tick.
	for range 15 {
		time.Sleep(30 * time.Millisecond)
		require.Equal(t, 2, topicStats(t, insp, tp).Leased)
	}

	require.NoError(t, mgr.Close())
	assert.Equal(t, 0, topicStats(t, insp, tp).Leased, "a stopping scheduler releases its leases")
	overdue, err := insp.Overdue(context.Background(), tp)
	require.NoError(t, err)
	assert.Zero(t, overdue)
}
