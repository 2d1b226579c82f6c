package redisdelay

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/requeuer"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The defaults the docs promise: 10 s doubling up to 10 minutes, on topic
// "requeue", read by group "requeuer"; a DelayOnError given is kept.
func TestDelayedRequeuerConfig_SetDefaults(t *testing.T) {
	var c DelayedRequeuerConfig
	c.setDefaults()
	assert.Equal(t, DefaultKeyPrefix, c.KeyPrefix)
	assert.Equal(t, "requeue", c.RequeueTopic)
	assert.Equal(t, "requeuer", c.ConsumerGroup)
	assert.Equal(t, &middleware.DelayOnError{InitialInterval: 10 * time.Second, MaxInterval: 10 * time.Minute, Multiplier: 2}, c.DelayOnError)

	own := &middleware.DelayOnError{InitialInterval: time.Second, MaxInterval: time.Second, Multiplier: 1}
	c = DelayedRequeuerConfig{DelayOnError: own}
	c.setDefaults()
	assert.Same(t, own, c.DelayOnError)
}

// The default GeneratePublishTopic reads PoisonQueue's metadata, and says
// what to do when it is missing.
func TestRequeuer_PoisonedTopic(t *testing.T) {
	msg := message.NewMessage("m1", nil)
	_, err := poisonedTopic(requeuer.GeneratePublishTopicParams{Message: msg})
	require.EqualError(t, err, `redisdelay: message "m1" on the requeue topic has no topic_poisoned metadata, which middleware.PoisonQueue sets: send failed messages there through DelayedRequeuer.Middleware, or set DelayedRequeuerConfig.GeneratePublishTopic`)
	msg.Metadata.Set(middleware.PoisonedTopicKey, "orders")
	got, err := poisonedTopic(requeuer.GeneratePublishTopicParams{Message: msg})
	require.NoError(t, err)
	assert.Equal(t, "orders", got)
}
