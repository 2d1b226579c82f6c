package redisdelay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Overdue reports how long the earliest waiting message of a topic (over
// its partitions) is overdue, by Redis's clock: 0 when none is due. A
// scheduler moves due messages within milliseconds, so a value that grows
// means that no scheduler runs for the topic (no Manager, and subscribers
// with DisableScheduler) or that it cannot keep up.
func (i *Inspector) Overdue(ctx context.Context, topic string) (time.Duration, error) {
	if err := validateTopic(topic); err != nil {
		return 0, err
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return 0, wrapErr(err, "overdue messages of topic %q", topic)
	}
	var overdue time.Duration
	for _, sh := range shards {
		pipe := i.client.Pipeline()
		head := pipe.ZRangeWithScores(ctx, sh.waiting(), 0, 0)
		now := pipe.Time(ctx)
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("redisdelay: overdue messages of topic %q: %w", topic, err)
		}
		if zs := head.Val(); len(zs) > 0 {
			due := time.UnixMilli(int64(zs[0].Score) / 1024)
			overdue = max(overdue, now.Val().Sub(due))
		}
	}
	return overdue, nil
}

// HealthConfig configures Inspector.Health.
type HealthConfig struct {
	// Topics to check. Empty: every topic in the registry.
	Topics []string

	// StuckAfter: a message pending (fetched, not acknowledged) with no
	// sign of life from its consumer for longer than this is stuck
	// (default 0: twice the group's VisibilityTimeout as stored in Redis,
	// after which a running scheduler would have reclaimed it).
	StuckAfter time.Duration

	// ConsumerIdle: a group with messages ready in a partition and no
	// consumer that read from it within this long has stopped consuming
	// (default 0: twice the group's VisibilityTimeout). A live subscription
	// reads at least every BlockTime, except while a handler runs: keep it
	// above your longest handler.
	ConsumerIdle time.Duration

	// MaxOverdue: a topic whose earliest waiting message is overdue by more
	// than this has no working scheduler (default 1 minute).
	MaxOverdue time.Duration
}

// Problem kinds of a HealthProblem.
const (
	ProblemStuckPending     = "stuck_pending"      // messages pending past StuckAfter
	ProblemNoActiveConsumer = "no_active_consumer" // ready messages, no consumer active within ConsumerIdle
	ProblemSchedulerBehind  = "scheduler_behind"   // waiting messages overdue past MaxOverdue
	ProblemWakeUpsDenied    = "wake_ups_denied"    // a scheduler's Redis user may not subscribe to wake-ups (ACL)
)

// HealthProblem is one problem Health found.
type HealthProblem struct {
	Topic string `json:"topic"`
	Group string `json:"consumer_group,omitempty"`
	// Kind is one of the Problem* constants.
	Kind string `json:"kind"`
	// Detail says what was found and what to check, in a sentence.
	Detail string `json:"detail"`
}

// HealthReport is the result of Inspector.Health.
type HealthReport struct {
	Healthy  bool            `json:"healthy"`
	Topics   int             `json:"topics"` // checked
	Problems []HealthProblem `json:"problems"`
}

// Health checks the topics for consumer groups whose pending messages are
// stuck, whose consumers stopped while messages are ready, and for topics
// whose due messages no scheduler moves. An error means Redis could not be
// read (the report holds what was checked before).
func (i *Inspector) Health(ctx context.Context, config HealthConfig) (HealthReport, error) {
	if config.MaxOverdue == 0 {
		config.MaxOverdue = time.Minute
	}
	if config.StuckAfter < 0 || config.ConsumerIdle < 0 || config.MaxOverdue < 0 {
		return HealthReport{}, fmt.Errorf("redisdelay: HealthConfig durations must not be negative (0 means the default): %+v", config)
	}
	rep := HealthReport{Healthy: true, Problems: []HealthProblem{}}
	if p, err := i.wakeUpsDenied(ctx); err != nil {
		return rep, err
	} else if p != nil {
		rep.Problems = append(rep.Problems, *p)
	}
	topics := config.Topics
	if len(topics) == 0 {
		var err error
		if topics, err = i.Topics(ctx); err != nil {
			return rep, err
		}
		slices.Sort(topics)
	}
	for _, topic := range topics {
		if err := validateTopic(topic); err != nil {
			return rep, err
		}
		problems, err := i.topicHealth(ctx, topic, config)
		if err != nil {
			return rep, fmt.Errorf("redisdelay: health of topic %q: %w", topic, err)
		}
		rep.Topics++
		rep.Problems = append(rep.Problems, problems...)
	}
	rep.Healthy = len(rep.Problems) == 0
	return rep, nil
}

// wakeUpsDenied reports a scheduler (of a Manager or Subscriber) whose
// Redis user may not subscribe to the wake channels: the note it keeps in
// Redis while that lasts (see scheduler.watchACL). Not a topic's problem.
func (i *Inspector) wakeUpsDenied(ctx context.Context) (*HealthProblem, error) {
	detail, err := i.client.Get(ctx, i.keys.wakeDenied()).Result()
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redisdelay: health: read the wake-up subscription status: %w", err)
	}
	return &HealthProblem{Kind: ProblemWakeUpsDenied, Detail: detail}, nil
}

func (i *Inspector) topicHealth(ctx context.Context, topic string, config HealthConfig) ([]HealthProblem, error) {
	var problems []HealthProblem
	overdue, err := i.Overdue(ctx, topic)
	if err != nil {
		return nil, err
	}
	if overdue > config.MaxOverdue {
		problems = append(problems, HealthProblem{Topic: topic, Kind: ProblemSchedulerBehind,
			Detail: fmt.Sprintf("the earliest waiting message is %s overdue (more than %s): no scheduler runs for the topic (run a Manager, or subscribers without DisableScheduler) or it cannot keep up",
				overdue.Round(time.Millisecond), config.MaxOverdue)})
	}
	shards, err := i.shards(ctx, topic)
	if err != nil {
		return nil, err
	}
	stuck := map[string]string{}   // group -> detail of the first stuck entry found
	stopped := map[string]string{} // group -> detail of the first partition found
	var groups []string
	for part, sh := range shards {
		st, err := i.partitionStats(ctx, sh)
		if err != nil {
			return nil, err
		}
		for _, g := range st.Groups {
			if !slices.Contains(groups, g.Group) {
				groups = append(groups, g.Group)
			}
			vis, err := i.visibility(ctx, sh, g.Group)
			if err != nil {
				return nil, err
			}
			where := ""
			if len(shards) > 1 {
				where = fmt.Sprintf(" in partition %d", part)
			}
			if _, ok := stuck[g.Group]; !ok && g.Pending > 0 {
				limit := config.StuckAfter
				if limit == 0 {
					limit = 2 * vis
				}
				if d, err := i.stuckEntry(ctx, sh, g.Group, limit); err != nil {
					return nil, err
				} else if d != "" {
					stuck[g.Group] = d + where + fmt.Sprintf(" (limit %s): its consumer stopped and no scheduler reclaims it (run a Manager, or subscribers without DisableScheduler)", limit)
				}
			}
			if _, ok := stopped[g.Group]; !ok && g.Ready != 0 {
				limit := config.ConsumerIdle
				if limit == 0 {
					limit = 2 * vis
				}
				if d, err := i.idleConsumers(ctx, sh, g.Group, limit); err != nil {
					return nil, err
				} else if d != "" {
					stopped[g.Group] = fmt.Sprintf("%d message(s) ready%s and %s (limit %s): the group's subscribers stopped; if the group is abandoned, delete it with Inspector.DeleteGroup",
						g.Ready, where, d, limit)
				}
			}
		}
	}
	for _, g := range groups {
		if d, ok := stuck[g]; ok {
			problems = append(problems, HealthProblem{Topic: topic, Group: g, Kind: ProblemStuckPending, Detail: d})
		}
		if d, ok := stopped[g]; ok {
			problems = append(problems, HealthProblem{Topic: topic, Group: g, Kind: ProblemNoActiveConsumer, Detail: d})
		}
	}
	return problems, nil
}

// visibility is the group's stored VisibilityTimeout (the default when
// none is stored).
func (i *Inspector) visibility(ctx context.Context, sh shard, group string) (time.Duration, error) {
	v, err := i.client.HGet(ctx, sh.meta(group), "vis").Result()
	if err == redis.Nil {
		return defaultVisibilityTimeout, nil
	}
	if err != nil {
		return 0, err
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return defaultVisibilityTimeout, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// stuckEntry describes an entry of the group pending longer than limit in
// either stream, or returns "".
func (i *Inspector) stuckEntry(ctx context.Context, sh shard, group string, limit time.Duration) (string, error) {
	for _, stream := range []string{sh.stream(), sh.redelivery(group)} {
		res, err := i.client.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: stream, Group: group, Idle: limit, Start: "-", End: "+", Count: 1,
		}).Result()
		if err != nil && !isNoSuchKey(err) && !isNoGroup(err) {
			return "", err
		}
		if len(res) > 0 {
			p := res[0]
			return fmt.Sprintf("entry %s has been pending for consumer %q for %s without a lease renewal", p.ID, p.Consumer, p.Idle.Round(time.Millisecond)), nil
		}
	}
	return "", nil
}

// idleConsumers describes the group's consumers of the partition when none
// read within limit, or returns "".
func (i *Inspector) idleConsumers(ctx context.Context, sh shard, group string, limit time.Duration) (string, error) {
	cs, err := i.client.XInfoConsumers(ctx, sh.stream(), group).Result()
	if err != nil && !isNoSuchKey(err) && !isNoGroup(err) {
		return "", err
	}
	if len(cs) == 0 {
		return "the group has no consumer", nil
	}
	least := cs[0].Idle
	for _, c := range cs[1:] {
		least = min(least, c.Idle)
	}
	if least <= limit {
		return "", nil
	}
	return fmt.Sprintf("none of its %d consumer(s) read for %s", len(cs), least.Round(time.Millisecond)), nil
}

func isNoGroup(err error) bool {
	return err != nil && len(err.Error()) >= 7 && err.Error()[:7] == "NOGROUP"
}

// HealthHandler returns an http.Handler that runs insp.Health with config
// on each request and answers 200 with the report as JSON when healthy,
// 503 otherwise; when Redis cannot be read (within timeout, default 5s)
// also 503, with {"healthy": false, "error": "..."}. Use it as a
// Kubernetes liveness or readiness probe of a Manager, or as an alerting
// endpoint.
func HealthHandler(insp *Inspector, config HealthConfig, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		rep, err := insp.Health(ctx, config)
		var body any = rep
		if err != nil {
			body = struct {
				HealthReport
				Error string `json:"error"`
			}{HealthReport{Topics: rep.Topics, Problems: rep.Problems}, err.Error()}
		}
		w.Header().Set("Content-Type", "application/json")
		if err != nil || !rep.Healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(body)
	})
}
