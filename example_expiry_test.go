package redisdelay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay"
)

// A one-time code is useless after five minutes: if it cannot be sent by
// then, it goes to the dead letters instead of reaching the user late.
func ExampleSetExpiresAt() {
	client := exampleClient() // e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	if err != nil {
		panic(err)
	}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "sms", BlockTime: 100 * time.Millisecond}, nil)
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	topic := "codes-" + watermill.NewShortUUID()
	if err := sub.SubscribeInitialize(topic); err != nil {
		panic(err)
	}

	msg := message.NewMessage(watermill.NewUUID(), []byte("your code is 123456"))
	redisdelay.SetExpiresAt(msg, time.Now().Add(-time.Second)) // already too late, for the example
	if err := pub.Publish(topic, msg); err != nil {
		panic(err)
	}
	if _, err := sub.Subscribe(context.Background(), topic); err != nil {
		panic(err)
	}

	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	if err != nil {
		panic(err)
	}
	for {
		dead, err := insp.DeadLetters(context.Background(), topic, "sms", "", 10)
		if err != nil {
			panic(err)
		}
		if len(dead) > 0 {
			fmt.Printf("%s: attempts %d, reason starts %q\n", dead[0].Message.Payload, dead[0].Attempts, dead[0].Reason[:8])
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// your code is 123456: attempts 0, reason starts "expired:"
}

// A handler that cannot do its work yet puts the message back for a while;
// waiting is not a failure, so no attempt is spent.
func ExampleSnooze() {
	handler := func(msg *message.Message) error {
		if !paymentSettled(msg) {
			return redisdelay.Snooze(msg, 30*time.Second)
		}
		// ... ship the order
		return nil
	}
	_ = handler // router.AddNoPublisherHandler("ship", "orders.paid", sub, handler)
}

func paymentSettled(*message.Message) bool { return false }
