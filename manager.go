package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/loglimit"
	"github.com/redisdelay/watermill-redisdelay/internal/scheduling"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

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
	// due (default 2s); see SubscriberConfig.CheckInterval, also for the
	// lease that lets one scheduler (a Manager's or a Subscriber's) work on
	// a topic at a time. New topics are discovered when registered, and
	// at this pace at the latest; consumer groups when their number changes (within a
	// check interval) or at the latest within a minute.
	CheckInterval time.Duration

	// BatchSize is the most messages moved from one set in one atomic step
	// (default 256, at most 4096): larger batches move backlogs faster, smaller
	// ones keep each Redis script short.
	BatchSize int

	// TrimInterval is how often the ready stream of each topic is trimmed of
	// entries every consumer group has acknowledged (default 10s). Entries
	// some group has not read or not acknowledged are never trimmed. It is
	// also how often consumers idle past their group's ConsumerIdleTimeout
	// are removed.
	TrimInterval time.Duration

	// Retention bounds how long ready messages of a topic that no consumer
	// group reads are kept (default 0: until a group is created and reads
	// them). Messages published before any subscriber exists are otherwise
	// kept for the first group; with Retention set, those older than it are
	// removed (approximately: whole stream nodes, so a little later) and the
	// removal is logged. It never removes a message from a topic that has a
	// consumer group: delete an abandoned group with Inspector.DeleteGroup.
	Retention time.Duration

	// Metrics records metrics (prommetrics.New for Prometheus); nil
	// records none.
	Metrics Metrics
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
	for i, t := range c.Topics {
		if p := nameProblem(fmt.Sprintf("ManagerConfig.Topics[%d]", i), t); p != "" {
			return fmt.Errorf("%w: %s", ErrInvalidTopic, p)
		}
	}
	if c.BatchSize < 1 || c.BatchSize > 4096 {
		return fmt.Errorf("redisdelay: ManagerConfig.BatchSize is %d: use 1 to 4096 (0 means the default, 256)", c.BatchSize)
	}
	if err := positive("ManagerConfig.CheckInterval", c.CheckInterval, time.Millisecond); err != nil {
		return err
	}
	if err := positive("ManagerConfig.TrimInterval", c.TrimInterval, time.Millisecond); err != nil {
		return err
	}
	if c.Retention < 0 || (c.Retention > 0 && c.Retention < time.Second) {
		return fmt.Errorf("redisdelay: ManagerConfig.Retention is %s: use at least 1s, or 0 to keep messages until a consumer group reads them", c.Retention)
	}
	return nil
}

// Manager runs the scheduling of topics in a process of its own: it moves due
// messages from the waiting sets to the ready streams and due retries back to
// their consumer groups, and trims acknowledged entries from the streams.
// Subscribers do the same for their topics unless
// SubscriberConfig.DisableScheduler is set. Any number of Managers and
// subscribers may schedule the same topic: one at a time does the work,
// holding the topic's lease in Redis, and another takes over when it stops
// (see SubscriberConfig.DisableScheduler). Should two work at once (after a
// pause longer than the lease), nothing is lost or delivered twice: every
// move is one atomic Redis script.
//
// Due times are compared by Redis's clock only, so a Manager whose host
// clock is off still fires on time.
type Manager struct {
	config  ManagerConfig
	logger  watermill.LoggerAdapter
	sched   *scheduler
	running chan struct{}

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	gone    error // the client was closed under Run
}

// NewManager returns a Manager; call Run to start it. A nil logger logs nothing.
func NewManager(config ManagerConfig, logger watermill.LoggerAdapter) (*Manager, error) {
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	m := &Manager{
		config:  config,
		logger:  logger,
		sched:   newScheduler(config, logger),
		running: make(chan struct{}),
		done:    make(chan struct{}),
	}
	m.sched.gone = m.clientGone
	return m, nil
}

// clientGone stops Run when the Redis client was closed under it: nothing
// would work again. Run returns the error, logged once.
func (m *Manager) clientGone(string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone != nil {
		return
	}
	m.gone = errors.New("redisdelay: the Redis client was closed while the Manager ran; close the Manager before its client")
	m.logger.Error("redisdelay: stopped", m.gone, nil)
	m.cancel()
}

// Run schedules until ctx is cancelled or Close is called, then returns nil.
// It returns an error if the Manager was already started, or when its
// Redis client was closed under it.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return errors.New("redisdelay: Manager.Run called twice: create a Manager per Run")
	}
	m.started = true
	ctx, m.cancel = context.WithCancel(ctx)
	m.mu.Unlock()
	defer close(m.done)

	static := len(m.config.Topics) > 0
	h := store.AcquireHub(m.config.Client)
	defer h.Release()
	m.sched.start(ctx, !static, h)
	close(m.running)
	m.logger.Info("redisdelay manager running", watermill.LogFields{"topics": managerTopics(m.config.Topics)})

	ticks := startTicks(ctx, m.sched, m.logger)
	m.discoverTopics(ctx, static)
	<-ticks
	m.sched.stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gone
}

// managerTopics is how the log names the topics a Manager schedules.
func managerTopics(topics []string) any {
	if len(topics) == 0 {
		return "all topics"
	}
	return topics
}

// discoverTopics schedules every partition of the configured topics, or
// without a list of every topic in the registry, now and every
// CheckInterval, until ctx ends: partitions are read from Redis, so a
// topic that gets its partition count later is scheduled whole. Without a
// list, a topic's registration (published on the registry's channel) adds
// it sooner; wake-ups of topics the registry does not hold add nothing.
func (m *Manager) discoverTopics(ctx context.Context, static bool) {
	t := time.NewTicker(m.config.CheckInterval)
	defer t.Stop()
	for {
		if err := m.discover(ctx, static); err != nil && ctx.Err() == nil {
			if store.IsClientClosed(err) {
				m.clientGone("")
				return
			}
			m.sched.limiter.Errorf(m.logger, "redisdelay: cannot list topics", err, nil)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.sched.Refresh():
			// Registrations come in bursts (a publisher starting): a short
			// pause lets one refresh serve them, and bounds what a flood
			// of spoofed registrations can cost.
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(m.config.CheckInterval, registeredPause)):
			}
		}
	}
}

// registeredPause is how long a Manager waits after a topic was registered
// before it reads the registry.
const registeredPause = 20 * time.Millisecond

func (m *Manager) discover(ctx context.Context, static bool) error {
	topics := m.config.Topics
	if !static {
		var err error
		if topics, err = store.Topics(ctx, m.sched.Redis(), m.sched.keys); err != nil {
			return err
		}
		topics = slices.DeleteFunc(topics, func(t string) bool { return validateTopic(t) != nil })
	}
	parts, err := storedPartitions(ctx, m.sched.Redis(), m.sched.keys, topics...)
	if err != nil {
		return err
	}
	for i, topic := range topics {
		m.sched.add(topic, parts[i])
	}
	return nil
}

// Running is closed once Run has started scheduling.
func (m *Manager) Running() <-chan struct{} {
	return m.running
}

// Close stops a running Manager and waits until Run has returned. It does not
// close the Redis client. Calling it again, or before Run, is a no-op.
func (m *Manager) Close() error {
	m.mu.Lock()
	started, cancel := m.started, m.cancel
	m.mu.Unlock()
	if !started {
		return nil
	}
	cancel()
	<-m.done
	return nil
}

// scheduler is the scheduling service (internal/scheduling) as a Manager
// and a Subscriber run it: built from their config at start, once the
// client's hub is known and gone is set.
type scheduler struct {
	*scheduling.Scheduler // set by start

	config  ManagerConfig // defaults set
	logger  watermill.LoggerAdapter
	client  redis.UniversalClient
	keys    store.Keys
	limiter *loglimit.Limiter  // repeated errors of the scheduler and what runs beside it
	gone    func(topic string) // called when the client was closed under the scheduler
	readers scheduling.Readers // a Subscriber's subscriptions (nil for a Manager)
	ctx     context.Context    // the scheduler's, set by start: ends when it stops
}

// newScheduler returns a scheduler configured like a Manager (config has its
// defaults set).
func newScheduler(config ManagerConfig, logger watermill.LoggerAdapter) *scheduler {
	return &scheduler{config: config, logger: logger, client: config.Client, keys: store.Keys{Prefix: config.KeyPrefix}, limiter: loglimit.New()}
}

// start starts the scheduling service on the client's hub h (with discover
// listening to topic registrations); partitions are added later.
func (s *scheduler) start(ctx context.Context, discover bool, h *store.Hub) {
	s.Scheduler = scheduling.New(scheduling.Config{
		Client: s.config.Client, Hub: h, Keys: s.keys, Logger: s.logger,
		CheckInterval: s.config.CheckInterval, BatchSize: s.config.BatchSize, TrimInterval: s.config.TrimInterval, Retention: s.config.Retention,
		Metrics: s.config.Metrics, Limiter: s.limiter, Discover: discover, Gone: s.gone, Readers: s.readers,
	})
	s.Scheduler.Start(ctx)
	s.ctx = s.Scheduler.Context()
}

// add starts scheduling the first parts partitions of a topic.
func (s *scheduler) add(topic string, parts int) { s.Add(topic, parts) }

// remove stops scheduling a topic; the returned func waits until its loops
// returned.
func (s *scheduler) remove(topic string) (wait func()) { return s.Remove(topic) }

// stop stops the scheduler and returns once nothing of it runs.
func (s *scheduler) stop() {
	if s.Scheduler != nil {
		s.Stop()
	}
}
