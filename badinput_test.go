package redisdelay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Every Publish input a user can get wrong: the exact error, and proof that
// nothing of the call was stored and nothing already there was touched.
func TestBadInput_Publish(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pub := env.publisher(t, redisdelay.PublisherConfig{MaxDelay: 24 * time.Hour, MaxMessageSize: 200})
	// A bystander already waiting, and a valid message in every failing call:
	// a rejected call stores none of its messages. Due in an hour, so that
	// it waits however slowly a loaded machine runs the test; its business
	// key keeps it out of the far tier, from where the duplicate check would
	// move it to the waiting set, changing the layout though not the content.
	bystander := delayed(delay.For(time.Hour), "bystander")
	bystander.Metadata.Set(redisdelay.BusinessKey, "bystander")
	require.NoError(t, pub.Publish(env.topic, bystander))
	before := topicState(t, env.topic)

	good := message.NewMessage("good", []byte("fine"))
	withMeta := func(uuid, key, value string) *message.Message {
		m := message.NewMessage(uuid, nil)
		m.Metadata.Set(key, value)
		return m
	}
	longTopic := strings.Repeat("t", 257)
	changed := bystander.Copy()
	changed.Payload = []byte("changed")

	for _, c := range []struct {
		name  string
		topic string
		msgs  []*message.Message
		is    error
		want  string
	}{
		{"empty topic", "", []*message.Message{good}, redisdelay.ErrInvalidTopic,
			`redisdelay: invalid topic: topic is empty`},
		{"brace in topic", "a{b}", []*message.Message{good}, redisdelay.ErrInvalidTopic,
			`redisdelay: invalid topic: topic "a{b}" contains "{" at byte 1: braces, spaces and control characters are not allowed (they would break the Redis key layout)`},
		{"space in topic", "a b", []*message.Message{good}, redisdelay.ErrInvalidTopic,
			`redisdelay: invalid topic: topic "a b" contains " " at byte 1: braces, spaces and control characters are not allowed (they would break the Redis key layout)`},
		{"control character in topic", "a\nb", []*message.Message{good}, redisdelay.ErrInvalidTopic,
			`redisdelay: invalid topic: topic "a\nb" contains "\n" at byte 1: braces, spaces and control characters are not allowed (they would break the Redis key layout)`},
		{"topic too long", longTopic, []*message.Message{good}, redisdelay.ErrInvalidTopic,
			`redisdelay: invalid topic: topic is 257 bytes long: use at most 256`},
		{"topic not UTF-8", "a\xffb", []*message.Message{good}, redisdelay.ErrInvalidTopic,
			`redisdelay: invalid topic: topic "a\xffb" is not valid UTF-8`},
		{"nil message", env.topic, []*message.Message{good, nil}, redisdelay.ErrInvalidMessage,
			fmt.Sprintf(`redisdelay: invalid message: publish to topic %q: message 1 is nil`, env.topic)},
		{"empty UUID", env.topic, []*message.Message{good, message.NewMessage("", nil)}, redisdelay.ErrInvalidMessage,
			fmt.Sprintf(`redisdelay: invalid message: publish to topic %q: message 1 has an empty UUID: create messages with message.NewMessage(watermill.NewUUID(), payload)`, env.topic)},
		{"duplicate UUID in one call", env.topic, []*message.Message{good, message.NewMessage("good", nil)}, redisdelay.ErrDuplicateMessage,
			fmt.Sprintf(`redisdelay: duplicate message UUID: messages 0 and 1 of one Publish call to topic %q share UUID "good": give each message its own UUID`, env.topic)},
		{"UUID already waiting with another body", env.topic, []*message.Message{good, changed}, redisdelay.ErrDuplicateMessage,
			fmt.Sprintf(`redisdelay: duplicate message UUID: message %q is already waiting in topic %q with a different body: cancel it first or use a new UUID`, bystander.UUID, env.topic)},
		{"malformed delayed_for", env.topic, []*message.Message{good, withMeta("m", delay.DelayedForKey, "soon")}, redisdelay.ErrInvalidDelay,
			fmt.Sprintf(`redisdelay: invalid delay metadata: message "m" to topic %q: metadata _watermill_delayed_for="soon" is not a Go duration such as "1.5s" (set it with delay.Message(msg, delay.For(d)))`, env.topic)},
		{"delayed_for out of range", env.topic, []*message.Message{good, withMeta("m", delay.DelayedForKey, "9999999h")}, redisdelay.ErrInvalidDelay,
			fmt.Sprintf(`redisdelay: invalid delay metadata: message "m" to topic %q: metadata _watermill_delayed_for="9999999h" is out of range: a delay is at most 2562047h0m0s (about 292 years); for a due time, use delay.Until`, env.topic)},
		{"malformed delayed_until", env.topic, []*message.Message{good, withMeta("m", delay.DelayedUntilKey, "tomorrow")}, redisdelay.ErrInvalidDelay,
			fmt.Sprintf(`redisdelay: invalid delay metadata: message "m" to topic %q: metadata _watermill_delayed_until="tomorrow" is not an RFC 3339 time such as "2006-01-02T15:04:05Z" (set it with delay.Message(msg, delay.Until(t)))`, env.topic)},
		{"delay beyond MaxDelay", env.topic, []*message.Message{good, withMeta("m", delay.DelayedForKey, "25h")}, redisdelay.ErrInvalidDelay,
			fmt.Sprintf(`redisdelay: invalid delay metadata: message "m" to topic %q: due in 25h0m0s, beyond PublisherConfig.MaxDelay (24h0m0s): raise MaxDelay if that is intended`, env.topic)},
		{"delay.Until(year 9999)", env.topic, []*message.Message{good, delayed9999("m")}, redisdelay.ErrInvalidDelay,
			fmt.Sprintf(`redisdelay: invalid delay metadata: message "m" to topic %q: due in more than 292 years, beyond the limit of 100 years (PublisherConfig.MaxDelay is 24h0m0s): use a nearer delay.Until or a shorter delay.For`, env.topic)},
		{"until year 9999 alone", env.topic, []*message.Message{good, withMeta("m", delay.DelayedUntilKey, "9999-12-31T00:00:00Z")}, redisdelay.ErrInvalidDelay,
			fmt.Sprintf(`redisdelay: invalid delay metadata: message "m" to topic %q: due in more than 292 years, beyond the limit of 100 years (PublisherConfig.MaxDelay is 24h0m0s): use a nearer delay.Until or a shorter delay.For`, env.topic)},
		{"largest duration alone", env.topic, []*message.Message{good, withMeta("m", delay.DelayedForKey, "2562047h47m16.854775807s")}, redisdelay.ErrInvalidDelay,
			fmt.Sprintf(`redisdelay: invalid delay metadata: message "m" to topic %q: due in more than 292 years, beyond the limit of 100 years (PublisherConfig.MaxDelay is 24h0m0s): use a nearer delay.Until or a shorter delay.For`, env.topic)},
		{"delay of 101 years", env.topic, []*message.Message{good, withMeta("m", delay.DelayedForKey, "884760h0m0s")}, redisdelay.ErrInvalidDelay,
			fmt.Sprintf(`redisdelay: invalid delay metadata: message "m" to topic %q: due in 884760h0m0s, beyond the limit of 100 years (PublisherConfig.MaxDelay is 24h0m0s): use a nearer delay.Until or a shorter delay.For`, env.topic)},
		{"malformed handler timeout", env.topic, []*message.Message{good, withMeta("m", redisdelay.HandlerTimeoutKey, "soon")}, redisdelay.ErrInvalidMessage,
			fmt.Sprintf(`redisdelay: invalid message: message "m" to topic %q: metadata _redisdelay_handler_timeout="soon" is not a duration of at least 1ms such as "90s", nor "none" (set it with redisdelay.SetHandlerTimeout)`, env.topic)},
		{"handler timeout below 1ms", env.topic, []*message.Message{good, withMeta("m", redisdelay.HandlerTimeoutKey, "0s")}, redisdelay.ErrInvalidMessage,
			fmt.Sprintf(`redisdelay: invalid message: message "m" to topic %q: metadata _redisdelay_handler_timeout="0s" is not a duration of at least 1ms such as "90s", nor "none" (set it with redisdelay.SetHandlerTimeout)`, env.topic)},
		{"payload over MaxMessageSize", env.topic, []*message.Message{good, message.NewMessage("m", make([]byte, 200))}, redisdelay.ErrMessageTooLarge,
			fmt.Sprintf(`redisdelay: message too large: message "m" to topic %q is 204 bytes encoded (UUID, metadata and payload), over PublisherConfig.MaxMessageSize (200): store large payloads elsewhere and publish a reference`, env.topic)},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := pub.Publish(c.topic, c.msgs...)
			require.ErrorIs(t, err, c.is)
			require.EqualError(t, err, c.want)
			require.Equal(t, before, topicState(t, env.topic), "a rejected Publish changed the topic")
		})
	}

	ctx := context.Background()
	t.Run("cancel with an empty UUID", func(t *testing.T) {
		_, err := pub.Cancel(ctx, env.topic, "")
		require.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
		require.EqualError(t, err, fmt.Sprintf(`redisdelay: invalid message: cancel in topic %q: the message UUID is empty`, env.topic))
	})
	t.Run("cancel in an invalid topic", func(t *testing.T) {
		_, err := pub.Cancel(ctx, "", bystander.UUID)
		require.EqualError(t, err, `redisdelay: invalid topic: topic is empty`)
	})
	require.Equal(t, before, topicState(t, env.topic))

	// The Publisher still works after all that, and the bystander is intact.
	sub := env.subscriber(t, "g")
	defer sub.Close()
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, pub.Publish(env.topic, good))
	got := receive(t, ch, 2*time.Second)
	assert.Equal(t, "fine", string(got.Payload))
	got.Ack()
	cancelled, err := pub.Cancel(ctx, env.topic, bystander.UUID)
	require.NoError(t, err)
	assert.True(t, cancelled, "the bystander was still waiting")
}

// Inputs that look wrong but have a defined, documented meaning.
func TestBadInput_OddPublishInputAccepted(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	defer sub.Close()
	ch := subscribe(t, sub, env.topic)

	require.NoError(t, env.pub.Publish(env.topic), "no messages: a no-op")

	// delay.Until a past time writes a negative duration: due now.
	past := message.NewMessage(watermill.NewUUID(), []byte("past"))
	delay.Message(past, delay.Until(time.Now().Add(-time.Hour)))
	require.True(t, strings.HasPrefix(past.Metadata.Get(delay.DelayedForKey), "-"))
	require.NoError(t, env.pub.Publish(env.topic, past))
	got := receive(t, ch, time.Second)
	assert.Equal(t, "past", string(got.Payload))
	got.Ack()

	// The attempt key is the subscriber's to set: a forwarded message
	// (published again as received, e.g. to a poison queue) starts over at 1.
	forwarded := message.NewMessage(watermill.NewUUID(), []byte("forwarded"))
	forwarded.Metadata.Set(redisdelay.AttemptKey, "7")
	require.NoError(t, env.pub.Publish(env.topic, forwarded))
	got = receive(t, ch, time.Second)
	assert.Equal(t, "1", got.Metadata.Get(redisdelay.AttemptKey))
	got.Ack()
}

func TestBadInput_Subscribe(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	defer sub.Close()
	_, err := sub.Subscribe(context.Background(), "a b")
	require.EqualError(t, err, `redisdelay: invalid topic: topic "a b" contains " " at byte 1: braces, spaces and control characters are not allowed (they would break the Redis key layout)`)
	require.ErrorIs(t, sub.SubscribeInitialize(""), redisdelay.ErrInvalidTopic)
}

// Every config a user can get wrong, with the exact error.
func TestBadInput_Config(t *testing.T) {
	t.Parallel()
	env := setup(t)
	group := func(c redisdelay.SubscriberConfig) redisdelay.SubscriberConfig {
		c.Client, c.ConsumerGroup = env.client, "g"
		return c
	}
	newSub := func(c redisdelay.SubscriberConfig) func() error {
		return func() error { _, err := redisdelay.NewSubscriber(c, nil); return err }
	}
	newPub := func(c redisdelay.PublisherConfig) func() error {
		return func() error { _, err := redisdelay.NewPublisher(c, nil); return err }
	}
	newMgr := func(c redisdelay.ManagerConfig) func() error {
		return func() error { _, err := redisdelay.NewManager(c, nil); return err }
	}
	newRq := func(c redisdelay.DelayedRequeuerConfig) func() error {
		return func() error { _, err := redisdelay.NewDelayedRequeuer(c, nil); return err }
	}
	for _, c := range []struct {
		name string
		new  func() error
		want string
	}{
		{"publisher without client", newPub(redisdelay.PublisherConfig{}),
			`redisdelay: PublisherConfig.Client is nil: pass a redis.UniversalClient, e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})`},
		{"brace in key prefix", newPub(redisdelay.PublisherConfig{Client: env.client, KeyPrefix: "a{b"}),
			`redisdelay: invalid name: PublisherConfig.KeyPrefix "a{b" contains "{" at byte 1: braces, spaces and control characters are not allowed (they would break the Redis key layout)`},
		{"negative publish timeout", newPub(redisdelay.PublisherConfig{Client: env.client, PublishTimeout: -time.Second}),
			`redisdelay: PublisherConfig.PublishTimeout is -1s: use at least 1ms (0 means the default)`},
		{"negative max delay", newPub(redisdelay.PublisherConfig{Client: env.client, MaxDelay: -time.Hour}),
			`redisdelay: PublisherConfig.MaxDelay is -1h0m0s: use at least 1ms (0 means the default)`},
		{"max delay beyond 100 years", newPub(redisdelay.PublisherConfig{Client: env.client, MaxDelay: 101 * 365 * 24 * time.Hour}),
			`redisdelay: PublisherConfig.MaxDelay is 884760h0m0s: use at most 100 years`},
		{"negative max message size", newPub(redisdelay.PublisherConfig{Client: env.client, MaxMessageSize: -1}),
			`redisdelay: PublisherConfig.MaxMessageSize is -1: use 1 to 536870912 bytes (0 means the default, 1 MiB)`},

		{"subscriber without client", newSub(redisdelay.SubscriberConfig{ConsumerGroup: "g"}),
			`redisdelay: SubscriberConfig.Client is nil: pass a redis.UniversalClient, e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})`},
		{"no consumer group", newSub(redisdelay.SubscriberConfig{Client: env.client}),
			`redisdelay: SubscriberConfig.ConsumerGroup is empty: name the group this service consumes in (subscribers of one group share its messages; each group receives all of them)`},
		{"space in consumer group", newSub(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: "a b"}),
			`redisdelay: invalid name: SubscriberConfig.ConsumerGroup "a b" contains " " at byte 1: braces, spaces and control characters are not allowed (they would break the Redis key layout)`},
		{"brace in consumer name", newSub(group(redisdelay.SubscriberConfig{Consumer: "c}"})),
			`redisdelay: invalid name: SubscriberConfig.Consumer "c}" contains "}" at byte 1: braces, spaces and control characters are not allowed (they would break the Redis key layout)`},
		{"negative batch size", newSub(group(redisdelay.SubscriberConfig{BatchSize: -1})),
			`redisdelay: SubscriberConfig.BatchSize is -1: use 1 to 10000 (0 means the default, 32)`},
		{"batch size too large", newSub(group(redisdelay.SubscriberConfig{BatchSize: 10001})),
			`redisdelay: SubscriberConfig.BatchSize is 10001: use 1 to 10000 (0 means the default, 32)`},
		{"negative block time", newSub(group(redisdelay.SubscriberConfig{BlockTime: -time.Second})),
			`redisdelay: SubscriberConfig.BlockTime is -1s: use at least 1ms (0 means the default)`},
		{"check interval below 1ms", newSub(group(redisdelay.SubscriberConfig{CheckInterval: time.Microsecond})),
			`redisdelay: SubscriberConfig.CheckInterval is 1µs: use at least 1ms (0 means the default)`},
		{"visibility timeout below 100ms", newSub(group(redisdelay.SubscriberConfig{VisibilityTimeout: 10 * time.Millisecond})),
			`redisdelay: SubscriberConfig.VisibilityTimeout is 10ms: use at least 100ms (0 means the default)`},
		{"negative consumer idle timeout", newSub(group(redisdelay.SubscriberConfig{ConsumerIdleTimeout: -time.Minute})),
			`redisdelay: SubscriberConfig.ConsumerIdleTimeout is -1m0s: use at least 1s (0 means the default)`},
		{"negative close timeout", newSub(group(redisdelay.SubscriberConfig{CloseTimeout: -time.Second})),
			`redisdelay: SubscriberConfig.CloseTimeout is -1s: use at least 1ms (0 means the default)`},
		{"handler timeout below 1ms", newSub(group(redisdelay.SubscriberConfig{HandlerTimeout: time.Microsecond})),
			`redisdelay: SubscriberConfig.HandlerTimeout is 1µs: use at least 1ms (0 means the default, 30m0s; negative: no bound)`},

		{"manager without client", newMgr(redisdelay.ManagerConfig{}),
			`redisdelay: ManagerConfig.Client is nil: pass a redis.UniversalClient, e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})`},
		{"invalid topic in manager", newMgr(redisdelay.ManagerConfig{Client: env.client, Topics: []string{"ok", ""}}),
			`redisdelay: invalid topic: ManagerConfig.Topics[1] is empty`},
		{"manager batch too large", newMgr(redisdelay.ManagerConfig{Client: env.client, BatchSize: 5000}),
			`redisdelay: ManagerConfig.BatchSize is 5000: use 1 to 4096 (0 means the default, 256)`},
		{"negative check interval", newMgr(redisdelay.ManagerConfig{Client: env.client, CheckInterval: -time.Second}),
			`redisdelay: ManagerConfig.CheckInterval is -1s: use at least 1ms (0 means the default)`},
		{"negative trim interval", newMgr(redisdelay.ManagerConfig{Client: env.client, TrimInterval: -1}),
			`redisdelay: ManagerConfig.TrimInterval is -1ns: use at least 1ms (0 means the default)`},
		{"retention below 1s", newMgr(redisdelay.ManagerConfig{Client: env.client, Retention: 500 * time.Millisecond}),
			`redisdelay: ManagerConfig.Retention is 500ms: use at least 1s, or 0 to keep messages until a consumer group reads them`},

		{"requeuer without client", newRq(redisdelay.DelayedRequeuerConfig{}),
			`redisdelay: DelayedRequeuerConfig.Client is nil: pass a redis.UniversalClient, e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})`},
		{"brace in requeuer key prefix", newRq(redisdelay.DelayedRequeuerConfig{Client: env.client, KeyPrefix: "a{b"}),
			`redisdelay: invalid name: DelayedRequeuerConfig.KeyPrefix "a{b" contains "{" at byte 1: braces, spaces and control characters are not allowed (they would break the Redis key layout)`},
		{"space in requeue topic", newRq(redisdelay.DelayedRequeuerConfig{Client: env.client, RequeueTopic: "re queue"}),
			`redisdelay: invalid topic: DelayedRequeuerConfig.RequeueTopic "re queue" contains " " at byte 2: braces, spaces and control characters are not allowed (they would break the Redis key layout)`},
		{"brace in requeuer consumer group", newRq(redisdelay.DelayedRequeuerConfig{Client: env.client, ConsumerGroup: "g}"}),
			`redisdelay: invalid name: DelayedRequeuerConfig.ConsumerGroup "g}" contains "}" at byte 1: braces, spaces and control characters are not allowed (they would break the Redis key layout)`},
		{"requeue without initial interval", newRq(redisdelay.DelayedRequeuerConfig{Client: env.client, DelayOnError: &middleware.DelayOnError{MaxInterval: time.Minute, Multiplier: 2}}),
			`redisdelay: DelayedRequeuerConfig.DelayOnError.InitialInterval is 0s: the first retry of a failed message would come at once; use at least 1ms (a nil DelayOnError: 10s doubling up to 10m0s)`},
		{"requeue without max interval", newRq(redisdelay.DelayedRequeuerConfig{Client: env.client, DelayOnError: &middleware.DelayOnError{InitialInterval: time.Second, Multiplier: 2}}),
			`redisdelay: DelayedRequeuerConfig.DelayOnError.MaxInterval is 0s: a failed message would be requeued at once from its second failure on, again and again; use at least 1ms (a nil DelayOnError: 10s doubling up to 10m0s)`},
		{"requeue multiplier below 1", newRq(redisdelay.DelayedRequeuerConfig{Client: env.client, DelayOnError: &middleware.DelayOnError{InitialInterval: time.Second, MaxInterval: time.Minute, Multiplier: 0.5}}),
			`redisdelay: DelayedRequeuerConfig.DelayOnError.Multiplier is 0.5: middleware.DelayOnError truncates it to a whole number (0), so use a whole number of at least 1 (1: the same delay every time)`},
		{"fractional requeue multiplier", newRq(redisdelay.DelayedRequeuerConfig{Client: env.client, DelayOnError: &middleware.DelayOnError{InitialInterval: time.Second, MaxInterval: time.Minute, Multiplier: 1.5}}),
			`redisdelay: DelayedRequeuerConfig.DelayOnError.Multiplier is 1.5: middleware.DelayOnError truncates it to a whole number (1), so use a whole number of at least 1 (1: the same delay every time)`},

		{"inspector without client", func() error { _, err := redisdelay.NewInspector(redisdelay.InspectorConfig{}); return err },
			`redisdelay: InspectorConfig.Client is nil: pass a redis.UniversalClient, e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.new()
			require.EqualError(t, err, c.want)
			if strings.HasPrefix(c.want, "redisdelay: invalid name: ") {
				require.ErrorIs(t, err, redisdelay.ErrInvalidName)
			}
			if strings.HasPrefix(c.want, "redisdelay: invalid topic: ") {
				require.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
			}
		})
	}
}

// delayed9999 is a message delayed with Watermill's own delay.Until of a
// far-off date: its duration saturates at about 292 years.
func delayed9999(uuid string) *message.Message {
	m := message.NewMessage(uuid, nil)
	delay.Message(m, delay.Until(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)))
	return m
}

// An error that passes through several layers of the package names the
// package once ("redisdelay: publish ...: register topic ...", not
// "redisdelay: publish ...: redisdelay: register topic ..."), and keeps
// its sentinel reachable.
func TestBadInput_ErrorTextHasThePrefixOnce(t *testing.T) {
	env := setup(t)
	require.NoError(t, newPartitionedPublisher(t, env.client, 4).Publish(env.topic, newMessage("x")))
	mismatch := newPartitionedPublisher(t, env.client, 2).Publish(env.topic, newMessage("y"))
	require.ErrorIs(t, mismatch, redisdelay.ErrPartitionMismatch)

	// Nothing listens on port 1: registering the topic fails inside Publish.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: down, PublishTimeout: time.Second}, logger)
	require.NoError(t, err)
	unreachable := pub.Publish(env.topic, newMessage("z"))
	require.ErrorContains(t, unreachable, "register topic")

	insp := newInspector(t, down)
	_, stats := insp.Stats(context.Background(), env.topic)
	require.Error(t, stats)

	for _, err := range []error{mismatch, unreachable, stats} {
		assert.Equal(t, 1, strings.Count(err.Error(), "redisdelay:"), err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), "redisdelay: "), err.Error())
		t.Log(err)
	}
}
