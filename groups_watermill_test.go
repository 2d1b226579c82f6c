package redisdelay_test

// Groups combined with Watermill's components: the Router's Retry inside
// PoisonQueue, delay.NewPublisher and DelayOnError.
//
// Each test of groups_*_test.go ends with awaitGroupsSettled
// (helpers_groups_test.go): once everything is settled, no group state is
// left in Redis.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// In a Router with middleware.Retry inside middleware.PoisonQueue, two
// subscribers of a consumer group with GroupConcurrency 1: a grouped
// message retried in the handler keeps its group's slot (the group's next
// message waits), one that fails for good goes to the poison topic with
// its group (the metadata travels), where it is queued in that group for
// the poison topic's consumer group, and the original is acked, giving the
// slot back.
func TestGroupsCombo_RouterRetryAndPoisonQueue(t *testing.T) {
	t.Parallel()
	env := setup(t)
	poisonTp := topic()
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic, poisonTp}})
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1}
	subs := []*redisdelay.Subscriber{newSubscriber(t, env.client, config), newSubscriber(t, newClient(t), config)}
	poisonSub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "p", GroupConcurrency: 1})
	require.NoError(t, poisonSub.SubscribeInitialize(poisonTp))

	poison, err := middleware.PoisonQueue(env.pub, poisonTp)
	require.NoError(t, err)
	router := newRouter(t)
	router.AddMiddleware(poison, middleware.Retry{MaxRetries: 2, InitialInterval: 10 * time.Millisecond}.Middleware)
	h := newHandled()
	calls := map[string]int{}
	routerHandlers(router, "h", env.topic, subs, func(msg *message.Message) error {
		g := h.start(t, msg)
		defer h.end(g)
		if msg.Metadata.Get(redisdelay.GroupKey) != g {
			return fmt.Errorf("message %s lost its group: %v", msg.Payload, msg.Metadata)
		}
		time.Sleep(2 * time.Millisecond) // overlapping handlers, were the cap not held
		h.mu.Lock()
		calls[string(msg.Payload)]++
		n := calls[string(msg.Payload)]
		h.mu.Unlock()
		switch {
		case string(msg.Payload) == "a/1":
			return errors.New("a/1 always fails")
		case string(msg.Payload) == "a/0" && n < 3:
			return errors.New("a/0 fails twice")
		}
		return nil
	})
	runRouter(t, router)

	require.NoError(t, env.pub.Publish(env.topic, groupedMessage("a", 0), groupedMessage("a", 1), groupedMessage("a", 2), groupedMessage("b", 0)))
	require.Eventually(t, func() bool { return h.count() == 3*2+1+1 }, 5*time.Second, 10*time.Millisecond, "handler calls")
	h.mu.Lock()
	assert.Equal(t, []int{0, 0, 0, 1, 1, 1, 2}, h.order["a"], "the Retry middleware's calls keep the group's order")
	assert.Equal(t, []int{0}, h.order["b"])
	assert.Equal(t, 1, h.most["a"])
	h.mu.Unlock()

	ch := subscribe(t, poisonSub, poisonTp)
	msg := receive(t, ch, 5*time.Second)
	require.Equal(t, "a/1", string(msg.Payload))
	require.Equal(t, "a", msg.Metadata.Get(redisdelay.GroupKey))
	require.Equal(t, env.topic, msg.Metadata.Get(middleware.PoisonedTopicKey))
	require.Equal(t, "a", redoGroups(t, env.client, poisonTp, "p", 0)[msg.UUID], "queued in its group on the poison topic")
	msg.Ack()
	nothing(t, ch, 200*time.Millisecond)
	awaitGroupsSettled(t, env.client, env.topic, "g", 1)
	awaitGroupsSettled(t, env.client, poisonTp, "p", 1)
}

// Grouped messages published through Watermill's delay.NewPublisher (a
// default delay, and one set with delay.WithContext) keep their group, are
// queued in it in due order, not publish order; middleware.DelayOnError's
// retry of a grouped message (a Nack with a delay) keeps the group's slot
// through its delay (GroupConcurrency 1), so the group's next message comes
// after the retry, while another group goes on.
func TestGroupsCombo_DelayPublisherAndDelayOnError(t *testing.T) {
	t.Parallel()
	env := setup(t)
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1}
	subs := []*redisdelay.Subscriber{newSubscriber(t, env.client, config), newSubscriber(t, newClient(t), config)}

	router := newRouter(t)
	router.AddMiddleware((&middleware.DelayOnError{InitialInterval: 300 * time.Millisecond, MaxInterval: time.Second, Multiplier: 2}).Middleware)
	var mu sync.Mutex
	var seen []string
	routerHandlers(router, "h", env.topic, subs, func(msg *message.Message) error {
		attempt := msg.Metadata.Get(redisdelay.AttemptKey)
		mu.Lock()
		seen = append(seen, string(msg.Payload)+"#"+attempt+"@"+msg.Metadata.Get(redisdelay.GroupKey))
		mu.Unlock()
		if string(msg.Payload) == "a/0" && attempt == "1" {
			return errors.New("a/0 fails once")
		}
		return nil
	})
	runRouter(t, router)

	delayed, err := delay.NewPublisher(env.pub, delay.PublisherConfig{
		DefaultDelayGenerator: func(delay.DefaultDelayGeneratorParams) (delay.Delay, error) {
			return delay.For(300 * time.Millisecond), nil
		},
	})
	require.NoError(t, err)
	// a/1 first with the default delay, then a/0 due earlier
	require.NoError(t, delayed.Publish(env.topic, groupedMessage("a", 1), groupedMessage("b", 0)))
	first := groupedMessage("a", 0)
	first.SetContext(delay.WithContext(context.Background(), delay.For(100*time.Millisecond)))
	require.NoError(t, delayed.Publish(env.topic, first))

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 4
	}, 5*time.Second, 10*time.Millisecond, "deliveries")
	mu.Lock()
	var ofA []string
	for _, s := range seen {
		if strings.HasPrefix(s, "a/") {
			ofA = append(ofA, s)
		}
	}
	assert.Equal(t, []string{"a/0#1@a", "a/0#2@a", "a/1#1@a"}, ofA, "all deliveries: %v", seen)
	assert.Contains(t, seen, "b/0#1@b")
	mu.Unlock()
	awaitGroupsSettled(t, env.client, env.topic, "g", 1)
	mu.Lock()
	assert.Len(t, seen, 4, "no further delivery: %v", seen)
	mu.Unlock()
}
