package redisdelay

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/scheduling"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// HealthConfig configures Inspector.Health and HealthHandler.
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

	// TimedOutWithin: a group whose handler ran past its timeout
	// (SubscriberConfig.HandlerTimeout) within this long is reported
	// (default 15 minutes).
	TimedOutWithin time.Duration

	// MaxOverdue: a topic whose earliest waiting message is overdue by more
	// than this has no working scheduler (default 1 minute).
	MaxOverdue time.Duration

	// ShowConsumers names consumers in the problems' details (the consumer
	// a stuck message is pending for). Off by default: a health endpoint is
	// often reachable by more people than the names are meant for.
	ShowConsumers bool

	// CheckEvery is for HealthHandler only: how old its report may get
	// before a request starts the next check, in the background (default
	// 10s). Requests answer from the last report at once.
	CheckEvery time.Duration
}

// withDefaults returns the config with its defaults set, or an error.
func (c HealthConfig) withDefaults() (HealthConfig, error) {
	if c.StuckAfter < 0 || c.ConsumerIdle < 0 || c.MaxOverdue < 0 || c.CheckEvery < 0 || c.TimedOutWithin < 0 {
		return c, fmt.Errorf("redisdelay: HealthConfig durations must not be negative (0 means the default): %+v", c)
	}
	if c.MaxOverdue == 0 {
		c.MaxOverdue = time.Minute
	}
	if c.CheckEvery == 0 {
		c.CheckEvery = 10 * time.Second
	}
	if c.TimedOutWithin == 0 {
		c.TimedOutWithin = 15 * time.Minute
	}
	return c, nil
}

// Problem kinds of a HealthProblem.
const (
	ProblemStuckPending     = "stuck_pending"      // messages pending past StuckAfter
	ProblemNoActiveConsumer = "no_active_consumer" // ready messages, no consumer active within ConsumerIdle
	ProblemSchedulerBehind  = "scheduler_behind"   // waiting messages overdue past MaxOverdue
	ProblemWakeUpsDenied    = "wake_ups_denied"    // a scheduler's Redis user may not subscribe to wake-ups (ACL)
	ProblemHandlerTimeouts  = "handler_timeouts"   // a handler ran past its HandlerTimeout within TimedOutWithin
	ProblemNewerStorage     = "newer_storage"      // a live process met stored items of a newer storage level and left them (docs/upgrading.md)
	// ProblemNoConsumerGroup: messages made ready in a topic that has no
	// consumer group (a schedule ticking into it, a publisher ahead of
	// its subscribers): nothing reads them, and they pile up in the ready
	// stream (or, grouped, wait for the first group).
	ProblemNoConsumerGroup = "no_consumer_group"
	// The Redis server's maxmemory policy (allkeys-*) evicts message data
	// at maxmemory: messages are lost without an error.
	ProblemEvictionPolicy = "eviction_policy"
)

// HealthProblem is one problem Health found.
type HealthProblem struct {
	// Topic is empty for a problem of the Redis server (ProblemEvictionPolicy).
	Topic string `json:"topic,omitempty"`
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

// serverChecks find the problems that do not belong to a topic, once per
// report. An error means Redis could not be read.
var serverChecks = []func(ctx context.Context, i *Inspector, config HealthConfig) ([]HealthProblem, error){
	evictionProblems,
	wakeUpsDenied,
	newerStorage,
}

// newerStorage reports the live processes that met stored items a newer
// release wrote (Inspector.Storage): they left them for a process that
// reads them, which none may be running.
func newerStorage(ctx context.Context, i *Inspector, _ HealthConfig) ([]HealthProblem, error) {
	s, err := i.Storage(ctx)
	if err != nil {
		return nil, wrap(err, "health")
	}
	var problems []HealthProblem
	if s.Parked > 0 {
		problems = append(problems, HealthProblem{Kind: ProblemNewerStorage, Detail: fmt.Sprintf(
			"%d far message(s) could not be read by the schedulers (a newer release's, or damaged) and were parked, the last in %s:fpark: they wait there, not lost, for the release that wrote them (redisdelay storage lists the releases live; docs/upgrading.md)",
			s.Parked, s.ParkedIn)})
	}
	for _, p := range s.Processes {
		if p.Unreadable > 0 {
			problems = append(problems, HealthProblem{Kind: ProblemNewerStorage, Detail: fmt.Sprintf(
				"process %s (%s, release %s, reads storage level %d) met %d stored items of a newer level and left them in place: run a release that reads them (redisdelay storage lists the live ones), or pin the level and rewrite (docs/upgrading.md)",
				p.ID, p.Host, p.Version, p.Level, p.Unreadable)})
		}
	}
	return problems, nil
}

// evictionProblems reports a server whose maxmemory policy evicts message
// data. The volatile-* policies evict only the keys that expire (leases
// and ordered ownerships): the scheduler logs them at start, and
// docs/guarantees.md says what they do, but they lose no message.
func evictionProblems(ctx context.Context, i *Inspector, _ HealthConfig) ([]HealthProblem, error) {
	risks, err := scheduling.ReadEvictionRisks(ctx, i.client)
	if err != nil {
		return nil, wrap(err, "health")
	}
	var problems []HealthProblem
	for _, r := range risks {
		if r.Messages {
			problems = append(problems, HealthProblem{Kind: ProblemEvictionPolicy, Detail: r.Detail()})
		}
	}
	return problems, nil
}

// wakeUpsDenied reports a scheduler (of a Manager or Subscriber) whose
// Redis user may not subscribe to the wake channels: the note it keeps in
// Redis while that lasts (see internal/scheduling: Scheduler.watchACL).
func wakeUpsDenied(ctx context.Context, i *Inspector, _ HealthConfig) ([]HealthProblem, error) {
	detail, err := store.WakeUpsDenied(ctx, i.client, i.keys)
	if err != nil {
		return nil, wrap(err, "health: read the wake-up subscription status")
	}
	if detail == "" {
		return nil, nil
	}
	return []HealthProblem{{Kind: ProblemWakeUpsDenied, Detail: detail}}, nil
}

func (i *Inspector) serverProblems(ctx context.Context, config HealthConfig) ([]HealthProblem, error) {
	var problems []HealthProblem
	for _, check := range serverChecks {
		p, err := check(ctx, i, config)
		if err != nil {
			return problems, err
		}
		problems = append(problems, p...)
	}
	return problems, nil
}

// healthBatch is the most topics one round of pipelines reads: it bounds
// the pipelines' size in Health, and the work of each check of
// HealthHandler, which checks the next healthBatch topics each time.
const healthBatch = 1000

// Health checks the topics for consumer groups whose pending messages are
// stuck, whose consumers stopped while messages are ready, and for topics
// whose due messages no scheduler moves or that hold ready messages with
// no consumer group to read them; and the Redis server for a maxmemory
// policy that evicts messages. It reads a thousand topics in a few
// pipelined round trips, about seven commands per partition. An error
// means Redis could not be read (the report holds what was checked before).
func (i *Inspector) Health(ctx context.Context, config HealthConfig) (HealthReport, error) {
	rep := HealthReport{Healthy: true, Problems: []HealthProblem{}}
	config, err := config.withDefaults()
	if err != nil {
		return HealthReport{}, err
	}
	topics, err := i.healthTopics(ctx, config)
	if err != nil {
		return rep, err
	}
	for start := 0; start < len(topics); start += healthBatch {
		batch := topics[start:min(start+healthBatch, len(topics))]
		problems, err := i.checkTopics(ctx, batch, config)
		if err != nil {
			rep.Healthy = len(rep.Problems) == 0
			return rep, err
		}
		rep.Topics += len(batch)
		rep.Problems = append(rep.Problems, problems...)
	}
	problems, err := i.serverProblems(ctx, config)
	rep.Problems = append(rep.Problems, problems...)
	rep.Healthy = len(rep.Problems) == 0
	return rep, err
}

// healthTopics returns the topics to check, sorted: the configured ones
// (validated), or those of the registry.
func (i *Inspector) healthTopics(ctx context.Context, config HealthConfig) ([]string, error) {
	if len(config.Topics) > 0 {
		for _, t := range config.Topics {
			if err := validateTopic(t); err != nil {
				return nil, err
			}
		}
		return slices.Sorted(slices.Values(config.Topics)), nil
	}
	topics, err := i.Topics(ctx)
	if err != nil {
		return nil, err
	}
	topics = slices.DeleteFunc(topics, func(t string) bool { return validateTopic(t) != nil })
	slices.Sort(topics)
	return topics, nil
}

// checkTopics finds the problems of topics from what one read of them
// (store.ReadHealth, three round trips) returns: a scheduler behind, then
// each group's stuck entries, stopped consumers and handler timeouts.
func (i *Inspector) checkTopics(ctx context.Context, topics []string, config HealthConfig) ([]HealthProblem, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	fail := func(err error) ([]HealthProblem, error) {
		return nil, wrap(err, "health of %d topic(s) from %q", len(topics), topics[0])
	}
	counts, err := storedPartitions(ctx, i.client, i.keys, topics...)
	if err != nil {
		return fail(err)
	}
	snap, err := store.ReadHealth(ctx, i.client, i.keys, topics, counts, config.groupLimits)
	if err != nil {
		return fail(err)
	}
	var problems []HealthProblem
	parts := snap.Partitions
	for k := 0; k < len(parts); {
		end := k
		for end < len(parts) && parts[end].Topic == parts[k].Topic {
			end++
		}
		topic := topics[parts[k].Topic]
		if p, ok := overdueProblem(topic, parts[k:end], config); ok {
			problems = append(problems, p)
		}
		if p, ok := noGroupProblem(topic, parts[k:end]); ok {
			problems = append(problems, p)
		}
		problems = append(problems, groupProblems(topic, snap, k, end, config)...)
		k = end
	}
	return problems, nil
}

// groupLimits are a group's limits of the health check (HealthConfig's
// StuckAfter and ConsumerIdle, else twice its visibility timeout vis; 0:
// the default).
func (c HealthConfig) groupLimits(vis time.Duration) (stuck, idle time.Duration) {
	if vis <= 0 {
		vis = defaultVisibilityTimeout
	}
	stuck, idle = c.StuckAfter, c.ConsumerIdle
	if stuck == 0 {
		stuck = 2 * vis
	}
	if idle == 0 {
		idle = 2 * vis
	}
	return stuck, idle
}

// overdueProblem reports a topic (its partitions parts) whose earliest
// waiting message is overdue past the limit.
func overdueProblem(topic string, parts []store.HealthPartition, config HealthConfig) (HealthProblem, bool) {
	var overdue time.Duration
	for _, part := range parts {
		overdue = max(overdue, part.Overdue)
	}
	if overdue <= config.MaxOverdue {
		return HealthProblem{}, false
	}
	return HealthProblem{Topic: topic, Kind: ProblemSchedulerBehind,
		Detail: fmt.Sprintf("the earliest waiting message is %s overdue (more than %s): no scheduler runs for the topic (run a Manager, or subscribers without DisableScheduler) or it cannot keep up",
			overdue.Round(time.Millisecond), config.MaxOverdue)}, true
}

// noGroupProblem reports a topic (its partitions parts) holding ready
// messages while it has no consumer group: nobody will read them until
// one is created. (Grouped messages due meanwhile wait aside, counted by
// TopicStats.WaitingForGroup: reading that count here would cost a
// command more per partition.)
func noGroupProblem(topic string, parts []store.HealthPartition) (HealthProblem, bool) {
	var ready int64
	for _, p := range parts {
		if p.Groups > 0 {
			return HealthProblem{}, false
		}
		ready += p.Stream
	}
	if ready == 0 {
		return HealthProblem{}, false
	}
	return HealthProblem{Topic: topic, Kind: ProblemNoConsumerGroup,
		Detail: fmt.Sprintf("%d message(s) in the ready stream, but the topic has no consumer group: nothing reads them and they pile up; start the topic's subscribers, or stop what publishes to it (a schedule? redisdelay schedules)",
			ready)}, true
}

// groupProblems reports the problems of each group of a topic (partitions
// k to end of snap), each by the first partition where it shows.
func groupProblems(topic string, snap store.HealthSnapshot, k, end int, config HealthConfig) []HealthProblem {
	var names []string
	stuck := map[string]string{}      // group -> detail of the first stuck entry found
	stopped := map[string]string{}    // group -> detail of the first partition found
	timeouts := map[string][2]int64{} // group -> count, latest (ms) over its partitions
	for _, g := range snap.Groups {
		if g.Part < k || g.Part >= end {
			continue
		}
		if !slices.Contains(names, g.Name) {
			names = append(names, g.Name)
		}
		if g.Timeouts > 0 {
			t := timeouts[g.Name]
			timeouts[g.Name] = [2]int64{t[0] + g.Timeouts, max(t[1], g.TimeoutAt)}
		}
		where := ""
		if end-k > 1 {
			where = fmt.Sprintf(" in partition %d", snap.Partitions[g.Part].N)
		}
		if _, ok := stuck[g.Name]; !ok && g.Stuck != nil {
			stuck[g.Name] = stuckDetail(g.Stuck, config.ShowConsumers) + where + fmt.Sprintf(" (limit %s): its consumer stopped and no scheduler reclaims it (run a Manager, or subscribers without DisableScheduler)", g.StuckLimit)
		}
		if _, ok := stopped[g.Name]; !ok && g.Ready != 0 && !g.Paused {
			if d := idleDetail(g.ConsumerIdle, g.IdleLimit); d != "" {
				stopped[g.Name] = fmt.Sprintf("%d message(s) ready%s and %s (limit %s): the group's subscribers stopped; if the group is abandoned, delete it: redisdelay delete-group %s %s --yes (Inspector.DeleteGroup)",
					g.Ready, where, d, g.IdleLimit, topic, g.Name)
			}
		}
	}
	var problems []HealthProblem
	for _, g := range names {
		if d, ok := stuck[g]; ok {
			problems = append(problems, HealthProblem{Topic: topic, Group: g, Kind: ProblemStuckPending, Detail: d})
		}
		if d, ok := stopped[g]; ok {
			problems = append(problems, HealthProblem{Topic: topic, Group: g, Kind: ProblemNoActiveConsumer, Detail: d})
		}
		if t := timeouts[g]; t[0] > 0 {
			if ago := snap.Now.Sub(time.UnixMilli(t[1])); ago <= config.TimedOutWithin {
				problems = append(problems, HealthProblem{Topic: topic, Group: g, Kind: ProblemHandlerTimeouts,
					Detail: fmt.Sprintf("a handler ran past its timeout %s ago (%d time(s) in all): its message was retried or dead-lettered, and the handler may still be running, stuck on a call that never returns (a lock, a network call without a deadline); if handlers legitimately take that long, raise SubscriberConfig.HandlerTimeout",
						max(ago, 0).Round(time.Second), t[0])})
			}
		}
	}
	return problems
}

// stuckDetail describes an entry pending past its limit.
func stuckDetail(p *store.StuckEntry, showConsumer bool) string {
	whose := ""
	if showConsumer {
		whose = fmt.Sprintf(" for consumer %q", p.Consumer)
	}
	return fmt.Sprintf("entry %s has been pending%s for %s without a lease renewal", p.ID, whose, p.Idle.Round(time.Millisecond))
}

// idleDetail describes a partition's consumers of a group when none read
// within limit, or returns "".
func idleDetail(idle []time.Duration, limit time.Duration) string {
	if len(idle) == 0 {
		return "the group has no consumer"
	}
	least := slices.Min(idle)
	if least <= limit {
		return ""
	}
	return fmt.Sprintf("none of its %d consumer(s) read for %s", len(idle), least.Round(time.Millisecond))
}

// HealthHandler returns an http.Handler that answers with the last health
// report of insp as JSON: 200 when healthy, 503 when a problem was found
// or Redis could not be read (then with "error"). Requests answer at once
// from the last report and cost Redis nothing; a request finding the
// report older than config.CheckEvery starts the next check in the
// background, which reads the next thousand topics (round robin) and the
// server, within timeout (default 5s), so its cost does not grow with the
// topics: with more, a problem shows within one check per thousand topics.
// The first request waits for the first check, up to timeout; if that is
// still running then, it answers 200 when Redis answers a PING. Use it as
// a Kubernetes liveness or readiness probe of a Manager, or as an
// alerting endpoint.
func HealthHandler(insp *Inspector, config HealthConfig, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &healthHandler{insp: insp, config: config, timeout: timeout, byTopic: map[string][]HealthProblem{}}
}

type healthHandler struct {
	insp    *Inspector
	config  HealthConfig
	timeout time.Duration

	mu      sync.Mutex
	byTopic map[string][]HealthProblem // problems of each topic checked, at its last check
	server  []HealthProblem
	next    int           // where the next check starts in the sorted topics
	checked time.Time     // when the last check succeeded; zero: none did yet
	err     error         // of the last check, nil when it succeeded
	running chan struct{} // closed when the running check ends; nil: none runs
}

func (h *healthHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	config, err := h.config.withDefaults()
	if err == nil && h.running == nil && (h.err != nil || time.Since(h.checked) >= config.CheckEvery) {
		h.running = make(chan struct{})
		go h.check(config, h.running)
	}
	first, running := h.checked.IsZero() && h.err == nil, h.running
	h.mu.Unlock()
	if first && running != nil {
		select {
		case <-running:
		case <-time.After(h.timeout):
		case <-r.Context().Done():
			return
		}
	}

	h.mu.Lock()
	body := struct {
		HealthReport
		CheckedAt *time.Time `json:"checked_at,omitempty"`
		Error     string     `json:"error,omitempty"`
		Note      string     `json:"note,omitempty"`
	}{HealthReport: h.report()}
	if !h.checked.IsZero() {
		at := h.checked
		body.CheckedAt = &at
	}
	if err == nil {
		err = h.err
	}
	first = h.checked.IsZero() && err == nil
	h.mu.Unlock()
	if first {
		err = h.ping(r.Context())
		body.Note = "the first check is still running; Redis answers"
	}
	if err != nil {
		body.Healthy, body.Error, body.Note = false, err.Error(), ""
	}
	w.Header().Set("Content-Type", "application/json")
	if !body.Healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(body)
}

// ping asks Redis for a PING within the handler's timeout. A client
// without ContextTimeoutEnabled waits for its ReadTimeout despite the
// context, so the request does not wait for the reply past the timeout.
func (h *healthHandler) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	pong := make(chan error, 1)
	go func() {
		defer cancel()
		pong <- store.Ping(ctx, h.insp.client)
	}()
	select {
	case err := <-pong:
		return err
	case <-ctx.Done():
		return fmt.Errorf("redisdelay: Redis did not answer a PING within %s, and the first health check is still running", h.timeout)
	}
}

// report is the last problems found (h.mu held).
func (h *healthHandler) report() HealthReport {
	rep := HealthReport{Topics: len(h.byTopic), Problems: []HealthProblem{}}
	for _, t := range slices.Sorted(maps.Keys(h.byTopic)) {
		rep.Problems = append(rep.Problems, h.byTopic[t]...)
	}
	rep.Problems = append(rep.Problems, h.server...)
	rep.Healthy = len(rep.Problems) == 0
	return rep
}

// check reads the next healthBatch topics and the server, then closes done.
func (h *healthHandler) check(config HealthConfig, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	h.mu.Lock()
	start := h.next
	h.mu.Unlock()
	topics, err := h.insp.healthTopics(ctx, config)
	var batch []string
	var problems, server []HealthProblem
	if err == nil {
		if start >= len(topics) {
			start = 0
		}
		batch = topics[start:min(start+healthBatch, len(topics))]
		problems, err = h.insp.checkTopics(ctx, batch, config)
	}
	if err == nil {
		server, err = h.insp.serverProblems(ctx, config)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = nil
	if h.err = err; err != nil {
		return
	}
	h.checked, h.next, h.server = time.Now(), start+len(batch), server
	if len(h.byTopic) > 0 {
		current := make(map[string]bool, len(topics))
		for _, t := range topics {
			current[t] = true
		}
		maps.DeleteFunc(h.byTopic, func(t string, _ []HealthProblem) bool { return !current[t] })
	}
	for _, t := range batch {
		h.byTopic[t] = nil
	}
	for _, p := range problems {
		h.byTopic[p.Topic] = append(h.byTopic[p.Topic], p)
	}
}
