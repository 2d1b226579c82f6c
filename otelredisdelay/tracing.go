// Package otelredisdelay carries OpenTelemetry trace context across the
// delay of a redisdelay message: the span that handles a message, maybe
// days after it was published, links to the span that published it, and
// records when the message was due and when it was delivered.
//
// The context travels in the message metadata, written and read by a
// propagation.TextMapPropagator (W3C Trace Context by default: the
// "traceparent" and "tracestate" keys) over message.Metadata as the
// carrier. That is what tracing middleware for Watermill commonly does
// (propagation.MapCarrier(msg.Metadata)), so messages published with it are
// linked here, and a middleware that extracts "traceparent" sees the
// spans of this package's publisher.
//
// It uses the OpenTelemetry API only: spans go to the TracerProvider given
// (by default the global one, a no-op until the application installs an
// SDK), so the application chooses the SDK and exporter. The redisdelay
// package itself does not import OpenTelemetry.
package otelredisdelay

import (
	"context"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisdelay/watermill-redisdelay"
)

// ScheduledAtKey is the metadata key in which the publisher decorator
// records when the message is due (RFC 3339, milliseconds, UTC, by the
// publishing host's clock): the delay metadata itself only keeps whole
// seconds (Watermill's delay.Message truncates its until instant).
const ScheduledAtKey = "_redisdelay_scheduled_at"

// Span attribute keys. The messaging.* keys follow OpenTelemetry's
// semantic conventions for messaging; the redisdelay.* times are RFC 3339
// strings with milliseconds, in UTC.
const (
	// ScheduledAtAttr is when the message was due: ScheduledAtKey, or the
	// delay metadata (to the second) when a publisher without the decorator
	// sent it.
	ScheduledAtAttr = attribute.Key("redisdelay.scheduled_at")
	// DeliveredAtAttr is when the handler received the message.
	DeliveredAtAttr = attribute.Key("redisdelay.delivered_at")
	// LatenessAttr is DeliveredAt minus ScheduledAt, in milliseconds. From
	// the second attempt on it includes the time the earlier attempts and
	// their retry delays took, unless the handler set a new delay.
	LatenessAttr = attribute.Key("redisdelay.lateness_ms")
	// AttemptAttr is the delivery attempt (redisdelay.AttemptKey).
	AttemptAttr = attribute.Key("redisdelay.attempt")
)

const (
	messagingSystem      = attribute.Key("messaging.system")
	messagingDestination = attribute.Key("messaging.destination.name")
	messagingOperation   = attribute.Key("messaging.operation.type")
	messagingMessageID   = attribute.Key("messaging.message.id")
	messagingHandler     = attribute.Key("messaging.consumer.handler") // Watermill's handler name
	systemName           = "redisdelay"
	instrumentationName  = "github.com/redisdelay/watermill-redisdelay/otelredisdelay"
	timeLayout           = "2006-01-02T15:04:05.000Z07:00"
)

// Tracing traces messages through redisdelay. The zero value works: the
// global TracerProvider and W3C Trace Context.
//
//	tracing := otelredisdelay.Tracing{}
//	publisher, _ = tracing.PublisherDecorator()(publisher)
//	router.AddMiddleware(tracing.Middleware)
type Tracing struct {
	// TracerProvider creates the spans (default otel.GetTracerProvider()).
	TracerProvider trace.TracerProvider

	// Propagator writes the trace context into the metadata and reads it
	// back (default propagation.TraceContext{}, W3C "traceparent").
	// Set otel.GetTextMapPropagator() to use the application's global one,
	// or a composite with propagation.Baggage{} to carry baggage too.
	Propagator propagation.TextMapPropagator
}

func (t Tracing) tracer() trace.Tracer {
	tp := t.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(instrumentationName)
}

func (t Tracing) propagator() propagation.TextMapPropagator {
	if t.Propagator == nil {
		return propagation.TraceContext{}
	}
	return t.Propagator
}

// PublisherDecorator returns a decorator whose Publish starts a producer
// span per message, as a child of the span in the message's context (else
// in the first message's, which is the context of a Publish call), records
// in it and in ScheduledAtKey when the message is due, and writes the
// span's context into the metadata (replacing trace context a received
// message carried), before publishing. A span records the error of a
// failed Publish.
func (t Tracing) PublisherDecorator() message.PublisherDecorator {
	return func(pub message.Publisher) (message.Publisher, error) {
		if pub == nil {
			return nil, errNilPublisher
		}
		return &publisher{Publisher: pub, tracing: t}, nil
	}
}

type publisher struct {
	message.Publisher
	tracing Tracing
}

func (p *publisher) Publish(topic string, messages ...*message.Message) error {
	tracer, prop := p.tracing.tracer(), p.tracing.propagator()
	now := time.Now()
	spans := make([]trace.Span, 0, len(messages))
	for _, msg := range messages {
		if msg == nil {
			continue // Publish rejects it
		}
		ctx := msg.Context()
		if !trace.SpanContextFromContext(ctx).IsValid() && messages[0] != nil {
			ctx = messages[0].Context()
		}
		attrs := []attribute.KeyValue{
			messagingSystem.String(systemName),
			messagingDestination.String(topic),
			messagingOperation.String("send"),
			messagingMessageID.String(msg.UUID),
		}
		if due, ok := scheduledAt(msg.Metadata, now); ok {
			s := due.UTC().Format(timeLayout)
			msg.Metadata.Set(ScheduledAtKey, s)
			attrs = append(attrs, ScheduledAtAttr.String(s))
		}
		ctx, span := tracer.Start(ctx, "send "+topic,
			trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
		prop.Inject(ctx, propagation.MapCarrier(msg.Metadata))
		spans = append(spans, span)
	}
	err := p.Publisher.Publish(topic, messages...)
	for _, span := range spans {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	return err
}

// scheduledAt is when a message published now is due, by the rule of the
// redisdelay package (see its "Delay rule"): the earlier of its delay and
// the end of its until second (its until instant when that has a fraction
// or comes alone); now for no delay or a bad one (Publish refuses those).
func scheduledAt(md message.Metadata, now time.Time) (time.Time, bool) {
	due, has := now, false
	if v := md.Get(delay.DelayedForKey); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return now, true
		}
		due, has = now.Add(d), true
	}
	if v := md.Get(delay.DelayedUntilKey); v != "" {
		u, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return now, true
		}
		if has && !hasFraction(v) {
			u = u.Add(time.Second)
		}
		if !has || u.Before(due) {
			due = u
		}
	}
	if due.Before(now) {
		due = now
	}
	return due, true
}

func hasFraction(v string) bool { return len(v) > 19 && (v[19] == '.' || v[19] == ',') }

// Middleware is a Router middleware that handles each message in a
// consumer span linked to the publisher's span (found in the metadata by
// the Propagator). A link, not a parent: the delay may last days, and a
// trace that ends when the request that scheduled the message ends should
// not stretch to include the handling. The span is a child of any span
// already in the message's context (a tracing middleware added before this
// one), records the handler's error, and becomes the handler's context, so
// messages the handler publishes through a decorated publisher are its
// children. Baggage in the metadata (with a Baggage propagator) reaches
// the handler's context.
func (t Tracing) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx, span := t.StartConsumerSpan(msg)
		defer span.End()
		msg.SetContext(ctx)
		produced, err := h(msg)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return produced, err
	}
}

// StartConsumerSpan starts the span Middleware starts, for a message
// received from a Subscriber without a Router. The caller ends the span
// and may use the returned context (the message's, with the span) for its
// work.
func (t Tracing) StartConsumerSpan(msg *message.Message) (context.Context, trace.Span) {
	now := time.Now()
	remote := t.propagator().Extract(context.Background(), propagation.MapCarrier(msg.Metadata))
	ctx := msg.Context()
	if b := baggage.FromContext(remote); b.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, b)
	}
	topic := message.SubscribeTopicFromCtx(ctx)
	attrs := []attribute.KeyValue{
		messagingSystem.String(systemName),
		messagingDestination.String(topic),
		messagingOperation.String("process"),
		messagingMessageID.String(msg.UUID),
		DeliveredAtAttr.String(now.UTC().Format(timeLayout)),
	}
	if h := message.HandlerNameFromCtx(ctx); h != "" {
		attrs = append(attrs, messagingHandler.String(h))
	}
	if a, err := strconv.Atoi(msg.Metadata.Get(redisdelay.AttemptKey)); err == nil {
		attrs = append(attrs, AttemptAttr.Int(a))
	}
	if due, ok := deliveredDue(msg.Metadata); ok {
		attrs = append(attrs, ScheduledAtAttr.String(due.UTC().Format(timeLayout)),
			LatenessAttr.Int64(now.Sub(due).Milliseconds()))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if sc := trace.SpanContextFromContext(remote); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	name := "process"
	if topic != "" {
		name += " " + topic
	}
	return t.tracer().Start(ctx, name, opts...)
}

// deliveredDue is when a delivered message was due: ScheduledAtKey when it
// agrees with the delay metadata, else that metadata, which the Subscriber
// sets to an instant reached when it delivered, at most a second after the
// due instant for Watermill's delay.Message. They disagree when the message was published again, with
// a new delay, by a publisher without the decorator (or a handler nacked
// it with a delay): ScheduledAtKey is from an earlier publish then.
func deliveredDue(md message.Metadata) (time.Time, bool) {
	var until time.Time
	hasUntil := false
	if v := md.Get(delay.DelayedUntilKey); v != "" {
		if u, err := time.Parse(time.RFC3339Nano, v); err == nil {
			until, hasUntil = u, true
		}
	}
	if v := md.Get(ScheduledAtKey); v != "" {
		if s, err := time.Parse(time.RFC3339Nano, v); err == nil {
			// The Subscriber sets the until key to within a second after
			// it (the end of delay.Message's whole second, or the delivery).
			if d := until.Sub(s); !hasUntil || (d > -time.Second && d <= time.Second) {
				return s, true
			}
		}
	}
	return until, hasUntil
}
