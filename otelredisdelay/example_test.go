package otelredisdelay_test

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/otelredisdelay"
)

// The application installs its SDK and exporter (otel.SetTracerProvider);
// the zero Tracing uses that global provider and W3C Trace Context.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	logger := watermill.NopLogger{}
	tracing := otelredisdelay.Tracing{}

	rawPub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, logger)
	if err != nil {
		panic(err)
	}
	pub, err := tracing.PublisherDecorator()(rawPub)
	if err != nil {
		panic(err)
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte("remind"))
	msg.SetContext(context.Background()) // the request's context, with its span
	delay.Message(msg, delay.For(24*time.Hour))
	_ = pub.Publish("reminders", msg) // a producer span, its context in msg.Metadata["traceparent"]

	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "mailer"}, logger)
	if err != nil {
		panic(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(tracing.Middleware) // a consumer span linked to the producer span
	router.AddConsumerHandler("send-reminder", "reminders", sub, func(msg *message.Message) error {
		return nil // msg.Context() holds the consumer span
	})
	_ = router.Run(context.Background())
}
