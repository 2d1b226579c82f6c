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

// A reminder per order: publishing a new one for the same order replaces
// the one still waiting, rather than sending two. The partition key keeps
// each customer's messages in one partition (handled in order by Ordered
// subscriptions), and high priority makes the reminder overtake normal
// messages once due.
func ExampleSetBusinessKey() {
	client := exampleClient() // e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, Partitions: 4}, nil)
	if err != nil {
		panic(err)
	}
	topic := "reminders-" + watermill.NewShortUUID()

	for _, text := range []string{"pay order 42", "pay order 42 (updated total)"} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(text))
		delay.Message(msg, delay.For(time.Hour))
		redisdelay.SetBusinessKey(msg, "order-42")
		redisdelay.SetBusinessKeyPolicy(msg, redisdelay.ReplaceWaiting)
		redisdelay.SetPartitionKey(msg, "customer-7")
		redisdelay.SetHighPriority(msg)
		if err := pub.Publish(topic, msg); err != nil {
			panic(err)
		}
	}

	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	if err != nil {
		panic(err)
	}
	waiting, err := insp.Waiting(context.Background(), topic, 0, 10)
	if err != nil {
		panic(err)
	}
	for _, w := range waiting {
		fmt.Printf("%s (priority %s)\n", w.Message.Payload, w.Message.Metadata.Get(redisdelay.PriorityKey))
	}
	// Output:
	// pay order 42 (updated total) (priority high)
}
