package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/requeuer"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
)

// The DelayedRequeuer's defaults. The first retry waits 10 s, as with
// watermill-sql's delayed requeuer; later ones double up to 10 minutes (the
// cap of SubscriberConfig.RetryDelay), where watermill-sql's stay at 10 s.
const (
	defaultRequeueTopic         = "requeue"
	defaultRequeueConsumerGroup = "requeuer"
	defaultRequeueInitial       = 10 * time.Second
	defaultRequeueMax           = 10 * time.Minute
	defaultRequeueMultiplier    = 2
)

// DelayedRequeuerConfig configures a DelayedRequeuer. Its zero value plus
// Client works.
type DelayedRequeuerConfig struct {
	// Client is the Redis connection of the requeue topic. Required. Never
	// closed by the requeuer.
	Client redis.UniversalClient

	// KeyPrefix namespaces the requeue topic's keys (default
	// DefaultKeyPrefix), as the Publisher's do.
	KeyPrefix string

	// Publisher publishes a requeued message back to its topic. Default: a
	// Publisher on Client and KeyPrefix with the default config. Give your
	// own when its topics need settings of their own (partitions, say) or
	// it is decorated (tracing, an outbox).
	Publisher message.Publisher

	// RequeueTopic is where failed messages wait for their retry (default
	// "requeue"): one topic can serve every handler of every service on
	// the same Redis and KeyPrefix, as a message records the topic it
	// failed on.
	RequeueTopic string

	// ConsumerGroup is the group that reads RequeueTopic (default
	// "requeuer"). Requeuers of one group share the work, so each failed
	// message is requeued once however many processes run one.
	ConsumerGroup string

	// GeneratePublishTopic says where a requeued message goes. Default: the
	// topic it failed on, which middleware.PoisonQueue records in its
	// metadata (middleware.PoisonedTopicKey); a message without it fails
	// with an error naming it, and after SubscriberConfig's default
	// MaxAttempts ends in RequeueTopic's dead letters of ConsumerGroup.
	GeneratePublishTopic func(params requeuer.GeneratePublishTopicParams) (string, error)

	// DelayOnError sets how long a failed message waits before it is
	// requeued (default: 10 s, doubling with each failure, up to 10
	// minutes). DelayOnError grows the message's own duration metadata,
	// so a message first published with delay.For(1h) waits MaxInterval
	// after its first failure. InitialInterval and MaxInterval must be
	// at least 1ms and Multiplier a whole number of at least 1 (Watermill
	// truncates it, and a 0 would requeue at once, forever).
	DelayOnError *middleware.DelayOnError
}

func (c *DelayedRequeuerConfig) setDefaults() {
	c.KeyPrefix = defaultPrefix(c.KeyPrefix)
	if c.RequeueTopic == "" {
		c.RequeueTopic = defaultRequeueTopic
	}
	if c.ConsumerGroup == "" {
		c.ConsumerGroup = defaultRequeueConsumerGroup
	}
	if c.GeneratePublishTopic == nil {
		c.GeneratePublishTopic = poisonedTopic
	}
	if c.DelayOnError == nil {
		c.DelayOnError = &middleware.DelayOnError{
			InitialInterval: defaultRequeueInitial,
			MaxInterval:     defaultRequeueMax,
			Multiplier:      defaultRequeueMultiplier,
		}
	}
}

// Validate reports the first setting that cannot work.
func (c DelayedRequeuerConfig) Validate() error {
	if err := validateCommon("DelayedRequeuerConfig", c.Client, c.KeyPrefix); err != nil {
		return err
	}
	if p := nameProblem("DelayedRequeuerConfig.RequeueTopic", c.RequeueTopic); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidTopic, p)
	}
	if err := validateName("DelayedRequeuerConfig.ConsumerGroup", c.ConsumerGroup); err != nil {
		return err
	}
	if d := c.DelayOnError; d != nil {
		for _, f := range []struct {
			name, effect string
			value        time.Duration
		}{
			{"InitialInterval", "the first retry of a failed message would come at once", d.InitialInterval},
			// DelayOnError caps every later delay at MaxInterval.
			{"MaxInterval", "a failed message would be requeued at once from its second failure on, again and again", d.MaxInterval},
		} {
			if f.value < time.Millisecond {
				return fmt.Errorf("redisdelay: DelayedRequeuerConfig.DelayOnError.%s is %s: %s; use at least 1ms (a nil DelayOnError: %s doubling up to %s)",
					f.name, f.value, f.effect, defaultRequeueInitial, defaultRequeueMax)
			}
		}
		if d.Multiplier < 1 || d.Multiplier != math.Trunc(d.Multiplier) {
			return fmt.Errorf("redisdelay: DelayedRequeuerConfig.DelayOnError.Multiplier is %v: middleware.DelayOnError truncates it to a whole number (%v), so use a whole number of at least 1 (1: the same delay every time)",
				d.Multiplier, math.Trunc(d.Multiplier))
		}
	}
	return nil
}

// poisonedTopic is the default GeneratePublishTopic: the topic the message
// failed on, as middleware.PoisonQueue recorded it.
func poisonedTopic(params requeuer.GeneratePublishTopicParams) (string, error) {
	if topic := params.Message.Metadata.Get(middleware.PoisonedTopicKey); topic != "" {
		return topic, nil
	}
	return "", fmt.Errorf("redisdelay: message %q on the requeue topic has no %s metadata, which middleware.PoisonQueue sets: send failed messages there through DelayedRequeuer.Middleware, or set DelayedRequeuerConfig.GeneratePublishTopic",
		params.Message.UUID, middleware.PoisonedTopicKey)
}

// DelayedRequeuer retries failed messages later, without limit, through a
// topic of their own, as watermill-sql's delayed requeuer does: its
// Middleware, added to a Router, publishes a message whose handler failed
// to RequeueTopic, delayed by middleware.DelayOnError, and acks it; Run
// publishes each one back to the topic it failed on once it is due
// (components/requeuer, counting in requeuer.RetriesKey).
//
// It differs from the Subscriber's own retries (a Nack: the message waits
// in its consumer group's retry set, SubscriberConfig.RetryDelay, and goes
// to the group's dead letters after MaxAttempts): it never gives up, a
// message waiting for its retry is an ordinary delayed message of
// RequeueTopic (listed, cancelled or rescheduled with the Inspector), and
// a requeued message is published to its topic again, so every consumer
// group of the topic receives it, not only the one that failed. Use it
// where a topic has a single consumer group, or its handlers are
// idempotent.
type DelayedRequeuer struct {
	publisher  *Publisher // to RequeueTopic, and back when config.Publisher is nil
	subscriber *Subscriber
	router     *message.Router
	requeuer   *requeuer.Requeuer
	middleware []message.HandlerMiddleware

	mu      sync.Mutex
	started bool // Run was called
	closed  bool
	cancel  context.CancelFunc // stops Run
	done    chan struct{}      // closed when Run returns
}

// NewDelayedRequeuer returns a DelayedRequeuer. Add its Middleware to the
// Router whose failed messages it retries, and Run it (in that process or
// another). A nil logger logs nothing.
func NewDelayedRequeuer(config DelayedRequeuerConfig, logger watermill.LoggerAdapter) (*DelayedRequeuer, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	pub, err := NewPublisher(PublisherConfig{Client: config.Client, KeyPrefix: config.KeyPrefix}, logger)
	if err != nil {
		return nil, err
	}
	sub, err := NewSubscriber(SubscriberConfig{
		Client: config.Client, KeyPrefix: config.KeyPrefix, ConsumerGroup: config.ConsumerGroup,
	}, logger)
	if err != nil {
		return nil, err
	}
	back := config.Publisher
	if back == nil {
		back = pub
	}
	poison, err := middleware.PoisonQueue(pub, config.RequeueTopic)
	if err != nil {
		return nil, errors.Join(err, sub.Close())
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return nil, errors.Join(err, sub.Close())
	}
	rq, err := requeuer.NewRequeuer(requeuer.Config{
		Subscriber:           sub,
		SubscribeTopic:       config.RequeueTopic,
		Publisher:            back,
		GeneratePublishTopic: config.GeneratePublishTopic,
		Router:               router,
	}, logger)
	if err != nil {
		return nil, errors.Join(err, sub.Close())
	}
	return &DelayedRequeuer{
		publisher:  pub,
		subscriber: sub,
		router:     router,
		requeuer:   rq,
		// PoisonQueue outside DelayOnError: the delay is set on the failed
		// message before it is published to RequeueTopic.
		middleware: []message.HandlerMiddleware{poison, config.DelayOnError.Middleware},
		done:       make(chan struct{}),
	}, nil
}

// Middleware returns the middleware to add to a Router, in this order:
// every message whose handler fails is published to RequeueTopic with a
// delay, and acked, so middleware added before these (outside) sees no
// error. Add middleware that must see the handler's error after these:
// a PoisonQueueWithFilter for errors retrying cannot fix, or RecordError
// (then the requeued message carries the error in ErrorKey).
func (r *DelayedRequeuer) Middleware() []message.HandlerMiddleware {
	return r.middleware
}

// Run requeues messages as they fall due until ctx is done or Close is
// called, then returns once the messages in hand are published. Call it
// once.
func (r *DelayedRequeuer) Run(ctx context.Context) error {
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return fmt.Errorf("%w: DelayedRequeuer.Run called after Close", ErrClosed)
	case r.started:
		r.mu.Unlock()
		return errors.New("redisdelay: DelayedRequeuer.Run called twice: create a DelayedRequeuer per Run")
	}
	r.started = true
	ctx, r.cancel = context.WithCancel(ctx)
	r.mu.Unlock()
	defer close(r.done)
	return r.requeuer.Run(ctx)
}

// Running is closed when Run is requeuing.
func (r *DelayedRequeuer) Running() chan struct{} {
	return r.router.Running()
}

// Close stops Run and waits until it has returned, then closes the
// requeuer's own Publisher and Subscriber (not the Client, nor
// DelayedRequeuerConfig.Publisher). Close it after the Routers that use its
// Middleware: once it is closed, their failed messages can no longer be
// sent to RequeueTopic, and each is nacked instead (retried by their
// Subscriber). Calling it again is a no-op.
func (r *DelayedRequeuer) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	started, cancel := r.started, r.cancel
	r.mu.Unlock()
	if started {
		cancel()
		<-r.done
	}
	return errors.Join(r.subscriber.Close(), r.publisher.Close())
}
