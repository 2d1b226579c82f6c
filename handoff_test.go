package redisdelay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// A Subscriber's scheduler hands a due tick to its subscription waiting
// for the partition's bell: the subscription's read runs it and finds what
// it moved. The bell still rings for every other listener: another group's
// Subscriber on the same client (the same process) and one on a client of
// its own (another process). When Redis lost the scripts (a restart, SCRIPT
// FLUSH), the tick runs after the read in the same round trip, and the
// subscription reads again at once rather than at its next sweep.
func TestHandoff_DueTicksRunInTheRead(t *testing.T) {
	t.Parallel()
	env := setup(t)
	subs := []*redisdelay.Subscriber{
		env.subscriber(t, "a"),
		env.subscriber(t, "b"),
		newSubscriber(t, newClient(t), redisdelay.SubscriberConfig{ConsumerGroup: "c"}),
	}
	var chs []<-chan *message.Message
	for _, sub := range subs {
		chs = append(chs, subscribe(t, sub, env.topic))
	}
	handoffs := func() (n int64) {
		for _, sub := range subs {
			n += redisdelay.Handoffs(sub)
		}
		return n
	}

	const n = 10
	for i := range n {
		// spaced, so that each falls due while the subscriptions wait
		require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(time.Duration(300+100*i)*time.Millisecond), fmt.Sprint(i))))
	}
	for i := range n {
		for _, ch := range chs {
			msg := receive(t, ch, 2*time.Second)
			assert.Equal(t, fmt.Sprint(i), string(msg.Payload))
			msg.Ack()
		}
	}
	assert.Positive(t, handoffs(), "no tick ran in a read")

	for round := range 3 {
		before := handoffs()
		require.NoError(t, env.client.ScriptFlush(context.Background()).Err())
		due := time.Now().Add(300 * time.Millisecond)
		require.NoError(t, env.pub.Publish(env.topic, delayed(delay.Until(due), "after the flush")))
		for _, ch := range chs {
			// the sweep would find it only after BlockTime (30 s)
			msg := receive(t, ch, 2*time.Second)
			assert.Equal(t, "after the flush", string(msg.Payload))
			msg.Ack()
		}
		if handoffs() > before {
			return // the flushed tick ran in a read
		}
		t.Logf("round %d: the scheduler ran the tick itself", round)
	}
	t.Error("no tick ran in a read after the scripts were flushed")
}
