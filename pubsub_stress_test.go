//go:build stress

package redisdelay_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/redisdelay/watermill-redisdelay"
)

// Watermill's stress suite (build tag stress): the universal suite
// STRESS_TEST_COUNT times at once (Watermill's default: 10), with
// GOMAXPROCS doubled and every timeout of the suite 5 times longer
// (Watermill's pubsub/tests/test_pubsub_stress.go). CI runs Watermill's
// count, then 3 copies under -race (see .ci/run). TestReconnect does not
// run here: each of the copies would restart the server under the others;
// it runs in TestPubSub_Delayed.

// Immediate messages, a fresh consumer group per pub/sub, as Watermill's
// Redis Streams adapter is tested.
func TestPubSubStress_FreshGroup(t *testing.T) {
	tests.TestPubSubStressTest(t, features(true, false),
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return suitePubSub(t, "g-"+watermill.NewShortUUID())
		},
		groupPubSub)
}

// Every message delayed, and one consumer group for every pub/sub of a
// test: subscribers compete, and TestContinueAfterErrors's 300 Nacks fall on
// whichever of its 50 messages are due, a few at a time, so one message
// can be nacked far more often than the default MaxAttempts (16) allows:
// it would go to the dead letters and the test miss it. The suite assumes
// a Nack never gives a message up, so MaxAttempts is unlimited here.
func TestPubSubStress_DelayedSharedGroup(t *testing.T) {
	tests.TestPubSubStressTest(t, features(false, false),
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return stressDelayedPubSub(t, "shared")
		},
		stressDelayedPubSub)
}

func stressDelayedPubSub(t *testing.T, group string) (message.Publisher, message.Subscriber) {
	return suiteDelayed(t, group, func(c *redisdelay.SubscriberConfig) { c.MaxAttempts = -1 })
}
