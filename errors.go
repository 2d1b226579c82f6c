package redisdelay

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalidDelay is wrapped by Publish errors for delay metadata that
	// does not parse.
	ErrInvalidDelay = errors.New("redisdelay: invalid delay metadata")
	// ErrInvalidTopic is wrapped by errors for topic names that cannot be used.
	ErrInvalidTopic = errors.New("redisdelay: invalid topic")
	// ErrInvalidName is wrapped by errors for the other names that go into
	// Redis keys and cannot be used: consumer groups and consumers, key
	// prefixes, deduplication namespaces.
	ErrInvalidName = errors.New("redisdelay: invalid name")
	// ErrDuplicateMessage is wrapped by Publish errors when a message UUID is
	// already waiting in the topic with a different body, or appears twice in
	// one Publish call. Nothing of that call is stored.
	ErrDuplicateMessage = errors.New("redisdelay: duplicate message UUID")
	// ErrInvalidMessage is wrapped by Publish errors for a nil message or
	// one without a UUID, and by Cancel for an empty UUID.
	ErrInvalidMessage = errors.New("redisdelay: invalid message")
	// ErrClosed is returned by a Publisher or Subscriber used after Close.
	ErrClosed = errors.New("redisdelay: closed")
	// ErrMessageTooLarge is wrapped by Publish errors for a message whose
	// encoded size exceeds PublisherConfig.MaxMessageSize.
	ErrMessageTooLarge = errors.New("redisdelay: message too large")
	// ErrNotReplicated is wrapped by Publish errors when
	// PublisherConfig.MinReplicas is set and fewer replicas acknowledged the
	// write within PublisherConfig.ReplicaTimeout. The messages ARE stored
	// on the master (and delivered unless a failover loses them): retrying
	// is a no-op for a delayed message still waiting, while an immediate
	// message retried may be delivered twice.
	ErrNotReplicated = errors.New("redisdelay: not replicated")
)

var (
	// ErrDuplicateBusinessKey is wrapped by Publish errors when a message's
	// BusinessKey is held by another waiting message of the topic under the
	// RejectDuplicateKey policy, or when two messages of one call share a
	// business key. Nothing of that call is stored.
	ErrDuplicateBusinessKey = errors.New("redisdelay: duplicate business key")
	// ErrQueueFull is wrapped by Publish errors when a call would take a
	// partition of the topic over PublisherConfig.MaxWaiting or MaxReady.
	// Nothing of that call is stored.
	ErrQueueFull = errors.New("redisdelay: queue full")
)

// ErrUnknownSchedule is wrapped by the Inspector's schedule actions
// (PauseSchedule, ResumeSchedule, TriggerSchedule) for an ID no schedule
// has.
var ErrUnknownSchedule = errors.New("redisdelay: unknown schedule")

// ErrPartitionMismatch is wrapped by Publish and Subscribe errors when the
// configured partition count of a topic differs from the one stored in
// Redis by the first Publisher or Subscriber that used the topic. Nothing
// is published or subscribed then.
var ErrPartitionMismatch = errors.New("redisdelay: partition count mismatch")

// errorPrefix starts the text of every error of this package.
const errorPrefix = "redisdelay: "

// wrapped is an error of this package adding context to another. Its text
// names the package once, however deep the chain: the wrapped error's own
// prefix is dropped ("redisdelay: publish ...: register topic ...", not
// "...: redisdelay: register topic ...").
type wrapped struct {
	context string
	err     error
}

func (e *wrapped) Error() string {
	return errorPrefix + e.context + ": " + strings.TrimPrefix(e.err.Error(), errorPrefix)
}

func (e *wrapped) Unwrap() error { return e.err }

// wrap says what was being done when err happened; err stays reachable
// with errors.Is and errors.As.
func wrap(err error, format string, args ...any) error {
	return &wrapped{context: fmt.Sprintf(format, args...), err: err}
}

// wrapErr adds what was being done to a Redis error; nil stays nil.
func wrapErr(err error, format string, args ...any) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	return wrap(err, format, args...)
}
