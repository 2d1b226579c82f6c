// Command retries runs a Watermill Router whose handler fails: failed
// messages come back after a growing delay (middleware.DelayOnError), and a
// message that keeps failing goes to a poison topic.
//
//	go run ./retries              # starts a redis-server of its own
//	go run ./retries 127.0.0.1:6379
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/_examples/internal/redisconn"
)

func main() {
	client, release := redisconn.Client()
	defer release()
	logger := watermill.NewStdLogger(false, false)

	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, logger)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: client, ConsumerGroup: "mailer"}, logger)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close() // after the Router, before the client: see the README's quick start

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		log.Fatal(err)
	}
	poison, err := middleware.PoisonQueueWithFilter(pub, "emails.poison", func(err error) bool {
		return errors.Is(err, errGiveUp)
	})
	if err != nil {
		log.Fatal(err)
	}
	// Order matters: DelayOnError sits inside, so the poison queue sees the
	// final error and DelayOnError only the retryable ones.
	router.AddMiddleware(poison, (&middleware.DelayOnError{
		InitialInterval: 200 * time.Millisecond,
		MaxInterval:     2 * time.Second,
		Multiplier:      2,
	}).Middleware)

	start := time.Now()
	done := make(chan struct{})
	router.AddNoPublisherHandler("send-email", "emails", sub, func(msg *message.Message) error {
		attempt, _ := strconv.Atoi(msg.Metadata.Get(redisdelay.AttemptKey))
		fmt.Printf("%6s  %s attempt %d\n", time.Since(start).Round(10*time.Millisecond), msg.Payload, attempt)
		switch {
		case string(msg.Payload) == "flaky@example.com" && attempt < 3:
			return errors.New("mail server busy")
		case string(msg.Payload) == "bounce@example.com" && attempt < 3:
			return errors.New("mailbox full")
		case string(msg.Payload) == "bounce@example.com":
			return fmt.Errorf("%w: mailbox still full after %d attempts", errGiveUp, attempt)
		}
		return nil
	})
	router.AddNoPublisherHandler("poison", "emails.poison", sub, func(msg *message.Message) error {
		fmt.Printf("%6s  %s moved to the poison topic: %s\n", time.Since(start).Round(10*time.Millisecond),
			msg.Payload, msg.Metadata.Get(middleware.ReasonForPoisonedKey))
		close(done)
		return nil
	})
	go func() {
		if err := router.Run(context.Background()); err != nil {
			log.Fatal(err)
		}
	}()
	defer router.Close()
	<-router.Running()

	for _, to := range []string{"ok@example.com", "flaky@example.com", "bounce@example.com"} {
		if err := pub.Publish("emails", message.NewMessage(watermill.NewUUID(), []byte(to))); err != nil {
			log.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		log.Fatal("the poisoned message did not arrive")
	}
}

var errGiveUp = errors.New("giving up")
