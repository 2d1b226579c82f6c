package consumption

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/balance"
)

// An owner is stuck when a step outlasts half its ownership lease (a
// second at least), or a message waits for the application past
// HandlerTimeout; never while it waits on something bounded or wanted.
func TestOrdered_OwnerStuck(t *testing.T) {
	s := &Subscriber{config: Config{VisibilityTimeout: 30 * time.Second, HandlerTimeout: time.Minute}}
	sub := &subscription{s: s, order: newOrdering(balance.New(1))}
	at := func(phase int64, ago time.Duration) bool {
		sub.order.phase.Store(time.Now().Add(-ago).UnixMilli()<<2 | phase)
		_, stuck := sub.order.stuck(s.ownLease(), s.config.HandlerTimeout)
		return stuck
	}
	// The lease is 20 s: a step may take 10 s.
	require.False(t, at(phaseStep, 9*time.Second))
	require.True(t, at(phaseStep, 11*time.Second))
	require.False(t, at(phaseWait, time.Hour))
	require.False(t, at(phaseSend, 59*time.Second))
	require.True(t, at(phaseSend, 61*time.Second))
	s.config.HandlerTimeout = -1 // no bound
	require.False(t, at(phaseSend, time.Hour))

	s.config.VisibilityTimeout = time.Second
	require.False(t, at(phaseStep, 900*time.Millisecond), "a second at least")

	sub.order.enter(phaseSend)
	require.Equal(t, phaseSend, sub.order.phase.Load()&3)
}
