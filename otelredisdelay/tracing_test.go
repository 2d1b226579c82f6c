package otelredisdelay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/otelredisdelay"
)

func tracingSetup(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder, otelredisdelay.Tracing) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr, otelredisdelay.Tracing{TracerProvider: tp}
}

// tracingRouter runs a Router with the given middleware over a subscriber
// of group "g" and calls handle for each message.
func tracingRouter(t *testing.T, topic string, sub message.Subscriber, handle func(*message.Message) error, mw ...message.HandlerMiddleware) {
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	router.AddMiddleware(mw...)
	router.AddConsumerHandler("traced-handler", topic, sub, handle)
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()
	t.Cleanup(func() { _ = router.Close() })
}

func endedSpans(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func parseSpanTime(t *testing.T, v attribute.Value) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, v.AsString())
	require.NoError(t, err, "%q", v.AsString())
	return ts
}

// A delayed message published through the decorator in a request's span is
// handled, after its delay, in a consumer span that LINKS to the producer
// span (a root of its own trace, not its child), with the scheduled and
// actual due times, lateness, attempt, topic and UUID; a nacked attempt
// records the error, and the retry links to the same producer span.
func TestTracing_ConsumerSpanLinksToPublisher(t *testing.T) {
	t.Parallel()
	tp, sr, tracing := tracingSetup(t)
	topic := topic()
	rawPub, sub := newPubSub(t, "g", func(c *redisdelay.SubscriberConfig) {
		c.RetryDelay = func(int) time.Duration { return 0 }
	})
	pub, err := tracing.PublisherDecorator()(rawPub)
	require.NoError(t, err)

	type delivery struct {
		md      message.Metadata
		spanCtx trace.SpanContext
	}
	var mu sync.Mutex
	var got []delivery
	tracingRouter(t, topic, sub, func(msg *message.Message) error {
		mu.Lock()
		md := message.Metadata{}
		for k, v := range msg.Metadata {
			md[k] = v
		}
		got = append(got, delivery{md, trace.SpanContextFromContext(msg.Context())})
		n := len(got)
		mu.Unlock()
		if n == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}, tracing.Middleware)

	ctx, request := tp.Tracer("test").Start(context.Background(), "request")
	msg := delayed(delay.For(1300*time.Millisecond), "traced")
	msg.SetContext(ctx)
	publishedAt := time.Now()
	require.NoError(t, pub.Publish(topic, msg))
	request.End()

	require.Eventually(t, func() bool { return len(endedSpans(sr, "process "+topic)) == 2 }, 5*time.Second, 10*time.Millisecond)
	producers := endedSpans(sr, "send "+topic)
	require.Len(t, producers, 1)
	producer := producers[0]
	assert.Equal(t, trace.SpanKindProducer, producer.SpanKind())
	assert.Equal(t, request.SpanContext().SpanID(), producer.Parent().SpanID(), "the producer span is a child of the publishing request")
	scheduled := parseSpanTime(t, spanAttrs(producer)[otelredisdelay.ScheduledAtAttr])
	// Generous: a loaded machine may take a while between publishedAt and
	// the moment Publish reads the clock.
	assert.WithinDuration(t, publishedAt.Add(1300*time.Millisecond), scheduled, 500*time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2)
	assert.Equal(t, "00-"+producer.SpanContext().TraceID().String()+"-"+producer.SpanContext().SpanID().String()+"-01",
		got[0].md.Get("traceparent"), "W3C traceparent in the metadata")

	consumers := endedSpans(sr, "process "+topic)
	for i, c := range consumers {
		assert.Equal(t, trace.SpanKindConsumer, c.SpanKind())
		require.Len(t, c.Links(), 1, "attempt %d", i+1)
		assert.Equal(t, producer.SpanContext().TraceID(), c.Links()[0].SpanContext.TraceID())
		assert.Equal(t, producer.SpanContext().SpanID(), c.Links()[0].SpanContext.SpanID())
		assert.False(t, c.Parent().IsValid(), "a link, not a parent: the handling starts a trace of its own")
		assert.NotEqual(t, producer.SpanContext().TraceID(), c.SpanContext().TraceID())
		assert.Equal(t, got[i].spanCtx.SpanID(), c.SpanContext().SpanID(), "the handler runs in the consumer span")

		a := spanAttrs(c)
		assert.Equal(t, topic, a["messaging.destination.name"].AsString())
		assert.Equal(t, msg.UUID, a["messaging.message.id"].AsString())
		assert.Equal(t, "traced-handler", a["messaging.consumer.handler"].AsString())
		assert.EqualValues(t, i+1, a[otelredisdelay.AttemptAttr].AsInt64())
		assert.Equal(t, scheduled, parseSpanTime(t, a[otelredisdelay.ScheduledAtAttr]), "the scheduled time, to the millisecond")
		delivered := parseSpanTime(t, a[otelredisdelay.DeliveredAtAttr])
		assert.False(t, delivered.Before(scheduled), "delivered %s before due %s", delivered, scheduled)
		assert.Equal(t, delivered.Sub(scheduled).Milliseconds(), a[otelredisdelay.LatenessAttr].AsInt64())
		t.Logf("attempt %d: lateness %d ms", i+1, a[otelredisdelay.LatenessAttr].AsInt64())
	}
	assert.Less(t, spanAttrs(consumers[0])[otelredisdelay.LatenessAttr].AsInt64(), int64(1000))
	assert.Equal(t, codes.Error, consumers[0].Status().Code)
	assert.Equal(t, "first attempt fails", consumers[0].Status().Description)
	assert.Equal(t, codes.Unset, consumers[1].Status().Code)
}

// Interoperability through the metadata, both ways, with the usual Watermill
// tracing code (propagation.TraceContext over propagation.MapCarrier):
//   - a message whose publisher injected "traceparent" itself (no
//     decorator) is linked to that span, its scheduled time taken from the
//     delay metadata (to the second);
//   - a middleware before ours that extracts "traceparent" as its parent
//     sees our producer span, and our consumer span is a child of its span.
func TestTracing_InteroperatesThroughTraceparent(t *testing.T) {
	t.Parallel()
	tp, sr, tracing := tracingSetup(t)
	topic := topic()
	rawPub, sub := newPubSub(t, "g")
	pub, err := tracing.PublisherDecorator()(rawPub)
	require.NoError(t, err)
	w3c := propagation.TraceContext{}
	userTracer := tp.Tracer("user-middleware")
	theirs := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := w3c.Extract(msg.Context(), propagation.MapCarrier(msg.Metadata))
			ctx, span := userTracer.Start(ctx, "their handler span")
			defer span.End()
			msg.SetContext(ctx)
			return h(msg)
		}
	}
	done := make(chan string, 2)
	tracingRouter(t, topic, sub, func(msg *message.Message) error {
		done <- string(msg.Payload)
		return nil
	}, theirs, tracing.Middleware)

	// Published without the decorator, context injected by hand.
	ctx, own := userTracer.Start(context.Background(), "their publish span")
	plain := delayed(delay.For(300*time.Millisecond), "plain")
	w3c.Inject(ctx, propagation.MapCarrier(plain.Metadata))
	require.NoError(t, rawPub.Publish(topic, plain))
	own.End()
	assert.Equal(t, "plain", receiveHandled(t, done, 5*time.Second))

	require.NoError(t, pub.Publish(topic, delayed(delay.For(300*time.Millisecond), "decorated")))
	assert.Equal(t, "decorated", receiveHandled(t, done, 5*time.Second))

	require.Eventually(t, func() bool { return len(endedSpans(sr, "process "+topic)) == 2 }, 5*time.Second, 10*time.Millisecond)
	consumers := endedSpans(sr, "process "+topic)
	theirSpans := endedSpans(sr, "their handler span")
	require.Len(t, theirSpans, 2)
	producer := endedSpans(sr, "send "+topic)
	require.Len(t, producer, 1)

	// 1: their producer span, our link.
	require.Len(t, consumers[0].Links(), 1)
	assert.Equal(t, own.SpanContext().SpanID(), consumers[0].Links()[0].SpanContext.SpanID())
	a := spanAttrs(consumers[0])
	// From the delay metadata, which the Subscriber sets to an instant
	// already reached: not after the delivery, within a second of it here.
	due := parseSpanTime(t, a[otelredisdelay.ScheduledAtAttr])
	delivered := parseSpanTime(t, a[otelredisdelay.DeliveredAtAttr])
	assert.False(t, due.After(delivered), "due %s, delivered %s", due, delivered)
	assert.WithinDuration(t, delivered, due, time.Second)

	// 2: our producer span, their parent and our link; ours is their child.
	assert.Equal(t, producer[0].SpanContext().SpanID(), theirSpans[1].Parent().SpanID(), "their middleware found our traceparent")
	assert.Equal(t, theirSpans[1].SpanContext().SpanID(), consumers[1].Parent().SpanID(), "our span is a child of the span in the message's context")
	require.Len(t, consumers[1].Links(), 1)
	assert.Equal(t, producer[0].SpanContext().SpanID(), consumers[1].Links()[0].SpanContext.SpanID())
}

// A Publish that fails marks its producer spans as failed; a nil publisher
// cannot be decorated.
func TestTracing_PublishErrorAndNilPublisher(t *testing.T) {
	t.Parallel()
	_, sr, tracing := tracingSetup(t)
	rawPub, _ := newPubSub(t, "g")
	pub, err := tracing.PublisherDecorator()(rawPub)
	require.NoError(t, err)
	topic := topic()
	bad := newMessage("bad delay")
	bad.Metadata.Set(delay.DelayedForKey, "soon")
	err = pub.Publish(topic, bad)
	require.ErrorIs(t, err, redisdelay.ErrInvalidDelay)
	spans := endedSpans(sr, "send "+topic)
	require.Len(t, spans, 1)
	assert.Equal(t, codes.Error, spans[0].Status().Code)
	require.Len(t, spans[0].Events(), 1)
	assert.Equal(t, "exception", spans[0].Events()[0].Name)

	_, err = tracing.PublisherDecorator()(nil)
	require.EqualError(t, err, "otelredisdelay: PublisherDecorator got a nil publisher: decorate the Publisher redisdelay.NewPublisher returned")
}

// Without an SDK (the global no-op TracerProvider) nothing is recorded,
// but the trace context of the caller still travels: the consumer side of
// another service with an SDK links to it.
func TestTracing_NoSDKStillPropagates(t *testing.T) {
	t.Parallel()
	tp, _, _ := tracingSetup(t)
	rawPub, _ := newPubSub(t, "g")
	pub, err := otelredisdelay.Tracing{}.PublisherDecorator()(rawPub)
	require.NoError(t, err)
	ctx, span := tp.Tracer("caller").Start(context.Background(), "caller")
	defer span.End()
	msg := newMessage("x")
	msg.SetContext(ctx)
	require.NoError(t, pub.Publish(topic(), msg))
	assert.Contains(t, msg.Metadata.Get("traceparent"), span.SpanContext().SpanID().String())
	assert.NotEmpty(t, msg.Metadata.Get(otelredisdelay.ScheduledAtKey))
}
