// Command orders schedules "close the order if still unpaid" for every new
// order, and cancels that message when the order is paid in time.
//
//	go run ./orders              # starts a redis-server of its own
//	go run ./orders 127.0.0.1:6379
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/_examples/internal/redisconn"
)

const (
	topic       = "orders.close-unpaid"
	paymentTime = 2 * time.Second
)

func main() {
	client, release := redisconn.Client()
	defer release()
	logger := watermill.NewStdLogger(false, false)

	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, logger)
	if err != nil {
		log.Fatal(err)
	}
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "billing"}, logger)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	closes, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		log.Fatal(err)
	}

	start := time.Now()
	orders := map[string]string{} // order -> message UUID of its close-unpaid message
	for _, order := range []string{"order-1", "order-2", "order-3"} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(order))
		delay.Message(msg, delay.For(paymentTime))
		if err := pub.Publish(topic, msg); err != nil {
			log.Fatal(err)
		}
		orders[order] = msg.UUID
		fmt.Printf("%-8s created; closes in %s unless paid\n", order, paymentTime)
	}

	// order-2 is paid in time: recall its close-unpaid message.
	time.Sleep(500 * time.Millisecond)
	cancelled, err := pub.Cancel(context.Background(), topic, orders["order-2"])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order-2  paid after 500ms; close-unpaid message cancelled: %v\n", cancelled)

	for i := 0; i < 2; i++ {
		msg := <-closes
		fmt.Printf("%-8s closed as unpaid after %s\n", msg.Payload, time.Since(start).Round(10*time.Millisecond))
		msg.Ack()
	}
	select {
	case msg := <-closes:
		log.Fatalf("%s closed although it was paid", msg.Payload)
	case <-time.After(time.Second):
		fmt.Println("order-2  stays open: it was paid")
	}
}
