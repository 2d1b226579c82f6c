package redisdelay_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

func TestDelay_For(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	ch := subscribe(t, sub, env.topic)
	defer sub.Close()

	start := time.Now()
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(1500*time.Millisecond), "x")))
	msg := receive(t, ch, 2500*time.Millisecond)
	took := time.Since(start)
	msg.Ack()
	assert.GreaterOrEqual(t, took, 1500*time.Millisecond, "delivered early")
	t.Logf("delay 1.5s delivered after %s", took)
}

func TestDelay_Until(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	ch := subscribe(t, sub, env.topic)
	defer sub.Close()

	due := time.Now().Add(1200 * time.Millisecond)
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.Until(due), "x")))
	msg := receive(t, ch, 2500*time.Millisecond)
	msg.Ack()
	assert.False(t, time.Now().Before(due), "delivered before its until time")

	// A due time in the past, and no delay at all, are delivered at once.
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.Until(time.Now().Add(-time.Hour)), "past")))
	require.NoError(t, env.pub.Publish(env.topic, message.NewMessage(watermill.NewUUID(), []byte("now"))))
	for _, want := range []string{"past", "now"} {
		msg := receive(t, ch, time.Second)
		assert.Equal(t, want, string(msg.Payload))
		msg.Ack()
	}
}

// A thousand messages with random delays, published from several goroutines:
// each arrives, once, never before its due time.
func TestDelay_MixOfThousand(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("1,000 mixed delays; TestDelay_For and TestDelay_Until cover both kinds of delay")
	}
	env := setup(t)
	sub := env.subscriber(t, "g")
	require.NoError(t, sub.SubscribeInitialize(env.topic))

	const n = 1000
	earliest := make(map[string]time.Time, n) // the earliest instant each may arrive
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			for i := 0; i < n/10; i++ {
				d := time.Duration(r.Intn(3000)) * time.Millisecond
				msg := delayed(delay.For(d), fmt.Sprint(i))
				before := time.Now()
				assert.NoError(t, env.pub.Publish(env.topic, msg))
				mu.Lock()
				earliest[msg.UUID] = before.Add(d)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()

	ch := subscribe(t, sub, env.topic)
	defer sub.Close()
	seen := map[string]int{}
	var early []string
	var worst time.Duration
	deadline := time.After(10 * time.Second)
	for len(seen) < n {
		select {
		case msg := <-ch:
			now := time.Now()
			seen[msg.UUID]++
			if now.Before(earliest[msg.UUID]) {
				early = append(early, msg.UUID)
			}
			worst = max(worst, now.Sub(earliest[msg.UUID]))
			msg.Ack()
		case <-deadline:
			t.Fatalf("received %d of %d", len(seen), n)
		}
	}
	nothing(t, ch, 200*time.Millisecond)
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	t.Logf("%d messages: %d duplicates, %d early, latest delivery %s after due (includes waiting for the reader)", n, dups, len(early), worst)
	assert.Zero(t, dups, "duplicates")
	assert.Empty(t, early, "delivered before due")
}

// middleware.DelayOnError in a real Router: a failed message comes back only
// after the delay, with its attempt number.
func TestDelay_OnErrorInRouter(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	router.AddMiddleware((&middleware.DelayOnError{
		InitialInterval: 700 * time.Millisecond, MaxInterval: time.Second, Multiplier: 2,
	}).Middleware)

	type delivery struct {
		at      time.Time
		attempt string
	}
	deliveries := make(chan delivery, 10)
	router.AddNoPublisherHandler("h", env.topic, sub, func(msg *message.Message) error {
		deliveries <- delivery{time.Now(), msg.Metadata.Get(redisdelay.AttemptKey)}
		if msg.Metadata.Get(redisdelay.AttemptKey) == "1" {
			return errors.New("first attempt fails")
		}
		return nil
	})
	go func() { _ = router.Run(context.Background()) }()
	defer router.Close()
	<-router.Running()

	require.NoError(t, env.pub.Publish(env.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	first := <-deliveries
	var second delivery
	select {
	case second = <-deliveries:
	case <-time.After(3 * time.Second):
		t.Fatal("not redelivered")
	}
	assert.Equal(t, "1", first.attempt)
	assert.Equal(t, "2", second.attempt)
	assert.GreaterOrEqual(t, second.at.Sub(first.at), 700*time.Millisecond, "redelivered before the DelayOnError interval")
	select {
	case d := <-deliveries:
		t.Fatalf("unexpected third delivery (attempt %s)", d.attempt)
	case <-time.After(300 * time.Millisecond):
	}
}

// Without delay metadata from the handler, a Nack waits RetryDelay.
func TestDelay_NackUsesRetryDelay(t *testing.T) {
	t.Parallel()
	env := setup(t)
	var attempts []int
	sub := env.subscriber(t, "g", func(c *redisdelay.SubscriberConfig) {
		c.RetryDelay = func(attempt int) time.Duration {
			attempts = append(attempts, attempt)
			return 600 * time.Millisecond
		}
	})
	defer sub.Close()
	ch := subscribe(t, sub, env.topic)

	// Published with a delay: the delay metadata it carries must not be
	// mistaken for a delay the handler asked for.
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(100*time.Millisecond), "x")))
	msg := receive(t, ch, 2*time.Second)
	nacked := time.Now()
	msg.Nack()
	msg = receive(t, ch, 2*time.Second)
	msg.Ack()
	assert.GreaterOrEqual(t, time.Since(nacked), 600*time.Millisecond)
	// The Subscriber also evaluates RetryDelay for the first attempts when it
	// is created (the policy reclaim uses); the Nack asked for attempt 1.
	assert.Equal(t, 1, attempts[len(attempts)-1])
	assert.Equal(t, "2", msg.Metadata.Get(redisdelay.AttemptKey))
}

// A handler that nacks with Watermill's delay.Until(year 9999) (a delay
// that overflows a time.Duration) or anything beyond 100 years: the message
// goes to the dead letters with a reason saying so, in plain and ordered
// subscriptions, rather than coming back at once.
func TestDelay_NackWithFarDelayIsDeadLettered(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		ordered bool
		delay   delay.Delay
		reason  string
	}{
		{"year 9999", false, delay.Until(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)), "a redelivery delay of more than 292 years"},
		{"year 9999, ordered", true, delay.Until(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)), "a redelivery delay of more than 292 years"},
		{"101 years", false, delay.For(101 * 365 * 24 * time.Hour), "a redelivery delay of 8847"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := setup(t)
			sub := env.subscriber(t, "g", func(sc *redisdelay.SubscriberConfig) {
				sc.Ordered = c.ordered
				sc.MaxAttempts = 5
			})
			defer sub.Close()
			ch := subscribe(t, sub, env.topic)
			require.NoError(t, env.pub.Publish(env.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
			msg := receive(t, ch, 2*time.Second)
			delay.Message(msg, c.delay)
			msg.Nack()
			nothing(t, ch, 500*time.Millisecond)

			dead, err := env.insp.DeadLetters(context.Background(), env.topic, "g", "", 10)
			require.NoError(t, err)
			require.Len(t, dead, 1)
			assert.Equal(t, 1, dead[0].Attempts)
			assert.Contains(t, dead[0].Reason, "redisdelay: nack delay too far: the handler asked for "+c.reason)
			assert.Contains(t, dead[0].Reason, "beyond the limit of 100 years: set a shorter delay (e.g. DelayOnError's MaxInterval), then requeue the dead letter")
			t.Logf("reason: %s", dead[0].Reason)
		})
	}
}

func TestDelay_NackStaysInItsGroup(t *testing.T) {
	t.Parallel()
	env := setup(t)
	subA := env.subscriber(t, "a", noRetryDelay)
	subB := env.subscriber(t, "b", noRetryDelay)
	require.NoError(t, subA.SubscribeInitialize(env.topic))
	require.NoError(t, subB.SubscribeInitialize(env.topic))
	require.NoError(t, env.pub.Publish(env.topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))

	a, b := subscribe(t, subA, env.topic), subscribe(t, subB, env.topic)
	defer subA.Close()
	defer subB.Close()
	receive(t, b, time.Second).Ack()
	receive(t, a, time.Second).Nack()
	again := receive(t, a, time.Second)
	assert.Equal(t, "2", again.Metadata.Get(redisdelay.AttemptKey))
	again.Ack()
	nothing(t, b, 500*time.Millisecond)
}

func TestDelay_Cancel(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	ch := subscribe(t, sub, env.topic)
	defer sub.Close()

	cancelled := delayed(delay.For(500*time.Millisecond), "cancelled")
	kept := delayed(delay.For(700*time.Millisecond), "kept")
	require.NoError(t, env.pub.Publish(env.topic, cancelled, kept))

	ok, err := env.pub.Cancel(context.Background(), env.topic, cancelled.UUID)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = env.pub.Cancel(context.Background(), env.topic, cancelled.UUID)
	require.NoError(t, err)
	assert.False(t, ok, "second cancel finds nothing")

	msg := receive(t, ch, 2*time.Second)
	assert.Equal(t, "kept", string(msg.Payload))
	msg.Ack()
	nothing(t, ch, 300*time.Millisecond)

	ok, err = env.pub.Cancel(context.Background(), env.topic, kept.UUID)
	require.NoError(t, err)
	assert.False(t, ok, "a delivered message cannot be cancelled")
}

// A publisher whose host clock is minutes behind, with a dedicated Manager,
// still fires on time: due times are stored as durations from Redis's clock,
// and the scheduler compares them with Redis's TIME only (it reads no wall
// clock of its host, so its skew cannot matter either).
func TestSkew_ClockFiresOnTime(t *testing.T) {
	t.Parallel()
	skew := -7 * time.Minute
	env := setup(t)
	redisdelay.SetClock(env.pub, func() time.Time { return time.Now().Add(skew) })
	sub := env.subscriber(t, "g", func(c *redisdelay.SubscriberConfig) { c.DisableScheduler = true })
	defer sub.Close()
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: env.client, Topics: []string{env.topic}}, logger)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	defer mgr.Close()
	<-mgr.Running()

	ch := subscribe(t, sub, env.topic)
	start := time.Now()
	// Only an until key, written by the skewed host's clock: the publisher
	// turns it into a duration with that same clock.
	until := message.NewMessage(watermill.NewUUID(), []byte("until"))
	until.Metadata.Set(delay.DelayedUntilKey, time.Now().Add(skew).Add(time.Second).Format(time.RFC3339Nano))
	require.NoError(t, env.pub.Publish(env.topic, until))
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(1500*time.Millisecond), "for")))
	for _, want := range []struct {
		payload string
		after   time.Duration
	}{{"until", time.Second}, {"for", 1500 * time.Millisecond}} {
		msg := receive(t, ch, 3*time.Second)
		took := time.Since(start)
		msg.Ack()
		assert.Equal(t, want.payload, string(msg.Payload))
		assert.GreaterOrEqual(t, took, want.after, "early")
		assert.Less(t, took, want.after+time.Second, "late")
	}
}

// Several Managers and embedded schedulers on one topic: every message once.
func TestDelay_ManySchedulersNoDoublePromotion(t *testing.T) {
	t.Parallel()
	env := setup(t)
	for i := 0; i < 3; i++ {
		// Topics named: a Manager discovering every topic of the shared
		// prefix would also schedule the topics of tests running beside
		// this one that must have no scheduler (TestHealth_SchedulerNotRunning).
		mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: env.client, Topics: []string{env.topic}, BatchSize: 7}, logger)
		require.NoError(t, err)
		go func() { _ = mgr.Run(context.Background()) }()
		defer mgr.Close()
	}
	sub := env.subscriber(t, "g")
	sub2 := env.subscriber(t, "g")
	ch, ch2 := subscribe(t, sub, env.topic), subscribe(t, sub2, env.topic)
	defer sub.Close()
	defer sub2.Close()

	const n = 500
	var msgs []*message.Message
	for i := 0; i < n; i++ {
		msgs = append(msgs, delayed(delay.For(time.Duration(i%50)*10*time.Millisecond), fmt.Sprint(i)))
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	seen := map[string]int{}
	for len(seen) < n {
		var msg *message.Message
		select {
		case msg = <-ch:
		case msg = <-ch2:
		case <-time.After(5 * time.Second):
			t.Fatalf("received %d of %d", len(seen), n)
		}
		seen[msg.UUID]++
		msg.Ack()
	}
	nothing(t, ch, 300*time.Millisecond)
	for id, c := range seen {
		assert.Equal(t, 1, c, "message %s delivered %d times", id, c)
	}
}

func TestDelay_RepublishWaitingMessage(t *testing.T) {
	env := setup(t)
	msg := delayed(delay.For(time.Hour), "x")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	require.NoError(t, env.pub.Publish(env.topic, msg), "an identical retry is a no-op")

	changed := msg.Copy()
	changed.Payload = []byte("y")
	err := env.pub.Publish(env.topic, changed)
	assert.ErrorIs(t, err, redisdelay.ErrDuplicateMessage)

	ok, err := env.pub.Cancel(context.Background(), env.topic, msg.UUID)
	require.NoError(t, err)
	assert.True(t, ok)
	require.NoError(t, env.pub.Publish(env.topic, changed), "allowed again after cancel")
}

func TestDelay_CloseLeavesClientOpenAndRejectsUse(t *testing.T) {
	env := setup(t)
	sub := env.subscriber(t, "g")
	ch := subscribe(t, sub, env.topic)

	require.NoError(t, env.pub.Close())
	require.NoError(t, env.pub.Close())
	require.NoError(t, sub.Close())
	require.NoError(t, sub.Close())
	_, open := <-ch
	assert.False(t, open)

	assert.ErrorIs(t, env.pub.Publish(topic(), message.NewMessage("x", nil)), redisdelay.ErrClosed)
	_, err := env.pub.Cancel(context.Background(), topic(), "x")
	assert.ErrorIs(t, err, redisdelay.ErrClosed)
	_, err = sub.Subscribe(context.Background(), topic())
	assert.ErrorIs(t, err, redisdelay.ErrClosed)
	assert.NoError(t, env.client.Ping(context.Background()).Err(), "the client stays open")
}

func TestDelay_ManagerLifecycle(t *testing.T) {
	env := setup(t)
	// A prefix of its own: discovering, it would schedule other tests' topics.
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: env.client, KeyPrefix: uniquePrefix()}, logger)
	require.NoError(t, err)
	require.NoError(t, mgr.Close(), "close before run")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Run(ctx) }()
	<-mgr.Running()
	assert.Error(t, mgr.Run(ctx), "second run")
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, mgr.Close())
}

// SetDueAt writes the instant with milliseconds, rounded up, and drops the
// duration Publish would prefer; a zero time removes both.
func TestSetDueAt_Metadata(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage(watermill.NewUUID(), nil)
	delay.Message(msg, delay.For(time.Hour))
	at := time.Date(2030, 1, 2, 3, 4, 5, 123_400_000, time.FixedZone("CET", 3600))
	redisdelay.SetDueAt(msg, at)
	assert.Equal(t, "2030-01-02T02:04:05.124Z", msg.Metadata.Get(delay.DelayedUntilKey), "UTC, to the ms, never before the instant")
	assert.NotContains(t, msg.Metadata, delay.DelayedForKey)
	redisdelay.SetDueAt(msg, at.Truncate(time.Millisecond))
	assert.Equal(t, "2030-01-02T02:04:05.123Z", msg.Metadata.Get(delay.DelayedUntilKey), "a whole ms stays")
	redisdelay.SetDueAt(msg, time.Time{})
	assert.Empty(t, msg.Metadata, "due at once")
}

// A message made due with SetDueAt is due at the instant, late by no more
// than its Publish took, near (the waiting set) and far (the far tier):
// delay.Until, called a while before Publish, is late by that while.
func TestSetDueAt_IsDueAtTheInstant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	// Instants just after a whole second: delay.Until's until key (the end
	// of its second) then comes after its duration, which decides.
	for _, ahead := range []time.Duration{2 * time.Second, time.Minute} {
		at := time.Now().Add(ahead).Truncate(time.Second).Add(time.Second + 123*time.Millisecond + 400*time.Microsecond)
		exact := message.NewMessage(watermill.NewUUID(), nil)
		redisdelay.SetDueAt(exact, at)
		until := message.NewMessage(watermill.NewUUID(), nil)
		delay.Message(until, delay.Until(at))
		const gap = 100 * time.Millisecond // between delay.Until and Publish
		time.Sleep(gap)
		start := time.Now()
		require.NoError(t, env.pub.Publish(env.topic, exact, until))
		took := time.Since(start)

		w, ok, err := env.insp.FindWaiting(ctx, env.topic, exact.UUID)
		require.NoError(t, err)
		require.True(t, ok)
		ceil := at.Truncate(time.Millisecond).Add(time.Millisecond)
		assert.False(t, w.Due.Before(ceil), "%s ahead: due %s, before %s", ahead, w.Due, at)
		// Publish turned the instant into a delay, rounded up to the ms,
		// that Redis counts from its own ms, rounded up too.
		assert.LessOrEqual(t, w.Due.Sub(ceil), took+2*time.Millisecond, "%s ahead: due %s, %s after %s; Publish took %s", ahead, w.Due, w.Due.Sub(at), at, took)

		w, ok, err = env.insp.FindWaiting(ctx, env.topic, until.UUID)
		require.NoError(t, err)
		require.True(t, ok)
		assert.GreaterOrEqual(t, w.Due.Sub(at), gap, "%s ahead: delay.Until is late by the time before Publish", ahead)
	}
}

// Delivered to a subscription at the instant, never before.
func TestSetDueAt_Delivered(t *testing.T) {
	t.Parallel()
	env := setup(t)
	sub := env.subscriber(t, "g")
	ch := subscribe(t, sub, env.topic)
	defer sub.Close()
	at := time.Now().Add(700 * time.Millisecond)
	msg := message.NewMessage(watermill.NewUUID(), nil)
	redisdelay.SetDueAt(msg, at)
	require.NoError(t, env.pub.Publish(env.topic, msg))
	got := receive(t, ch, 5*time.Second)
	now := time.Now()
	got.Ack()
	assert.False(t, now.Before(at), "delivered %s early", at.Sub(now))
	assert.Less(t, now.Sub(at), time.Second, "delivered %s late", now.Sub(at))
}
