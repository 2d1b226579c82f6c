package redisdelay

import (
	"context"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/loglimit"
	"github.com/redisdelay/watermill-redisdelay/internal/scheduling"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

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
		Metrics: s.config.Metrics, Limiter: s.limiter, Discover: discover, Gone: s.gone,
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
