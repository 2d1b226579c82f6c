package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// Grouped messages due while a topic has no consumer group wait for the
// first group, not for a scheduler: a running scheduler lets the lease of
// such a partition lapse (nothing for it to do), and the stats tell them
// apart from waiting messages no scheduler moves.
func TestInspector_StatsWaitingForGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	tp := topic()
	pub := newPublisher(t, client)
	insp := newInspector(t, client)
	runManagerWithLogger(t, client, redisdelay.ManagerConfig{Topics: []string{tp}}, logger)

	msg := newMessage("grouped")
	redisdelay.SetGroup(msg, "tenant-1")
	require.NoError(t, pub.Publish(tp, msg))
	var st redisdelay.TopicStats
	require.Eventually(t, func() bool {
		var err error
		st, err = insp.Stats(ctx, tp)
		require.NoError(t, err)
		return st.WaitingForGroup == 1 && st.Leased == 0
	}, 20*time.Second, 20*time.Millisecond, "moved aside for a group to come; the scheduler lets the lease of the idle partition lapse")
	assert.Equal(t, int64(1), st.Waiting)
}
