package redisdelay

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Publisher publishes Watermill messages, each delivered when its delay
// metadata says (see the package documentation for the rule). Safe for
// concurrent use.
type Publisher struct {
	config PublisherConfig
	keys   keys
	logger watermill.LoggerAdapter
	now    func() time.Time // the host clock; tests skew it

	registered sync.Map // topics already added to the topic registry
	closed     atomic.Bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher. A nil logger logs nothing.
func NewPublisher(config PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Publisher{
		config: config,
		keys:   keys{prefix: config.KeyPrefix},
		logger: logger,
		now:    time.Now,
	}, nil
}

// Publish stores the messages atomically: all of them or, on error, none.
// Messages without delay metadata (or already due) are ready at once;
// delayed ones wait in Redis until due. Publishing a message again while an
// identical copy is still waiting is a no-op, so retrying a failed Publish
// is safe.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if err := validateTopic(topic); err != nil {
		return err
	}
	if len(messages) == 0 {
		return nil
	}

	now := p.now()
	args := make([]any, 0, 1+3*len(messages))
	args = append(args, p.keys.wake(topic))
	var seen map[string]int
	if len(messages) > 1 {
		seen = make(map[string]int, len(messages))
	}
	for i, msg := range messages {
		if msg == nil {
			return fmt.Errorf("redisdelay: publish to topic %q: message %d is nil", topic, i)
		}
		if seen != nil {
			if j, dup := seen[msg.UUID]; dup {
				return fmt.Errorf("%w: messages %d and %d of one Publish call to topic %q share UUID %q: give each message its own UUID",
					ErrDuplicateMessage, j, i, topic, msg.UUID)
			}
			seen[msg.UUID] = i
		}
		d, err := messageDelay(msg.Metadata, now)
		if err != nil {
			return fmt.Errorf("publish message %q to topic %q: %w", msg.UUID, topic, err)
		}
		args = append(args, msg.UUID, strconv.FormatInt(d.Milliseconds(), 10), encodeMessage(msg))
	}

	ctx := context.Background()
	if err := p.register(ctx, topic); err != nil {
		return err
	}
	res, err := publishScript.Run(ctx, p.config.Client,
		[]string{p.keys.waiting(topic), p.keys.bodies(topic), p.keys.stream(topic), p.keys.seq(topic)},
		args...).Result()
	if err != nil {
		return fmt.Errorf("redisdelay: publish %d message(s) to topic %q: %w", len(messages), topic, err)
	}
	if uuid, ok := res.(string); ok {
		return fmt.Errorf("%w: message %q is already waiting in topic %q with a different body: cancel it first or use a new UUID",
			ErrDuplicateMessage, uuid, topic)
	}
	return nil
}

// register adds the topic to the registry Managers discover topics from,
// once per Publisher and topic.
func (p *Publisher) register(ctx context.Context, topic string) error {
	if _, ok := p.registered.Load(topic); ok {
		return nil
	}
	if err := p.config.Client.SAdd(ctx, p.keys.topics(), topic).Err(); err != nil {
		return fmt.Errorf("redisdelay: register topic %q: %w", topic, err)
	}
	p.registered.Store(topic, struct{}{})
	return nil
}

// Cancel removes a message that is still waiting for its due time, so it is
// never delivered. It reports whether the message was waiting; false means
// it is unknown, already cancelled, or already due and on its way to
// subscribers (it can no longer be recalled then).
func (p *Publisher) Cancel(ctx context.Context, topic, messageUUID string) (bool, error) {
	if p.closed.Load() {
		return false, ErrClosed
	}
	if err := validateTopic(topic); err != nil {
		return false, err
	}
	n, err := cancelScript.Run(ctx, p.config.Client,
		[]string{p.keys.waiting(topic), p.keys.bodies(topic)}, messageUUID).Int()
	if err != nil {
		return false, fmt.Errorf("redisdelay: cancel message %q in topic %q: %w", messageUUID, topic, err)
	}
	return n == 1, nil
}

// Close makes further calls fail with ErrClosed. It does not close the
// Redis client. Calling it again is a no-op.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	return nil
}
