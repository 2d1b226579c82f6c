package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

type ctxKey struct{}

// A delivered message's context carries the Subscribe context's values,
// is alive while the handler runs and ends with the delivery (here an
// Ack), whether the handler asked for Done before or only after it:
// context.Cause and context.AfterFunc see it end too.
func TestDelivery_MessageContextEndsWithTheDelivery(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer cancel()
	ch, err := sub.Subscribe(ctx, env.topic)
	require.NoError(t, err)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("early"), newMessage("late")))

	// Done asked for before the Ack.
	early := receive(t, ch, 2*time.Second)
	assert.Equal(t, "v", early.Context().Value(ctxKey{}))
	waited := make(chan error, 1)
	go func() {
		<-early.Context().Done()
		waited <- early.Context().Err()
	}()
	after := make(chan struct{})
	context.AfterFunc(early.Context(), func() { close(after) })
	require.NoError(t, early.Context().Err())
	early.Ack()
	select {
	case err := <-waited:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(2 * time.Second):
		t.Fatal("the message's context did not end after its Ack")
	}
	select {
	case <-after:
	case <-time.After(2 * time.Second):
		t.Fatal("context.AfterFunc did not run after the Ack")
	}
	assert.ErrorIs(t, context.Cause(early.Context()), context.Canceled)

	// Nothing asked for until after the Ack: the next delivery starts
	// once this one ended.
	late := receive(t, ch, 2*time.Second)
	require.NoError(t, late.Context().Err(), "alive while handled")
	late.Ack()
	assert.Eventually(t, func() bool { return late.Context().Err() != nil }, 2*time.Second, 5*time.Millisecond)
	assert.ErrorIs(t, context.Cause(late.Context()), context.Canceled)
	select {
	case <-late.Context().Done():
	default:
		t.Error("Done not closed once Err is set")
	}
	assert.Equal(t, "v", late.Context().Value(ctxKey{}), "values outlive the delivery")
}
