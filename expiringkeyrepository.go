package redisdelay

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// defaultDedupWindow matches the window of Watermill's in-memory repository,
// so swapping it for this one keeps the behaviour.
const (
	defaultDedupWindow    = time.Minute
	defaultDedupNamespace = "default"
)

// ExpiringKeyRepositoryConfig configures an ExpiringKeyRepository.
type ExpiringKeyRepositoryConfig struct {
	// Client is the Redis connection. Required. The repository never
	// closes it.
	Client redis.UniversalClient

	// KeyPrefix namespaces the keys (default DefaultKeyPrefix), like the
	// Publisher's; the keys live under "<KeyPrefix>:dedup:".
	KeyPrefix string

	// Namespace separates deduplicators that share a Redis and a prefix
	// (default "default"): repositories with the same namespace share
	// their state, so give each handler that deduplicates on its own a
	// namespace of its own (its handler name, say).
	Namespace string

	// Window is how long a key is remembered after it was first seen
	// (default 1 minute, like middleware.NewMapExpiringKeyRepository; at
	// least 1ms). Redis expires each key exactly Window after it was set,
	// by Redis's clock.
	Window time.Duration
}

func (c *ExpiringKeyRepositoryConfig) setDefaults() {
	c.KeyPrefix = defaultPrefix(c.KeyPrefix)
	if c.Namespace == "" {
		c.Namespace = defaultDedupNamespace
	}
	if c.Window == 0 {
		c.Window = defaultDedupWindow
	}
}

// Validate reports the first setting that cannot work.
func (c ExpiringKeyRepositoryConfig) Validate() error {
	if err := validateCommon("ExpiringKeyRepositoryConfig", c.Client, c.KeyPrefix); err != nil {
		return err
	}
	if err := validateName("ExpiringKeyRepositoryConfig.Namespace", c.Namespace); err != nil {
		return err
	}
	return positive("ExpiringKeyRepositoryConfig.Window", c.Window, time.Millisecond)
}

// ExpiringKeyRepository is a middleware.ExpiringKeyRepository in Redis, for
// Watermill's middleware.Deduplicator: every process whose repository uses
// the same Redis, KeyPrefix and Namespace shares one deduplication state,
// where the in-memory default only sees its own process.
//
//	repo, err := redisdelay.NewExpiringKeyRepository(redisdelay.ExpiringKeyRepositoryConfig{Client: client}, logger)
//	router.AddMiddleware((&middleware.Deduplicator{Repository: repo, Timeout: 5 * time.Second}).Middleware)
//
// Each IsDuplicate is one SET NX PX: atomic, so of several processes
// checking the same key at once exactly one sees it as new.
//
// When Redis cannot be reached IsDuplicate returns the error, and the
// Deduplicator passes it on: its middleware returns it as the handler's
// error (the message is nacked and redelivered later, never handled
// unchecked; it counts as an attempt), its publisher decorator fails the
// Publish. Set Deduplicator.Timeout (default 1 minute) to bound the wait.
//
// The Deduplicator records a key before the handler runs, so a message
// nacked after the check comes back as a duplicate within the window and
// is acked without being handled: put middleware.Retry after the
// Deduplicator (retrying inside it), or keep the window shorter than the
// retry delay, when a failed handler must run again.
type ExpiringKeyRepository struct {
	client    redis.UniversalClient
	prefix    string // KeyPrefix
	namespace string
	window    time.Duration
	logger    watermill.LoggerAdapter
}

// NewExpiringKeyRepository returns a repository for Watermill's
// middleware.Deduplicator. A nil logger logs nothing.
func NewExpiringKeyRepository(config ExpiringKeyRepositoryConfig, logger watermill.LoggerAdapter) (*ExpiringKeyRepository, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &ExpiringKeyRepository{
		client:    config.Client,
		prefix:    config.KeyPrefix,
		namespace: config.Namespace,
		window:    config.Window,
		logger:    logger,
	}, nil
}

// IsDuplicate reports whether key was seen within the window, recording it
// when it was not (the caller then handles the message). An error means
// neither: Redis did not answer, and the key may or may not be recorded.
func (r *ExpiringKeyRepository) IsDuplicate(ctx context.Context, key string) (bool, error) {
	redisKey := r.redisKey(key)
	// The value, when the key was first seen, is for operators reading it.
	set, err := store.MarkSeen(ctx, r.client, redisKey, r.window)
	if err != nil {
		return false, fmt.Errorf("redisdelay: deduplication key %s: %w", redisKey, err)
	}
	if !set {
		r.logger.Debug("Duplicate message key within the deduplication window", watermill.LogFields{"key": redisKey})
	}
	return !set, nil
}

// redisKey names the key of a deduplication key. Each key is its own hash
// tag: IsDuplicate touches one key per call, so nothing needs two keys in a
// slot, and a tag per namespace would put all of a busy deduplicator's keys
// on one Cluster node. A key that is not a readable name (the Deduplicator's
// default Adler-32 hasher makes 4 raw bytes, which may include braces that
// would move the tag) is hex-encoded behind a "~", which readable keys
// starting with "~" get too, so two keys never share a name.
func (r *ExpiringKeyRepository) redisKey(key string) string {
	return store.DedupKey(r.prefix, r.namespace, key, nameProblem("key", key) == "")
}
