package redisdelay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Consumer.Stuck: a consumer holding a message with no sign of life for
// twice the group's visibility timeout is stuck; a live one holding a
// message its handler has not settled renews its lease and is not, nor is
// one silent and holding nothing.
func TestInspector_ConsumersStuck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	tp := topic()
	pub := newPublisher(t, client)
	insp := newInspector(t, client)
	// A short visibility timeout, stored for the group, so "twice of it"
	// passes within the test; no scheduler, which would reclaim the
	// crashed consumer's message.
	cfg := redisdelay.SubscriberConfig{ConsumerGroup: "g", Consumer: "live", DisableScheduler: true, VisibilityTimeout: 100 * time.Millisecond}
	live := newSubscriber(t, client, cfg)
	require.NoError(t, live.SubscribeInitialize(tp))
	require.NoError(t, pub.Publish(tp, newMessage("1"), newMessage("2"), newMessage("3")))
	crashedRead(t, client, tp, "g", "crashed")
	idle := crashedRead(t, client, tp, "g", "idle")
	require.NoError(t, client.XAck(ctx, store.Keys{Prefix: redisdelay.DefaultKeyPrefix}.Shard(tp, 0).Stream(), "g", idle.ID).Err()) // holds nothing now
	ch := subscribe(t, live, tp)
	held := receive(t, ch, 5*time.Second) // not settled while the test runs
	defer held.Ack()

	byName := func() map[string]redisdelay.Consumer {
		cs, err := insp.Consumers(ctx, tp, "g")
		require.NoError(t, err)
		out := map[string]redisdelay.Consumer{}
		for _, c := range cs {
			name, _, _ := strings.Cut(c.Name, "-") // a Subscriber's name takes a unique suffix
			out[name] = c
		}
		return out
	}
	require.Eventually(t, func() bool { return byName()["crashed"].Stuck }, 10*time.Second, 10*time.Millisecond)
	// Past twice the timeout for all three: only the crashed one is stuck.
	require.Eventually(t, func() bool { return byName()["idle"].Idle >= 500*time.Millisecond }, 10*time.Second, 10*time.Millisecond)
	cs := byName()
	assert.True(t, cs["crashed"].Stuck)
	assert.Equal(t, int64(1), cs["crashed"].Pending)
	assert.False(t, cs["live"].Stuck, "a live consumer renews what it holds: %+v", cs["live"])
	assert.Equal(t, int64(1), cs["live"].Pending)
	assert.False(t, cs["idle"].Stuck, "holds nothing: %+v", cs["idle"])
}

// Consumer.Active is zero where Redis does not tell it (before 7.2), not
// "now": never after LastSeen (a success is an attempt too).
func TestInspector_ConsumersActiveNotNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	tp := topic()
	insp := newInspector(t, client)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	require.NoError(t, sub.SubscribeInitialize(tp))
	require.NoError(t, newPublisher(t, client).Publish(tp, newMessage("1")))
	crashedRead(t, client, tp, "g", "crashed")
	require.Eventually(t, func() bool {
		cs, err := insp.Consumers(ctx, tp, "g")
		require.NoError(t, err)
		require.Len(t, cs, 1)
		if cs[0].Idle < 200*time.Millisecond {
			return false
		}
		assert.True(t, cs[0].Active.IsZero() || !cs[0].Active.After(cs[0].LastSeen), "active %v, last seen %v", cs[0].Active, cs[0].LastSeen)
		return true
	}, 10*time.Second, 20*time.Millisecond)
}
