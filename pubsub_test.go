package redisdelay_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// suitePubSub is the universal suite's constructor. Its tests often stop
// reading with a message delivered and never acked, then Close (fifty
// subscribers one after another in TestConcurrentSubscribe): a short
// CloseTimeout keeps them from waiting for handlers that do not exist.
// TestContinueAfterErrors nacks each message six times and waits at most
// 15s for the next one, so nacked messages must come back at once: the
// default backoff would wait 16s before the sixth attempt.
func suitePubSub(t *testing.T, group string, configure ...func(*redisdelay.SubscriberConfig)) (*redisdelay.Publisher, *redisdelay.Subscriber) {
	configure = append([]func(*redisdelay.SubscriberConfig){noRetryDelay, func(c *redisdelay.SubscriberConfig) { c.CloseTimeout = 100 * time.Millisecond }}, configure...)
	return newPubSub(t, group, configure...)
}

// suiteDelay is the delay of every message of the delayed configurations.
const suiteDelay = 100 * time.Millisecond

// suiteDelayed is suitePubSub whose Publisher delays every message by
// suiteDelay (delay.NewPublisher's DefaultDelayGenerator), so the whole
// suite goes through the waiting set and the scheduler.
func suiteDelayed(t *testing.T, group string, configure ...func(*redisdelay.SubscriberConfig)) (message.Publisher, message.Subscriber) {
	pub, sub := suitePubSub(t, group, configure...)
	dp, err := delay.NewPublisher(pub, delay.PublisherConfig{
		DefaultDelayGenerator: func(delay.DefaultDelayGeneratorParams) (delay.Delay, error) {
			return delay.For(suiteDelay), nil
		},
	})
	require.NoError(t, err)
	return dp, sub
}

func delayedGroupPubSub(t *testing.T, group string) (message.Publisher, message.Subscriber) {
	return suiteDelayed(t, group)
}

func groupPubSub(t *testing.T, group string) (message.Publisher, message.Subscriber) {
	return suitePubSub(t, group)
}

// A fresh consumer group per pub/sub, as Watermill's Redis Streams adapter
// is tested.
func TestPubSub_FreshGroup(t *testing.T) {
	tests.TestPubSub(t, features(true, false),
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return suitePubSub(t, "g-"+watermill.NewShortUUID())
		},
		groupPubSub)
}

// One consumer group for every pub/sub of a test, so subscribers compete and
// messages a closed subscriber held must reach the others at once.
func TestPubSub_SharedGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("-short runs the universal suite once (TestPubSub_FreshGroup); competing consumers of one group are covered by TestLifecycle_MessagesFetchedBehindSlowHandlerGoToOtherConsumers and the Close tests")
	}
	tests.TestPubSub(t, features(false, false),
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return suitePubSub(t, "shared")
		},
		groupPubSub)
}

// Every message delayed, so the whole suite goes through the waiting set and
// the scheduler.
func TestPubSub_Delayed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short runs the universal suite once (TestPubSub_FreshGroup); delays are covered by TestDelay*, reconnects by TestLifecycle_SubscriberAndSchedulerResumeAfterRedisOutage")
	}
	tests.TestPubSub(t, features(true, true),
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return suiteDelayed(t, "g-"+watermill.NewShortUUID())
		},
		delayedGroupPubSub)
}
