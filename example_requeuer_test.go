package redisdelay_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/requeuer"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/redisdelay/watermill-redisdelay"
)

// A handler whose failures are retried later, without limit, as with
// watermill-sql's NewPostgreSQLDelayedRequeuer: each failed message waits
// on the requeue topic (100 ms here, doubling; 10 s doubling to 10 minutes
// by default) and comes back to its topic. The Subscriber's own MaxAttempts
// never applies, as each requeue is a new message to it.
func ExampleNewDelayedRequeuer() {
	client := exampleClient() // e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	topic := "payments-" + watermill.NewShortUUID()

	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	if err != nil {
		panic(err)
	}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "payments"}, nil)
	if err != nil {
		panic(err)
	}
	rq, err := redisdelay.NewDelayedRequeuer(redisdelay.DelayedRequeuerConfig{
		Client:       client,
		DelayOnError: &middleware.DelayOnError{InitialInterval: 100 * time.Millisecond, MaxInterval: time.Minute, Multiplier: 2},
	}, nil)
	if err != nil {
		panic(err)
	}
	defer rq.Close() // after the Router: its Middleware publishes to the requeue topic

	router, err := message.NewRouter(message.RouterConfig{}, nil)
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(rq.Middleware()...)
	done := make(chan struct{})
	router.AddNoPublisherHandler("charge", topic, sub, func(msg *message.Message) error {
		retries := msg.Metadata.Get(requeuer.RetriesKey)
		if retries != "2" {
			fmt.Printf("requeued %q times: the bank is down\n", retries)
			return errors.New("bank unavailable")
		}
		fmt.Printf("requeued %q times: charged %s\n", retries, msg.Payload)
		close(done)
		return nil
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = rq.Run(ctx) }()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	<-rq.Running()

	if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("order 42"))); err != nil {
		panic(err)
	}
	<-done
	_ = router.Close()
	// Output:
	// requeued "" times: the bank is down
	// requeued "1" times: the bank is down
	// requeued "2" times: charged order 42
}
