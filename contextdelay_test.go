package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// A delay put in a message's context with delay.WithContext is honoured
// without delay.NewPublisher around the Publisher, and leaves the message's
// delay metadata exactly as delay.NewPublisher would: each case publishes
// one message through the Publisher and a copy through Watermill's own
// delay publisher, and compares both delay keys.
func TestContextDelay_MetadataAsDelayNewPublisher(t *testing.T) {
	t.Parallel()
	env := setup(t)
	var captured *message.Message
	capture, err := delay.NewPublisher(capturePublisher(func(m *message.Message) { captured = m }), delay.PublisherConfig{AllowNoDelay: true})
	require.NoError(t, err)

	inCtx := delay.For(time.Hour)
	for _, c := range []struct {
		name     string
		ctxDelay *delay.Delay // nil: none in the context
		forV     string       // metadata set before publishing
		untilV   string
		want     string // the resulting _watermill_delayed_for
	}{
		{name: "no delay anywhere: untouched", want: ""},
		{name: "context only: written from the context", ctxDelay: &inCtx, want: "1h0m0s"},
		{name: "metadata duration wins over the context", ctxDelay: &inCtx, forV: "2m0s", untilV: time.Now().Add(2 * time.Minute).UTC().Format(time.RFC3339), want: "2m0s"},
		{name: "a duration alone wins too", ctxDelay: &inCtx, forV: "3m0s", want: "3m0s"},
		// delay.NewPublisher looks at the duration key only: an until key
		// alone is overwritten by the context's delay.
		{name: "until alone: the context's delay replaces it", ctxDelay: &inCtx, untilV: time.Now().Add(time.Minute).UTC().Format(time.RFC3339), want: "1h0m0s"},
		{name: "zero Delay in the context: due now", ctxDelay: &delay.Delay{}, want: "0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			build := func() *message.Message {
				msg := message.NewMessage(watermill.NewUUID(), []byte(c.name))
				if c.forV != "" {
					msg.Metadata.Set(delay.DelayedForKey, c.forV)
				}
				if c.untilV != "" {
					msg.Metadata.Set(delay.DelayedUntilKey, c.untilV)
				}
				if c.ctxDelay != nil {
					msg.SetContext(delay.WithContext(context.Background(), *c.ctxDelay))
				}
				return msg
			}
			ours, theirs := build(), build()
			require.NoError(t, env.pub.Publish(env.topic, ours))
			require.NoError(t, capture.Publish(env.topic, theirs))
			for _, k := range []string{delay.DelayedForKey, delay.DelayedUntilKey} {
				assert.Equal(t, captured.Metadata.Get(k), ours.Metadata.Get(k), k)
			}
			assert.Equal(t, c.want, ours.Metadata.Get(delay.DelayedForKey))
		})
	}
}

type capturePublisher func(*message.Message)

func (c capturePublisher) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		c(m)
	}
	return nil
}
func (capturePublisher) Close() error { return nil }

// A message delayed by its context waits its delay: an immediate message
// published after it arrives first, and it is not delivered early. One
// whose metadata says otherwise keeps its metadata's delay.
func TestContextDelay_Publish(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	ch := subscribe(t, sub, env.topic)

	const d = 1500 * time.Millisecond
	start := time.Now()
	later := newMessage("context")
	later.SetContext(delay.WithContext(context.Background(), delay.For(d)))
	// The metadata's 200 ms win over the context's hour.
	own := delayed(delay.For(200*time.Millisecond), "metadata")
	own.SetContext(delay.WithContext(context.Background(), delay.For(time.Hour)))
	require.NoError(t, env.pub.Publish(env.topic, later))
	require.NoError(t, env.pub.Publish(env.topic, own))
	require.NoError(t, env.pub.Publish(env.topic, newMessage("now")))

	for _, want := range []string{"now", "metadata", "context"} {
		msg := receive(t, ch, 3*d)
		assert.Equal(t, want, string(msg.Payload))
		msg.Ack()
	}
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, d, "the context's delay was not waited")
	t.Logf("delayed by its context (%s): delivered after %s", d, took.Round(time.Millisecond))
}

// Watermill's _examples/real-world-examples/delayed-messages with this
// Publisher in place of watermill-sql's delayed one, and nothing else
// changed: an EventBus whose OnPublish delays every event with
// delay.WithContext, and an event handler that sends a command through a
// CommandBus with a delayed context. Both arrive after their delays.
func TestContextDelay_CQRS(t *testing.T) {
	t.Parallel()
	const eventDelay, commandDelay = 800 * time.Millisecond, 1200 * time.Millisecond
	env := setup(t)
	prefix := env.topic + "."
	router := newRouter(t)

	type orderPlaced struct{ OrderID string }
	type sendFeedbackForm struct{ OrderID string }
	eventBus, err := cqrs.NewEventBusWithConfig(env.pub, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) { return prefix + p.EventName, nil },
		OnPublish: func(p cqrs.OnEventSendParams) error {
			p.Message.SetContext(delay.WithContext(p.Message.Context(), delay.For(eventDelay)))
			return nil
		},
		Marshaler: cqrs.JSONMarshaler{},
		Logger:    logger,
	})
	require.NoError(t, err)
	commandBus, err := cqrs.NewCommandBusWithConfig(env.pub, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return prefix + p.CommandName, nil },
		Marshaler:            cqrs.JSONMarshaler{},
		Logger:               logger,
	})
	require.NoError(t, err)

	newSub := func(handler string) (message.Subscriber, error) {
		return redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: env.client, ConsumerGroup: handler}, logger)
	}
	eventProcessor, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return prefix + p.EventName, nil
		},
		SubscriberConstructor: func(p cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return newSub(p.HandlerName)
		},
		Marshaler: cqrs.JSONMarshaler{},
		Logger:    logger,
	})
	require.NoError(t, err)
	commandProcessor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return prefix + p.CommandName, nil
		},
		SubscriberConstructor: func(p cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return newSub(p.HandlerName)
		},
		Marshaler: cqrs.JSONMarshaler{},
		Logger:    logger,
	})
	require.NoError(t, err)

	events, commands := make(chan time.Time, 1), make(chan time.Time, 1)
	require.NoError(t, eventProcessor.AddHandlers(cqrs.NewEventHandler("OnOrderPlaced",
		func(ctx context.Context, e *orderPlaced) error {
			events <- time.Now() // before Send: the command's delay is measured from here
			return commandBus.Send(delay.WithContext(ctx, delay.For(commandDelay)), &sendFeedbackForm{OrderID: e.OrderID})
		})))
	require.NoError(t, commandProcessor.AddHandlers(cqrs.NewCommandHandler("OnSendFeedbackForm",
		func(ctx context.Context, c *sendFeedbackForm) error {
			commands <- time.Now()
			return nil
		})))
	runRouter(t, router)

	published := time.Now()
	require.NoError(t, eventBus.Publish(context.Background(), &orderPlaced{OrderID: "42"}))
	handled := receiveTime(t, events, eventDelay+5*time.Second)
	assert.GreaterOrEqual(t, handled.Sub(published), eventDelay, "event delayed in OnPublish arrived early")
	done := receiveTime(t, commands, commandDelay+5*time.Second)
	assert.GreaterOrEqual(t, done.Sub(handled), commandDelay, "command sent with a delayed context arrived early")
	t.Logf("event: delay %s, handled after %s; command: delay %s, handled after %s",
		eventDelay, handled.Sub(published).Round(time.Millisecond), commandDelay, done.Sub(handled).Round(time.Millisecond))
}

// A handler's produced messages are published by the Router, which wraps
// their contexts in its own values: a delay in a produced message's
// context survives that and is honoured, beside an undelayed sibling.
func TestContextDelay_RouterProducedMessages(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	out := topic()
	const d = time.Second
	router := newRouter(t)
	producedAt := make(chan time.Time, 1)
	router.AddHandler("produce", env.topic, sub, out, env.pub, func(msg *message.Message) ([]*message.Message, error) {
		later := newMessage("later")
		later.SetContext(delay.WithContext(msg.Context(), delay.For(d)))
		producedAt <- time.Now()
		return []*message.Message{later, newMessage("now")}, nil
	})
	runRouter(t, router)
	ch := subscribe(t, sub, out)

	require.NoError(t, env.pub.Publish(env.topic, newMessage("in")))
	produced := receiveTime(t, producedAt, 5*time.Second)
	first := receive(t, ch, 5*time.Second)
	first.Ack()
	assert.Equal(t, "now", string(first.Payload))
	second := receive(t, ch, d+5*time.Second)
	second.Ack()
	assert.Equal(t, "later", string(second.Payload))
	took := time.Since(produced)
	assert.GreaterOrEqual(t, took, d, "produced message delayed by its context arrived early")
	t.Logf("produced with a %s context delay: delivered after %s", d, took.Round(time.Millisecond))
}
