package redisdelay_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// A Manager says at start which topics it schedules: "all topics" without
// a list (it schedules every topic of the registry), not an empty one.
func TestManagerLogsTheTopicsItSchedules(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	for _, c := range []struct {
		topics []string
		want   any
	}{
		{nil, "all topics"},
		{[]string{"a", "b"}, []string{"a", "b"}},
	} {
		logs := watermill.NewCaptureLogger()
		runManagerWithLogger(t, client, redisdelay.ManagerConfig{KeyPrefix: uniquePrefix(), Topics: c.topics}, logs)
		running := watermill.CapturedMessage{Level: watermill.InfoLogLevel, Msg: "redisdelay manager running",
			Fields: watermill.LogFields{"topics": c.want}}
		require.Eventually(t, func() bool { return logs.Has(running) }, 5*time.Second, 10*time.Millisecond,
			"logged: %v", logs.Captured()[watermill.InfoLogLevel])
		assert.False(t, logs.Has(watermill.CapturedMessage{Level: watermill.InfoLogLevel, Msg: "redisdelay manager running",
			Fields: watermill.LogFields{"topics": []string(nil)}}))
	}
}
