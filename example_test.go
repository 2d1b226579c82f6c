package redisdelay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay"
)

// Publish a message due in 300ms and receive it then. The scheduler runs
// inside the Subscriber, so a Publisher and a Subscriber are all it takes.
func Example() {
	client := exampleClient() // e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	if err != nil {
		panic(err)
	}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client:        client,
		ConsumerGroup: "billing",
	}, nil)
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	topic := "orders-" + watermill.NewShortUUID()
	messages, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		panic(err)
	}

	msg := message.NewMessage(watermill.NewUUID(), []byte("close unpaid order 42"))
	delay.Message(msg, delay.For(300*time.Millisecond))
	start := time.Now()
	if err := pub.Publish(topic, msg); err != nil {
		panic(err)
	}

	received := <-messages
	fmt.Printf("%s (attempt %s, not early: %v)\n", received.Payload,
		received.Metadata.Get(redisdelay.AttemptKey), time.Since(start) >= 300*time.Millisecond)
	received.Ack()
	// Output: close unpaid order 42 (attempt 1, not early: true)
}
