package otelredisdelay_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
	"github.com/redisdelay/watermill-redisdelay/internal/testkit"
)

// The tests run against a real redis-server: the one at
// REDISDELAY_TEST_ADDR (loopback only), or one TestMain starts. Unlike the
// redisdelay package's tests they do not run on a Cluster or Sentinel
// deployment: what they test is how spans are made and linked, the same on
// any.
var redisAddr string

func TestMain(m *testing.M) {
	addr, stop, err := redistest.ForPackage()
	if err != nil {
		fmt.Fprintln(os.Stderr, "otelredisdelay tests:", err)
		os.Exit(1)
	}
	redisAddr = addr
	code := m.Run()
	stop()
	os.Exit(code)
}

var logger = testkit.Logger

func topic() string { return "t-" + watermill.NewShortUUID() }

func newMessage(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
}

func delayed(d delay.Delay, payload string) *message.Message {
	msg := newMessage(payload)
	delay.Message(msg, d)
	return msg
}

// newPubSub is a Publisher and a Subscriber of group on a client with
// go-redis's defaults, all closed when the test ends.
func newPubSub(t *testing.T, group string, configure ...func(*redisdelay.SubscriberConfig)) (*redisdelay.Publisher, *redisdelay.Subscriber) {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = client.Close() })
	pub := testkit.NewPublisher(t, client)
	t.Cleanup(func() { _ = pub.Close() })
	config := redisdelay.SubscriberConfig{ConsumerGroup: group}
	for _, c := range configure {
		c(&config)
	}
	return pub, testkit.NewSubscriber(t, client, config)
}

var receiveHandled = testkit.ReceiveHandled
