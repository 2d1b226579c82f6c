// Package ordertimeout closes an order that is not paid within 30 minutes
// of being placed: a delayed message per order, handled by a Watermill
// Router. Its test (ordertimeout_test.go) checks the 30 minutes without
// waiting them, with redisdelaytest.Advance.
package ordertimeout

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Topic carries "close the order unless paid", due PaymentWindow after the
// order was placed.
const Topic = "orders.close-unpaid"

// PaymentWindow is how long an order may stay unpaid.
const PaymentWindow = 30 * time.Minute

// Orders is the service: its state would be a database; a map will do.
type Orders struct {
	pub message.Publisher

	mu     sync.Mutex
	status map[string]string // order -> "placed", "paid", "closed"
}

// New returns the service; Register adds its handler to a Router.
func New(pub message.Publisher) *Orders {
	return &Orders{pub: pub, status: map[string]string{}}
}

// Place records an order and schedules its closing.
func (o *Orders) Place(ctx context.Context, order string) error {
	o.mu.Lock()
	o.status[order] = "placed"
	o.mu.Unlock()
	msg := message.NewMessage(watermill.NewUUID(), []byte(order))
	msg.SetContext(ctx)
	delay.Message(msg, delay.For(PaymentWindow))
	return o.pub.Publish(Topic, msg)
}

// Pay marks an order paid.
func (o *Orders) Pay(order string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.status[order] == "placed" {
		o.status[order] = "paid"
	}
}

// Status is an order's status.
func (o *Orders) Status(order string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.status[order]
}

// Register adds the handler that closes unpaid orders.
func (o *Orders) Register(router *message.Router, sub message.Subscriber) {
	router.AddNoPublisherHandler("close-unpaid", Topic, sub, func(msg *message.Message) error {
		o.mu.Lock()
		defer o.mu.Unlock()
		if order := string(msg.Payload); o.status[order] == "placed" {
			o.status[order] = "closed"
		}
		return nil
	})
}
