package ordertimeout_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/_examples/internal/redisconn"
	"github.com/redisdelay/watermill-redisdelay/_examples/ordertimeout"
	"github.com/redisdelay/watermill-redisdelay/redisdelaytest"
)

// The service runs as in production (a Publisher, a Subscriber that also
// schedules, a Router) against a real Redis: the test moves the topic's
// clock instead of waiting 30 minutes.
func TestOrderTimeout_UnpaidOrderClosesAfterThePaymentWindow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, release := redisconn.Client() // REDIS_ADDR, or a redis-server of its own
	defer release()
	// A key prefix of the test's own: Advance rewrites the due times of
	// everything under it.
	prefix := "ordertimeout-test-" + watermill.NewShortUUID()
	logger := watermill.NopLogger{}
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, KeyPrefix: prefix, ConsumerGroup: "orders"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	orders := ordertimeout.New(pub)
	orders.Register(router, sub)
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	for _, order := range []string{"unpaid", "paid"} {
		if err := orders.Place(ctx, order); err != nil {
			t.Fatal(err)
		}
	}
	orders.Pay("paid")
	clock := redisdelaytest.Config{Client: client, KeyPrefix: prefix}

	// A minute before the window ends, nothing is due yet.
	if _, err := redisdelaytest.Advance(ctx, clock, ordertimeout.PaymentWindow-time.Minute, ordertimeout.Topic); err != nil {
		t.Fatal(err)
	}
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := insp.Waiting(ctx, ordertimeout.Topic, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(waiting) != 2 || time.Until(waiting[0].Due) > time.Minute {
		t.Fatalf("want both orders' messages due within a minute, got %d waiting", len(waiting))
	}
	if s := orders.Status("unpaid"); s != "placed" {
		t.Fatalf("the unpaid order is %s before its window ended", s)
	}

	// The last minute: the unpaid order closes, the paid one stays paid.
	if _, err := redisdelaytest.Advance(ctx, clock, time.Minute, ordertimeout.Topic); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for orders.Status("unpaid") != "closed" {
		if time.Now().After(deadline) {
			t.Fatalf("the unpaid order is still %s 10 s after its window ended", orders.Status("unpaid"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := orders.Status("paid"); s != "paid" {
		t.Fatalf("the paid order is %s", s)
	}
}
