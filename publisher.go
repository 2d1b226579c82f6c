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
// delayed ones wait in Redis until due.
//
// It gives up after PublisherConfig.PublishTimeout, or when the context of
// the first message is done, with an error naming the topic. After a
// timeout or a lost connection the messages may or may not be stored:
// publishing a delayed message again while an identical copy is still
// waiting is a no-op, so retrying is safe for those; an immediate message
// retried may be delivered twice.
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
			return fmt.Errorf("%w: publish to topic %q: message %d is nil", ErrInvalidMessage, topic, i)
		}
		if msg.UUID == "" {
			return fmt.Errorf("%w: publish to topic %q: message %d has an empty UUID: create messages with message.NewMessage(watermill.NewUUID(), payload)",
				ErrInvalidMessage, topic, i)
		}
		if seen != nil {
			if j, dup := seen[msg.UUID]; dup {
				return fmt.Errorf("%w: messages %d and %d of one Publish call to topic %q share UUID %q: give each message its own UUID",
					ErrDuplicateMessage, j, i, topic, msg.UUID)
			}
			seen[msg.UUID] = i
		}
		d, err := messageDelay(msg.Metadata, now)
		if err == nil && d > p.config.MaxDelay {
			err = fmt.Errorf("due in %s, beyond PublisherConfig.MaxDelay (%s): raise MaxDelay if that is intended", d, p.config.MaxDelay)
		}
		if err != nil {
			return fmt.Errorf("%w: message %q to topic %q: %v", ErrInvalidDelay, msg.UUID, topic, err)
		}
		body := encodeMessage(msg)
		if len(body) > p.config.MaxMessageSize {
			return fmt.Errorf("%w: message %q to topic %q is %d bytes encoded (UUID, metadata and payload), over PublisherConfig.MaxMessageSize (%d): store large payloads elsewhere and publish a reference",
				ErrMessageTooLarge, msg.UUID, topic, len(body), p.config.MaxMessageSize)
		}
		args = append(args, msg.UUID, strconv.FormatInt(d.Milliseconds(), 10), body)
	}

	ctx, cancel := context.WithTimeout(messages[0].Context(), p.config.PublishTimeout)
	defer cancel()
	res, err := p.store(ctx, topic, args)
	if err != nil {
		return fmt.Errorf("redisdelay: publish %d message(s) to topic %q: %w", len(messages), topic, err)
	}
	if uuid, ok := res.(string); ok {
		return fmt.Errorf("%w: message %q is already waiting in topic %q with a different body: cancel it first or use a new UUID",
			ErrDuplicateMessage, uuid, topic)
	}
	return nil
}

// store runs the publish script and returns when it is done or ctx is,
// whichever comes first: go-redis bounds a stalled socket read by the
// client's ReadTimeout, not by the context (unless ContextTimeoutEnabled),
// and Publish must not outlive its deadline. After ctx ends the script may
// still run; Publish's documentation says so.
func (p *Publisher) store(ctx context.Context, topic string, args []any) (any, error) {
	type result struct {
		res any
		err error
	}
	done := make(chan result, 1)
	go func() {
		if err := p.register(ctx, topic); err != nil {
			done <- result{err: err}
			return
		}
		res, err := publishScript.Run(ctx, p.config.Client,
			[]string{p.keys.waiting(topic), p.keys.bodies(topic), p.keys.stream(topic), p.keys.seq(topic)},
			args...).Result()
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-ctx.Done():
		select {
		case r := <-done: // finished at the same instant: report what happened
			return r.res, r.err
		default:
		}
		return nil, fmt.Errorf("gave up (the messages may or may not be stored): %w", ctx.Err())
	}
}

// register adds the topic to the registry Managers discover topics from,
// once per Publisher and topic.
func (p *Publisher) register(ctx context.Context, topic string) error {
	if _, ok := p.registered.Load(topic); ok {
		return nil
	}
	if err := p.config.Client.SAdd(ctx, p.keys.topics(), topic).Err(); err != nil {
		return fmt.Errorf("register the topic: %w", err)
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
	if messageUUID == "" {
		return false, fmt.Errorf("%w: cancel in topic %q: the message UUID is empty", ErrInvalidMessage, topic)
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
