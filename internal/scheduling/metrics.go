package scheduling

import (
	"sync"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Metrics receives the scheduler's work: the root package's Metrics
// satisfies it (see there for the methods' contracts).
type Metrics interface {
	Promoted(topic string, moved int, late time.Duration)
	Reclaimed(topic, consumerGroup string, requeued, deadLettered int)
}

// schedMetrics reports a scheduler's work. A nil *schedMetrics records
// nothing.
type schedMetrics struct {
	m Metrics

	mu     sync.Mutex
	expect map[store.Shard]time.Time // per scheduled partition: when its earliest waiting message is due (host clock)
}

// newSchedMetrics returns what reports a scheduler's work to m, or nil.
func newSchedMetrics(m Metrics) *schedMetrics {
	if m == nil {
		return nil
	}
	return &schedMetrics{m: m, expect: map[store.Shard]time.Time{}}
}

// promotedTick records one tick of a scheduler on a partition of topic:
// the messages it moved and, when it holds the lease, waitUs (µs until the
// earliest message still waiting is due, 0 when more is due now, -1 when
// nothing waits). The lateness of a tick that moved messages is measured
// against the due time the previous tick reported, by the host clock.
func (sm *schedMetrics) promotedTick(sh store.Shard, topic string, moved, waitUs int64, held bool) {
	if sm == nil {
		return
	}
	now := time.Now()
	late := time.Duration(-1)
	sm.mu.Lock()
	if due, ok := sm.expect[sh]; ok && moved > 0 && !now.Before(due) {
		late = now.Sub(due)
	}
	if held && waitUs >= 0 {
		sm.expect[sh] = now.Add(time.Duration(waitUs) * time.Microsecond)
	} else {
		delete(sm.expect, sh)
	}
	sm.mu.Unlock()
	if moved > 0 {
		sm.m.Promoted(topic, int(moved), late)
	}
}

// forget drops a partition's scheduling state, when its loop ends.
func (sm *schedMetrics) forget(sh store.Shard) {
	if sm == nil {
		return
	}
	sm.mu.Lock()
	delete(sm.expect, sh)
	sm.mu.Unlock()
}

// reclaimedTick records a reclaim of a group's messages: requeued ones and
// those buried in the dead letters.
func (sm *schedMetrics) reclaimedTick(topic, group string, requeued, buried int64) {
	if sm == nil || requeued+buried == 0 {
		return
	}
	sm.m.Reclaimed(topic, group, int(requeued), int(buried))
}
