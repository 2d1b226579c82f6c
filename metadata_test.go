package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// The setters write the keys and values Publish reads: a business key with
// the default policy refuses a second holder and KeepFirst keeps the
// first; the partition key and high priority are stored with the messages
// (where they lead is tested in partition_test.go and priority_test.go).
// Empty values remove the keys.
func TestMetadata_Setters(t *testing.T) {
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, 8)
	newMsg := func(payload string) *message.Message {
		msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
		delay.Message(msg, delay.For(time.Hour))
		return msg
	}

	first := newMsg("first")
	redisdelay.SetBusinessKey(first, "order-1")
	redisdelay.SetHighPriority(first)
	require.NoError(t, pub.Publish(env.topic, first))
	second := newMsg("second")
	redisdelay.SetBusinessKey(second, "order-1")
	require.ErrorIs(t, pub.Publish(env.topic, second), redisdelay.ErrDuplicateBusinessKey)
	redisdelay.SetBusinessKeyPolicy(second, redisdelay.KeepFirst)
	require.NoError(t, pub.Publish(env.topic, second))

	for i := range 8 {
		msg := newMsg("p")
		redisdelay.SetPartitionKey(msg, "customer-7")
		require.NoError(t, pub.Publish(env.topic, msg), i)
	}
	waiting, err := env.insp.Waiting(context.Background(), env.topic, 0, 100)
	require.NoError(t, err)
	require.Len(t, waiting, 9, "KeepFirst dropped the second message")
	parts := map[string]bool{}
	for _, w := range waiting {
		if string(w.Message.Payload) == "first" {
			assert.Equal(t, redisdelay.PriorityHigh, w.Message.Metadata.Get(redisdelay.PriorityKey))
			assert.Equal(t, "order-1", w.Message.Metadata.Get(redisdelay.BusinessKey))
			continue
		}
		parts[w.Message.Metadata.Get(redisdelay.PartitionKey)] = true
	}
	assert.Equal(t, map[string]bool{"customer-7": true}, parts)

	msg := newMsg("x")
	redisdelay.SetBusinessKey(msg, "k")
	redisdelay.SetBusinessKeyPolicy(msg, redisdelay.ReplaceWaiting)
	redisdelay.SetPartitionKey(msg, "p")
	redisdelay.SetBusinessKey(msg, "")
	redisdelay.SetBusinessKeyPolicy(msg, "")
	redisdelay.SetPartitionKey(msg, "")
	for _, k := range []string{redisdelay.BusinessKey, redisdelay.BusinessKeyPolicyKey, redisdelay.PartitionKey} {
		_, ok := msg.Metadata[k]
		assert.False(t, ok, k)
	}
}
