package redisdelay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// An error that passes through several layers of the package names the
// package once ("redisdelay: publish ...: register topic ...", not
// "redisdelay: publish ...: redisdelay: register topic ..."), and keeps
// its sentinel reachable.
func TestErrorTextHasThePrefixOnce(t *testing.T) {
	client := newClient(t)
	tp := topic()
	require.NoError(t, newPartitionedPublisher(t, client, 4).Publish(tp, newMessage("x")))
	mismatch := newPartitionedPublisher(t, client, 2).Publish(tp, newMessage("y"))
	require.ErrorIs(t, mismatch, redisdelay.ErrPartitionMismatch)

	// Nothing listens on port 1: registering the topic fails inside Publish.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: down, PublishTimeout: time.Second}, logger)
	require.NoError(t, err)
	unreachable := pub.Publish(tp, newMessage("z"))
	require.ErrorContains(t, unreachable, "register topic")

	insp := newInspector(t, down)
	_, stats := insp.Stats(context.Background(), tp)
	require.Error(t, stats)

	for _, err := range []error{mismatch, unreachable, stats} {
		assert.Equal(t, 1, strings.Count(err.Error(), "redisdelay:"), err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), "redisdelay: "), err.Error())
		t.Log(err)
	}
}
