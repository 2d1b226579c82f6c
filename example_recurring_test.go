package redisdelay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/redisdelay/watermill-redisdelay"
)

// Publish a message at 9:00 New York time on weekdays. Every process may
// register it at start: one message is published per tick however many
// run, by the scheduler of any Subscriber or Manager.
func ExamplePublisher_Schedule() {
	client := exampleClient() // e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	prefix := "example-" + watermill.NewShortUUID() // the default prefix in a real program

	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix}, nil)
	if err != nil {
		panic(err)
	}
	err = pub.Schedule(context.Background(), redisdelay.Schedule{
		ID:       "daily-report",
		Spec:     "0 9 * * 1-5",
		Timezone: "America/New_York",
		Topic:    "reports.generate",
		Payload:  []byte(`{"kind":"daily"}`),
	})
	if err != nil {
		panic(err)
	}

	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: prefix})
	if err != nil {
		panic(err)
	}
	schedules, err := insp.Schedules(context.Background())
	if err != nil {
		panic(err)
	}
	for _, s := range schedules {
		fmt.Println(s.ID, s.Spec, s.Timezone, s.Topic, s.Next.In(mustLoad(s.Timezone)).Format("15:04"))
	}
	removed, err := insp.RemoveSchedule(context.Background(), "daily-report")
	fmt.Println("removed:", removed, err)
	// Output:
	// daily-report 0 9 * * 1-5 America/New_York reports.generate 09:00
	// removed: true <nil>
}

func mustLoad(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}
