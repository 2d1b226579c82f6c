package redisdelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// schedLease waits until the topic's scheduling lease is held and returns
// its owner.
func schedLease(t *testing.T, client redis.UniversalClient, topic string, within time.Duration) string {
	t.Helper()
	var owner string
	require.Eventually(t, func() bool {
		owner, _ = client.Get(context.Background(), shardOf(topic, 0).Lease()).Result()
		return owner != ""
	}, within, 5*time.Millisecond, "nobody holds the scheduling lease")
	return owner
}

// Several subscribers of a topic: one scheduler holds the lease and keeps
// it; the others stand by, and everything is delivered once, on time.
func TestScheduler_OneLeaseHolderPerTopic(t *testing.T) {
	t.Parallel()
	env := setup(t)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", CheckInterval: 200 * time.Millisecond}
	first := newSubscriber(t, env.client, config)
	chs := []<-chan *message.Message{subscribe(t, first, env.topic)}
	keepSchedulersBusy(t, env.client, env.pub, env.topic, 1)
	owner := schedLease(t, env.client, env.topic, 2*time.Second)
	for range 3 {
		chs = append(chs, subscribe(t, newSubscriber(t, env.client, config), env.topic))
	}

	const n = 20
	var lastDue time.Time // (a little before the Publisher's: conservative)
	for i := range n {
		d := time.Duration(200+10*i) * time.Millisecond
		lastDue = time.Now().Add(d)
		require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(d), "x")))
	}
	got := map[string]int{}
	deadline := time.After(3 * time.Second)
	for len(got) < n {
		select {
		case m := <-chs[0]:
			got[m.UUID]++
			m.Ack()
		case m := <-chs[1]:
			got[m.UUID]++
			m.Ack()
		case m := <-chs[2]:
			got[m.UUID]++
			m.Ack()
		case m := <-chs[3]:
			got[m.UUID]++
			m.Ack()
		case <-deadline:
			t.Fatalf("%d of %d delivered", len(got), n)
		}
	}
	// From the last due time, not from the first Publish: how long the 20
	// calls take under -race on two busy cores (CI's 1.08 s once, from the
	// first) is not the scheduler's lateness.
	late := time.Since(lastDue)
	assert.Less(t, late, time.Second, "the last message came %s after it was due", late)
	for id, c := range got {
		assert.Equal(t, 1, c, "message %s delivered %d times", id, c)
	}
	// Over many check intervals the lease stayed with its first holder.
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		now, err := env.client.Get(context.Background(), shardOf(env.topic, 0).Lease()).Result()
		require.NoError(t, err)
		assert.Equal(t, owner, now, "the lease changed hands while its holder lived")
	}
}

// Closing the holder releases the lease: a standby takes over at once, so
// delayed messages stay on time.
func TestScheduler_CloseHandsLeaseOverAtOnce(t *testing.T) {
	t.Parallel()
	env := setup(t)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", CheckInterval: 2 * time.Second}
	holder := newSubscriber(t, env.client, config)
	subscribe(t, holder, env.topic)
	keepSchedulersBusy(t, env.client, env.pub, env.topic, 1)
	owner := schedLease(t, env.client, env.topic, 2*time.Second)
	standby := newSubscriber(t, env.client, config)
	ch := subscribe(t, standby, env.topic)
	time.Sleep(100 * time.Millisecond) // the standby has ticked once
	require.NoError(t, holder.Close())

	closed := time.Now()
	require.Eventually(t, func() bool {
		o, _ := env.client.Get(context.Background(), shardOf(env.topic, 0).Lease()).Result()
		return o != "" && o != owner
	}, 500*time.Millisecond, 5*time.Millisecond, "the standby did not take over the released lease")
	t.Logf("taken over %s after Close", time.Since(closed))

	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(300*time.Millisecond), "after")))
	start := time.Now()
	m := receive(t, ch, 2*time.Second)
	took := time.Since(start)
	m.Ack()
	// Within a second of its due time, where the standby's CheckInterval
	// alone would take 2 s.
	assert.Less(t, took, 1300*time.Millisecond, "delivered %s after publish, due after 300ms", took)
}

// A holder that loses Redis (dead or partitioned) keeps nobody waiting
// longer than its lease: the standby takes over when it expires.
func TestScheduler_StandbyTakesOverFromDeadHolder(t *testing.T) {
	t.Parallel()
	proxy := newFaultProxy(t)
	env := setup(t)
	interval := 400 * time.Millisecond
	// The holder: a Manager reaching Redis through the proxy.
	keepSchedulersBusy(t, env.client, env.pub, env.topic, 1)
	runManager(t, proxy.client(t), redisdelay.ManagerConfig{Topics: []string{env.topic}, CheckInterval: interval})
	owner := schedLease(t, env.client, env.topic, 2*time.Second)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", CheckInterval: interval})
	ch := subscribe(t, sub, env.topic)

	// While the holder lives, it promotes and keeps the lease.
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(100*time.Millisecond), "before")))
	receive(t, ch, 2*time.Second).Ack()
	o, err := env.client.Get(context.Background(), shardOf(env.topic, 0).Lease()).Result()
	require.NoError(t, err)
	assert.Equal(t, owner, o, "the standby took the lease from a live holder")

	proxy.cut(0)
	cut := time.Now()
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(100*time.Millisecond), "after")))
	m := receive(t, ch, 3*time.Second)
	took := time.Since(cut)
	m.Ack()
	assert.Equal(t, "after", string(m.Payload))
	// The lease lasts 1.5 check intervals after the holder's last tick.
	assert.Less(t, took, 2*interval+200*time.Millisecond, "taken over %s after the holder died", took)
	t.Logf("delivered %s after the holder died", took)
	o, err = env.client.Get(context.Background(), shardOf(env.topic, 0).Lease()).Result()
	require.NoError(t, err)
	assert.NotEqual(t, owner, o)
}

// The lease holder schedules every consumer group of the topic, including
// groups whose subscribers run no scheduler.
func TestScheduler_HolderSchedulesOtherGroupsRetries(t *testing.T) {
	t.Parallel()
	env := setup(t)
	a := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "a", CheckInterval: 100 * time.Millisecond})
	b := newSubscriber(t, env.client, redisdelay.SubscriberConfig{
		ConsumerGroup: "b", DisableScheduler: true,
		RetryDelay: func(int) time.Duration { return 300 * time.Millisecond },
	})
	chA := subscribe(t, a, env.topic)
	chB := subscribe(t, b, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(100*time.Millisecond), "x")))
	receive(t, chA, 2*time.Second).Ack()
	first := receive(t, chB, 2*time.Second)
	nacked := time.Now()
	first.Nack()
	again := receive(t, chB, 2*time.Second)
	took := time.Since(nacked)
	again.Ack()
	assert.Equal(t, first.UUID, again.UUID)
	assert.Equal(t, "2", again.Metadata.Get(redisdelay.AttemptKey))
	assert.GreaterOrEqual(t, took, 280*time.Millisecond)
	assert.Less(t, took, time.Second)
}

// A wake-up published while the scheduler's connection is down is lost;
// the scheduler ticks once it has subscribed again, so a message due
// meanwhile does not wait for the check interval.
func TestScheduler_ResubscribeCatchesLostWakeUps(t *testing.T) {
	t.Parallel()
	proxy := newFaultProxy(t)
	env := setup(t)
	sub := newSubscriber(t, proxy.client(t), redisdelay.SubscriberConfig{
		ConsumerGroup: "g", CheckInterval: time.Minute, CloseTimeout: time.Second,
	})
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(time.Hour), "later")))
	schedLease(t, env.client, env.topic, 2*time.Second)
	time.Sleep(200 * time.Millisecond) // the scheduler sleeps for the check interval

	proxy.cut(0)
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(100*time.Millisecond), "due"))) // its wake-up is lost
	time.Sleep(300 * time.Millisecond)
	proxy.restore(t)
	restored := time.Now()
	m := receive(t, ch, 10*time.Second)
	took := time.Since(restored)
	m.Ack()
	assert.Equal(t, "due", string(m.Payload))
	assert.Less(t, took, 5*time.Second, "delivered %s after Redis came back (check interval 1m)", took)
	t.Logf("delivered %s after Redis came back", took)
}
