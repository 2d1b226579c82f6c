package redisdelay_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay"
)

// Tenants share a topic: each consumer group takes their messages
// round-robin, one tenant per turn, so a tenant's burst does not hold the
// others back; GroupConcurrency 1 runs each tenant's messages one at a
// time, in order, across every process.
func ExampleSetGroup() {
	client := exampleClient() // e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	topic := "jobs-" + watermill.NewShortUUID()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "workers", GroupConcurrency: 1}, nil)
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		panic(err)
	}
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, nil)
	if err != nil {
		panic(err)
	}

	var msgs []*message.Message
	for _, job := range []struct{ tenant, name string }{{"acme", "a1"}, {"acme", "a2"}, {"acme", "a3"}, {"globex", "g1"}} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(job.name))
		redisdelay.SetGroup(msg, job.tenant)
		msgs = append(msgs, msg)
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		panic(err)
	}
	for range msgs {
		msg := <-ch
		fmt.Println(string(msg.Payload))
		msg.Ack()
	}
	// Output:
	// a1
	// g1
	// a2
	// a3
}
