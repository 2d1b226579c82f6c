package redisdelay

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

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
