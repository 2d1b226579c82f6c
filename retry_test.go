package redisdelay_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// DefaultRetryDelay doubles from 1s, is capped at 10 min, and every value is
// within ±20% of its nominal delay; jitter makes equal attempts differ.
func TestRetry_DefaultRetryDelay(t *testing.T) {
	for attempt := 1; attempt <= 40; attempt++ {
		nominal := min(time.Second<<min(attempt-1, 20), 10*time.Minute)
		seen := map[time.Duration]bool{}
		for range 200 {
			d := redisdelay.DefaultRetryDelay(attempt)
			require.GreaterOrEqual(t, d, nominal*8/10, "attempt %d", attempt)
			require.LessOrEqual(t, d, nominal*12/10, "attempt %d", attempt)
			seen[d] = true
		}
		assert.Greater(t, len(seen), 100, "attempt %d: delays are not jittered", attempt)
	}
	for _, attempt := range []int{0, -1, 1 << 30} {
		d := redisdelay.DefaultRetryDelay(attempt)
		assert.True(t, d > 0 && d <= 12*time.Minute, "attempt %d: %s", attempt, d)
	}
	// With the default MaxAttempts (16), a message that always fails is
	// retried for about 67 minutes before it goes to the dead letters.
	var total time.Duration
	for attempt := 1; attempt < 16; attempt++ {
		total += min(time.Second<<(attempt-1), 10*time.Minute)
	}
	assert.Equal(t, 4023*time.Second, total)
}

// A Subscriber with no RetryDelay does not redeliver a nacked message at
// once (it did before: 16 attempts burnt in about two seconds), and one that
// asks for no delay gets it back at once.
func TestRetry_NackWithDefaultRetryDelayWaits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		configure []func(*redisdelay.SubscriberConfig)
		min, max  time.Duration
	}{
		{"default", nil, 800 * time.Millisecond, 3 * time.Second},
		{"immediate", []func(*redisdelay.SubscriberConfig){noRetryDelay}, 0, 500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := setup(t)
			sub := env.subscriber(t, "g", c.configure...)
			defer sub.Close()
			ch := subscribe(t, sub, env.topic)
			require.NoError(t, env.pub.Publish(env.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
			msg := receive(t, ch, 2*time.Second)
			nacked := time.Now()
			msg.Nack()
			msg = receive(t, ch, 5*time.Second)
			took := time.Since(nacked)
			msg.Ack()
			t.Logf("redelivered after %s", took)
			assert.GreaterOrEqual(t, took, c.min)
			assert.Less(t, took, c.max)
		})
	}
}
