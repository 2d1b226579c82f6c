package redisdelay

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// DefaultKeyPrefix namespaces every key when a config leaves KeyPrefix empty.
const DefaultKeyPrefix = "redisdelay"

// Scheduling defaults, shared by Managers and the schedulers Subscribers embed.
const (
	defaultCheckInterval = time.Second
	defaultPromoteBatch  = 256
	defaultTrimInterval  = 10 * time.Second
)

var (
	// ErrInvalidDelay is wrapped by Publish errors for delay metadata that
	// does not parse.
	ErrInvalidDelay = errors.New("redisdelay: invalid delay metadata")
	// ErrInvalidTopic is wrapped by errors for topic names that cannot be used.
	ErrInvalidTopic = errors.New("redisdelay: invalid topic")
	// ErrDuplicateMessage is wrapped by Publish errors when a message UUID is
	// already waiting in the topic with a different body, or appears twice in
	// one Publish call. Nothing of that call is stored.
	ErrDuplicateMessage = errors.New("redisdelay: duplicate message UUID")
	// ErrClosed is returned by a Publisher or Subscriber used after Close.
	ErrClosed = errors.New("redisdelay: closed")
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Client is the Redis connection: a *redis.Client, *redis.ClusterClient
	// or a Sentinel-backed client. Required. Close never closes it.
	Client redis.UniversalClient

	// KeyPrefix namespaces every Redis key (default DefaultKeyPrefix).
	// Publishers, Subscribers and Managers must use the same prefix.
	KeyPrefix string
}

func (c *PublisherConfig) setDefaults() {
	c.KeyPrefix = defaultPrefix(c.KeyPrefix)
}

// Validate reports the first setting that cannot work.
func (c PublisherConfig) Validate() error {
	return validateCommon("PublisherConfig", c.Client, c.KeyPrefix)
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Client is the Redis connection. Required. Close never closes it.
	// Each subscription holds one pooled connection in a blocking read, and
	// the embedded scheduler one more: size the pool for that.
	Client redis.UniversalClient

	// KeyPrefix namespaces every Redis key (default DefaultKeyPrefix).
	KeyPrefix string

	// ConsumerGroup names the group this subscriber consumes in. Required.
	// Subscribers of one group compete for messages; every group receives
	// every message. A new group starts with the messages still in the
	// ready stream.
	ConsumerGroup string

	// Consumer prefixes the consumer names of this subscriber's subscriptions
	// (each subscription gets a unique name). Default: the host name.
	Consumer string

	// BatchSize is how many messages a subscription fetches from Redis in one
	// read (default 32). Fetched messages are delivered one at a time; those
	// not delivered when the subscription closes go back to the group at once.
	BatchSize int

	// BlockTime bounds one blocking read (default 500ms). Close waits at most
	// about this long for a read in flight; an idle subscription costs Redis
	// one read per BlockTime.
	BlockTime time.Duration

	// RetryDelay gives the delay before redelivering a nacked message whose
	// handler set no delay metadata; attempt is the attempt that failed
	// (1 for the first delivery). Nil redelivers immediately.
	RetryDelay func(attempt int) time.Duration

	// DisableScheduler turns off the scheduler a Subscriber runs for the
	// topics it subscribes (moving due messages to the ready stream and due
	// retries of its group back to it). Turn it off when a dedicated Manager
	// runs; with it on, any number of subscribers and Managers may schedule
	// the same topic safely.
	DisableScheduler bool

	// CheckInterval bounds how long the embedded scheduler sleeps when
	// nothing is due (default 1s). It normally wakes exactly at the next due
	// time, or earlier when a publish creates an earlier one; this interval is
	// the safety net for a missed wake-up.
	CheckInterval time.Duration
}

func (c *SubscriberConfig) setDefaults() {
	c.KeyPrefix = defaultPrefix(c.KeyPrefix)
	if c.Consumer == "" {
		c.Consumer, _ = os.Hostname()
		if c.Consumer == "" {
			c.Consumer = "consumer"
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = 32
	}
	if c.BlockTime == 0 {
		c.BlockTime = 500 * time.Millisecond
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = defaultCheckInterval
	}
}

// Validate reports the first setting that cannot work.
func (c SubscriberConfig) Validate() error {
	if err := validateCommon("SubscriberConfig", c.Client, c.KeyPrefix); err != nil {
		return err
	}
	if c.ConsumerGroup == "" {
		return errors.New("redisdelay: SubscriberConfig.ConsumerGroup is empty: name the group this service consumes in " +
			"(subscribers of one group share its messages; each group receives all of them)")
	}
	if err := validateName("SubscriberConfig.ConsumerGroup", c.ConsumerGroup); err != nil {
		return err
	}
	if err := validateName("SubscriberConfig.Consumer", c.Consumer); err != nil {
		return err
	}
	if c.BatchSize < 1 || c.BatchSize > 10000 {
		return fmt.Errorf("redisdelay: SubscriberConfig.BatchSize is %d: use 1 to 10000 (0 means the default, 32)", c.BatchSize)
	}
	if err := positive("SubscriberConfig.BlockTime", c.BlockTime, time.Millisecond); err != nil {
		return err
	}
	return positive("SubscriberConfig.CheckInterval", c.CheckInterval, time.Millisecond)
}

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Client is the Redis connection. Required. Close never closes it.
	Client redis.UniversalClient

	// KeyPrefix namespaces every Redis key (default DefaultKeyPrefix).
	KeyPrefix string

	// Topics limits the Manager to these topics. Empty: every topic that a
	// Publisher or Subscriber with the same KeyPrefix has used, discovered as
	// they appear.
	Topics []string

	// CheckInterval bounds how long a topic's scheduler sleeps when nothing is
	// due (default 1s); see SubscriberConfig.CheckInterval. New topics and
	// consumer groups are also discovered at this pace at the latest.
	CheckInterval time.Duration

	// BatchSize is the most messages moved from one set in one atomic step
	// (default 256, at most 4096): larger batches move backlogs faster, smaller
	// ones keep each Redis script short.
	BatchSize int

	// TrimInterval is how often the ready stream of each topic is trimmed of
	// entries every consumer group has acknowledged (default 10s). Entries
	// some group has not read or not acknowledged are never trimmed.
	TrimInterval time.Duration
}

func (c *ManagerConfig) setDefaults() {
	c.KeyPrefix = defaultPrefix(c.KeyPrefix)
	if c.CheckInterval == 0 {
		c.CheckInterval = defaultCheckInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = defaultPromoteBatch
	}
	if c.TrimInterval == 0 {
		c.TrimInterval = defaultTrimInterval
	}
}

// Validate reports the first setting that cannot work.
func (c ManagerConfig) Validate() error {
	if err := validateCommon("ManagerConfig", c.Client, c.KeyPrefix); err != nil {
		return err
	}
	for _, t := range c.Topics {
		if err := validateTopic(t); err != nil {
			return fmt.Errorf("ManagerConfig.Topics: %w", err)
		}
	}
	if c.BatchSize < 1 || c.BatchSize > 4096 {
		return fmt.Errorf("redisdelay: ManagerConfig.BatchSize is %d: use 1 to 4096 (0 means the default, 256)", c.BatchSize)
	}
	if err := positive("ManagerConfig.CheckInterval", c.CheckInterval, time.Millisecond); err != nil {
		return err
	}
	return positive("ManagerConfig.TrimInterval", c.TrimInterval, time.Millisecond)
}

func defaultPrefix(p string) string {
	if p == "" {
		return DefaultKeyPrefix
	}
	return p
}

func validateCommon(config string, client redis.UniversalClient, prefix string) error {
	if client == nil {
		return fmt.Errorf("redisdelay: %s.Client is nil: pass a redis.UniversalClient, e.g. redis.NewClient(&redis.Options{Addr: \"127.0.0.1:6379\"})", config)
	}
	return validateName(config+".KeyPrefix", prefix)
}

// nameProblem says what would break the key layout in a name (empty when
// nothing): braces would move the Redis Cluster hash tag; spaces, control
// characters and invalid UTF-8 make keys unreadable in tools; a bound keeps
// keys reasonable.
func nameProblem(what, s string) string {
	if s == "" {
		return what + " is empty"
	}
	if len(s) > 256 {
		return fmt.Sprintf("%s is %d bytes long: use at most 256", what, len(s))
	}
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%s %q is not valid UTF-8", what, s)
	}
	if i := strings.IndexFunc(s, func(r rune) bool {
		return r == '{' || r == '}' || unicode.IsSpace(r) || unicode.IsControl(r)
	}); i >= 0 {
		return fmt.Sprintf("%s %q contains %q at byte %d: braces, spaces and control characters are not allowed (they would break the Redis key layout)", what, s, s[i:i+1], i)
	}
	return ""
}

func validateName(what, s string) error {
	if p := nameProblem(what, s); p != "" {
		return errors.New("redisdelay: " + p)
	}
	return nil
}

func validateTopic(topic string) error {
	if p := nameProblem("topic", topic); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidTopic, p)
	}
	return nil
}

func positive(what string, d, least time.Duration) error {
	if d < least {
		return fmt.Errorf("redisdelay: %s is %s: use at least %s (0 means the default)", what, d, least)
	}
	return nil
}
