package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// Names of the systems in results.
const (
	sysRedisdelay  = "redisdelay"
	sysRedisstream = "redisstream"
	sysGoChannel   = "gochannel"
	sysAsynqFast   = "asynq 100ms"
	sysAsynq       = "asynq default"
	sysRaw         = "raw Redis"
)

// consumerGroup is the group every subscriber of the bench consumes in.
const consumerGroup = "bench"

// poolSize sizes the go-redis pool of a client shared by 64 publishing
// goroutines and the blocking reads of the subscriptions.
const poolSize = 128

// pubSub is a Watermill Pub/Sub under test: a publisher and subscribers that
// compete in one consumer group.
type pubSub struct {
	pub  message.Publisher
	subs []message.Subscriber
	// topicPerSubscriber: subscriber i reads its own topic. GoChannel has no
	// consumer groups, so there "several subscribers" means as many topics,
	// each with its share of the messages: the same work for the Router.
	topicPerSubscriber bool
	close              func()
}

// topics returns the topic names the subscribers read.
func (ps *pubSub) topics(topic string) []string {
	if !ps.topicPerSubscriber {
		return []string{topic}
	}
	t := make([]string, len(ps.subs))
	for i := range t {
		t[i] = fmt.Sprintf("%s-%d", topic, i)
	}
	return t
}

// initialize creates the consumer groups before anything is published, as
// watermill-benchmark does.
func (ps *pubSub) initialize(topics []string) error {
	for _, s := range ps.subs {
		if si, ok := s.(message.SubscribeInitializer); ok {
			for _, t := range topics {
				if err := si.SubscribeInitialize(t); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// watermillSystem opens a Pub/Sub with the given number of subscribers.
type watermillSystem struct {
	name string
	open func(b *bench, subscribers int) (*pubSub, error)
}

var watermillSystems = []watermillSystem{
	{sysRedisdelay, openRedisdelay},
	{sysRedisstream, openRedisstream},
	{sysGoChannel, openGoChannel},
}

// openRedisdelay shares one client between the publisher and the
// subscribers; each subscriber runs its embedded scheduler (the default), as
// separate replicas of a service would.
func openRedisdelay(b *bench, subscribers int) (*pubSub, error) {
	return openRedisdelayWith(b, subscribers, nil)
}

// openRedisdelayWith is openRedisdelay with configure, if not nil, changing
// each subscriber's config from the defaults (scenario 12: the groups'
// concurrency cap).
func openRedisdelayWith(b *bench, subscribers int, configure func(*redisdelay.SubscriberConfig)) (*pubSub, error) {
	client := newClient(b.addr, poolSize)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, b.logger)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	ps := &pubSub{pub: pub}
	ps.close = func() {
		for _, s := range ps.subs {
			_ = s.Close()
		}
		_ = pub.Close()
		_ = client.Close()
	}
	for i := range subscribers {
		config := redisdelay.SubscriberConfig{
			Client:        client,
			ConsumerGroup: consumerGroup,
			Consumer:      fmt.Sprintf("c%d", i),
		}
		if configure != nil {
			configure(&config)
		}
		sub, err := redisdelay.NewSubscriber(config, b.logger)
		if err != nil {
			ps.close()
			return nil, err
		}
		ps.subs = append(ps.subs, sub)
	}
	return ps, nil
}

// openRedisstream configures watermill-redisstream as watermill-benchmark
// does (default marshaller, one consumer group), with one client per
// subscriber and one for the publisher, because its Close closes the client.
// DisableIndefiniteInitialBlock lets an idle subscriber close (its default
// first read blocks forever and Close waits for it); it does not change
// reads of a non-empty stream.
func openRedisstream(b *bench, subscribers int) (*pubSub, error) {
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{
		Client:     newClient(b.addr, poolSize),
		Marshaller: redisstream.DefaultMarshallerUnmarshaller{},
	}, b.logger)
	if err != nil {
		return nil, err
	}
	ps := &pubSub{pub: pub}
	ps.close = func() {
		_ = pub.Close()
		for _, s := range ps.subs {
			_ = s.Close()
		}
	}
	for i := range subscribers {
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client:                        newClient(b.addr, 8),
			Unmarshaller:                  redisstream.DefaultMarshallerUnmarshaller{},
			ConsumerGroup:                 consumerGroup,
			Consumer:                      fmt.Sprintf("c%d", i),
			DisableIndefiniteInitialBlock: true,
		}, b.logger)
		if err != nil {
			ps.close()
			return nil, err
		}
		ps.subs = append(ps.subs, sub)
	}
	return ps, nil
}

// openGoChannel is Watermill's in-memory Pub/Sub, persistent so that
// messages published before subscribing are delivered, as in
// watermill-benchmark: the ceiling of the framework on this machine.
func openGoChannel(b *bench, subscribers int) (*pubSub, error) {
	gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, b.logger)
	ps := &pubSub{pub: gc, topicPerSubscriber: true, close: func() { _ = gc.Close() }}
	for range subscribers {
		ps.subs = append(ps.subs, gc)
	}
	return ps, nil
}

// delayQueue schedules payloads for a due time; the system it stands for
// delivers them to the callback given when it was opened.
type delayQueue interface {
	schedule(due time.Time, payload []byte) error
	close()
}

// deliverySystem opens a delayQueue whose consumers call deliver.
type deliverySystem struct {
	name string
	open func(b *bench, deliver func(payload []byte)) (delayQueue, error)
}

func deliverySystems(subscribers int) []deliverySystem {
	return []deliverySystem{
		{sysRedisdelay, func(b *bench, deliver func([]byte)) (delayQueue, error) {
			return openRedisdelayQueue(b, subscribers, deliver)
		}},
		{sysAsynqFast, func(b *bench, deliver func([]byte)) (delayQueue, error) {
			return openAsynqQueue(b, 100*time.Millisecond, deliver)
		}},
		{sysAsynq, func(b *bench, deliver func([]byte)) (delayQueue, error) {
			return openAsynqQueue(b, 0, deliver)
		}},
	}
}

// delayTopic is the topic of the delivery scenarios.
const delayTopic = "delayed"

// redisdelayQueue publishes with Watermill's delay metadata and consumes
// through a Router with one ack-only handler per subscriber.
type redisdelayQueue struct {
	pub    *redisdelay.Publisher
	ps     *pubSub
	router *message.Router
	done   chan error
}

func openRedisdelayQueue(b *bench, subscribers int, deliver func([]byte)) (delayQueue, error) {
	ps, err := openRedisdelay(b, subscribers)
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, b.logger)
	if err != nil {
		ps.close()
		return nil, err
	}
	for i, sub := range ps.subs {
		router.AddConsumerHandler(fmt.Sprintf("deliver-%d", i), delayTopic, sub, func(msg *message.Message) error {
			deliver(msg.Payload)
			return nil
		})
	}
	q := &redisdelayQueue{pub: ps.pub.(*redisdelay.Publisher), ps: ps, router: router, done: make(chan error, 1)}
	go func() { q.done <- router.Run(b.ctx) }()
	select {
	case <-router.Running():
	case err := <-q.done:
		ps.close()
		return nil, fmt.Errorf("router stopped: %w", err)
	}
	return q, nil
}

func (q *redisdelayQueue) schedule(due time.Time, payload []byte) error {
	msg := message.NewMessage(watermill.NewULID(), payload)
	delay.Message(msg, delay.For(time.Until(due)))
	return q.pub.Publish(delayTopic, msg)
}

func (q *redisdelayQueue) close() {
	_ = errors.Join(q.router.Close(), <-q.done)
	q.ps.close()
}

// asynqQueue schedules tasks with asynq.ProcessIn and handles them with a
// server of 50 workers.
type asynqQueue struct {
	redis  *redis.Client
	client *asynq.Client
	server *asynq.Server
}

// asynqTaskType names the bench's tasks.
const asynqTaskType = "bench"

// openAsynqQueue starts an asynq server; interval 0 keeps asynq's default
// DelayedTaskCheckInterval (5s).
func openAsynqQueue(b *bench, interval time.Duration, deliver func([]byte)) (delayQueue, error) {
	rdb := newClient(b.addr, poolSize)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:              50,
		DelayedTaskCheckInterval: interval,
		LogLevel:                 asynq.ErrorLevel,
	})
	err := srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		deliver(t.Payload())
		return nil
	}))
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &asynqQueue{redis: rdb, client: asynq.NewClientFromRedisClient(rdb), server: srv}, nil
}

func (q *asynqQueue) schedule(due time.Time, payload []byte) error {
	_, err := q.client.Enqueue(asynq.NewTask(asynqTaskType, payload), asynq.ProcessIn(time.Until(due)))
	return err
}

func (q *asynqQueue) close() {
	q.server.Shutdown()
	_ = q.client.Close()
	_ = q.redis.Close()
}
