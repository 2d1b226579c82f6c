package redisdelay_test

// Message lifecycle against the real test server: attempt limits and dead
// letters, the Inspector, reclaim of crashed consumers, lease extension,
// idle-consumer cleanup, safe trimming, poison input, graceful shutdown and
// Redis outages (through an in-test TCP proxy, never touching the shared
// server). Every test uses a fresh topic and runs in parallel.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// ---------------------------------------------------------------- helpers

// lcKey is a key of the topic's layout (see scripts.go), for raw checks.
func lcKey(topic, suffix string) string {
	return redisdelay.DefaultKeyPrefix + ":{" + topic + "}:" + suffix
}

func lcPublisher(t *testing.T, client redis.UniversalClient) *redisdelay.Publisher {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, logger)
	require.NoError(t, err)
	return pub
}

// lcSubscriber returns a Subscriber on client with config (Client is set
// here), closed when the test ends.
func lcSubscriber(t *testing.T, client redis.UniversalClient, config redisdelay.SubscriberConfig) *redisdelay.Subscriber {
	t.Helper()
	config.Client = client
	sub, err := redisdelay.NewSubscriber(config, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func lcInspector(t *testing.T, client redis.UniversalClient) *redisdelay.Inspector {
	t.Helper()
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	require.NoError(t, err)
	return insp
}

// lcManager runs a Manager for the given topics only (a Manager without a
// topic list would schedule every other test's topics too).
func lcManager(t *testing.T, client redis.UniversalClient, config redisdelay.ManagerConfig) *redisdelay.Manager {
	t.Helper()
	config.Client = client
	mgr, err := redisdelay.NewManager(config, logger)
	require.NoError(t, err)
	go func() { _ = mgr.Run(context.Background()) }()
	t.Cleanup(func() { _ = mgr.Close() })
	<-mgr.Running()
	return mgr
}

func lcMessage(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
}

func lcStats(t *testing.T, insp *redisdelay.Inspector, topic string) redisdelay.TopicStats {
	t.Helper()
	st, err := insp.Stats(context.Background(), topic)
	require.NoError(t, err)
	return st
}

func lcGroupStats(t *testing.T, insp *redisdelay.Inspector, topic, group string) redisdelay.GroupStats {
	t.Helper()
	for _, g := range lcStats(t, insp, topic).Groups {
		if g.Group == group {
			return g
		}
	}
	t.Fatalf("group %q not in the stats of topic %q", group, topic)
	return redisdelay.GroupStats{}
}

// lcAwaitDead polls until the group holds n dead letters and returns them.
func lcAwaitDead(t *testing.T, insp *redisdelay.Inspector, topic, group string, n int, within time.Duration) []redisdelay.DeadLetter {
	t.Helper()
	var dead []redisdelay.DeadLetter
	var err error
	if !assert.Eventually(t, func() bool {
		dead, err = insp.DeadLetters(context.Background(), topic, group, "", 100)
		return err == nil && len(dead) == n
	}, within, 20*time.Millisecond) {
		t.Fatalf("want %d dead letters within %s, have %d (err %v)", n, within, len(dead), err)
	}
	return dead
}

// lcCloseAsync closes sub in the background; the channel is closed when
// Close has returned.
func lcCloseAsync(sub *redisdelay.Subscriber) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sub.Close()
	}()
	return done
}

// lcPending is how many entries of the ready stream the group has pending.
func lcPending(t *testing.T, client redis.UniversalClient, topic, group string) int64 {
	t.Helper()
	p, err := client.XPending(context.Background(), lcKey(topic, "stream"), group).Result()
	require.NoError(t, err)
	return p.Count
}

// ------------------------------------------------- attempts and dead letters

// A Router handler that always fails, with RecordError: the message is
// delivered exactly MaxAttempts times, then lands in the group's dead
// letters as published, with the handler's last error as the reason.
func TestLifecycle_FailingHandlerDeadLettersAfterMaxAttemptsWithItsError(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 3})
	insp := lcInspector(t, client)

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	require.NoError(t, err)
	router.AddMiddleware(redisdelay.RecordError)
	var mu sync.Mutex
	var attempts []string
	router.AddNoPublisherHandler("always-fails", topic, sub, func(msg *message.Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, msg.Metadata.Get(redisdelay.AttemptKey))
		return fmt.Errorf("payment service said no (try %d)", len(attempts))
	})
	go func() { _ = router.Run(context.Background()) }()
	t.Cleanup(func() { _ = router.Close() })
	<-router.Running()

	msg := lcMessage("charge order 42")
	msg.Metadata.Set("order", "42")
	require.NoError(t, pub.Publish(topic, msg))

	dead := lcAwaitDead(t, insp, topic, "g", 1, 5*time.Second)
	time.Sleep(300 * time.Millisecond) // time for a wrong fourth delivery
	mu.Lock()
	assert.Equal(t, []string{"1", "2", "3"}, attempts, "deliveries (attempt numbers)")
	mu.Unlock()

	d := dead[0]
	require.NotNil(t, d.Message, "dead letter not decodable: %q", d.Body)
	assert.Equal(t, msg.UUID, d.Message.UUID)
	assert.Equal(t, "charge order 42", string(d.Message.Payload))
	assert.Equal(t, "42", d.Message.Metadata.Get("order"), "original metadata kept")
	assert.Equal(t, "payment service said no (try 3)", d.Message.Metadata.Get(redisdelay.ErrorKey))
	assert.Equal(t, 3, d.Attempts)
	assert.Equal(t, "payment service said no (try 3)", d.Reason)
	assert.WithinDuration(t, time.Now(), d.Time, 5*time.Second)

	g := lcGroupStats(t, insp, topic, "g")
	assert.EqualValues(t, 1, g.Dead)
	assert.EqualValues(t, 1, g.DeadTotal)
	assert.Zero(t, g.Pending+g.Retry+g.Ready, "nothing left in flight: %+v", g)
}

// Nacked by hand, without RecordError: the reason says which attempt it was
// and points at ErrorKey.
func TestLifecycle_NackedByHandDeadLetterReasonMentionsErrorKey(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 3})
	insp := lcInspector(t, client)
	ch := subscribe(t, sub, topic)

	msg := lcMessage("x")
	require.NoError(t, pub.Publish(topic, msg))
	for attempt := 1; attempt <= 3; attempt++ {
		got := receive(t, ch, 2*time.Second)
		assert.Equal(t, strconv.Itoa(attempt), got.Metadata.Get(redisdelay.AttemptKey))
		got.Nack()
	}
	dead := lcAwaitDead(t, insp, topic, "g", 1, 2*time.Second)
	nothing(t, ch, 300*time.Millisecond)
	assert.Equal(t, msg.UUID, dead[0].Message.UUID)
	assert.Equal(t, 3, dead[0].Attempts)
	assert.Contains(t, dead[0].Reason, "attempt 3 of 3")
	assert.Contains(t, dead[0].Reason, redisdelay.ErrorKey)
}

// MaxAttempts < 0: no limit, well past the default bound of 16.
func TestLifecycle_NegativeMaxAttemptsRetriesForever(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: -1, RetryDelay: noRetry})
	insp := lcInspector(t, client)
	ch := subscribe(t, sub, topic)

	msg := lcMessage("x")
	require.NoError(t, pub.Publish(topic, msg))
	for attempt := 1; attempt <= 20; attempt++ {
		got := receive(t, ch, 2*time.Second)
		require.Equal(t, msg.UUID, got.UUID)
		require.Equal(t, strconv.Itoa(attempt), got.Metadata.Get(redisdelay.AttemptKey))
		if attempt < 20 {
			got.Nack()
		} else {
			got.Ack()
		}
	}
	nothing(t, ch, 200*time.Millisecond)
	g := lcGroupStats(t, insp, topic, "g")
	assert.Zero(t, g.Dead)
	assert.Zero(t, g.DeadTotal)
}

// MaxDeadLetters bounds the dead letters: the oldest is evicted, and the
// eviction is counted.
func TestLifecycle_DeadLettersBeyondMaxDeadLettersEvictTheOldest(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 1, MaxDeadLetters: 2})
	insp := lcInspector(t, client)
	ch := subscribe(t, sub, topic)

	msgs := []*message.Message{lcMessage("0"), lcMessage("1"), lcMessage("2")}
	require.NoError(t, pub.Publish(topic, msgs...))
	for range msgs {
		receive(t, ch, 2*time.Second).Nack()
	}
	require.Eventually(t, func() bool { return lcGroupStats(t, insp, topic, "g").DeadTotal == 3 }, 2*time.Second, 20*time.Millisecond)

	g := lcGroupStats(t, insp, topic, "g")
	assert.EqualValues(t, 2, g.Dead)
	assert.EqualValues(t, 3, g.DeadTotal)
	assert.EqualValues(t, 1, g.DeadEvicted)
	dead, err := insp.DeadLetters(context.Background(), topic, "g", "", 10)
	require.NoError(t, err)
	require.Len(t, dead, 2)
	assert.Equal(t, msgs[1].UUID, dead[0].Message.UUID, "the oldest was evicted")
	assert.Equal(t, msgs[2].UUID, dead[1].Message.UUID)
}

// ------------------------------------------------------------- Inspector

func TestLifecycle_InspectorDeadLetterOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 1})
	insp := lcInspector(t, client)
	ch := subscribe(t, sub, topic)

	var msgs []*message.Message
	for i := 0; i < 5; i++ {
		msgs = append(msgs, lcMessage(strconv.Itoa(i)))
	}
	require.NoError(t, pub.Publish(topic, msgs...))
	for i := range msgs {
		got := receive(t, ch, 2*time.Second)
		require.Equal(t, msgs[i].UUID, got.UUID, "delivery order")
		got.Nack()
	}
	all := lcAwaitDead(t, insp, topic, "g", 5, 2*time.Second)
	for i, d := range all {
		assert.Equal(t, msgs[i].UUID, d.Message.UUID, "dead letters oldest first")
	}

	// Paging: after the last ID of a page comes the next page.
	page, err := insp.DeadLetters(ctx, topic, "g", "", 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	assert.Equal(t, []string{all[0].ID, all[1].ID}, []string{page[0].ID, page[1].ID})
	page, err = insp.DeadLetters(ctx, topic, "g", page[1].ID, 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	assert.Equal(t, []string{all[2].ID, all[3].ID}, []string{page[0].ID, page[1].ID})
	page, err = insp.DeadLetters(ctx, topic, "g", page[1].ID, 2)
	require.NoError(t, err)
	require.Len(t, page, 1)
	assert.Equal(t, all[4].ID, page[0].ID)
	page, err = insp.DeadLetters(ctx, topic, "g", all[4].ID, 2)
	require.NoError(t, err)
	assert.Empty(t, page)

	// Requeue one: delivered again as attempt 1, gone from the dead letters.
	ok, err := insp.RequeueDeadLetter(ctx, topic, "g", all[0].ID)
	require.NoError(t, err)
	assert.True(t, ok)
	got := receive(t, ch, 2*time.Second)
	assert.Equal(t, msgs[0].UUID, got.UUID)
	assert.Equal(t, "1", got.Metadata.Get(redisdelay.AttemptKey))
	assert.Equal(t, "0", string(got.Payload))
	got.Ack()
	ok, err = insp.RequeueDeadLetter(ctx, topic, "g", all[0].ID)
	require.NoError(t, err)
	assert.False(t, ok, "already requeued")
	ok, err = insp.RequeueDeadLetter(ctx, topic, "g", "1-1")
	require.NoError(t, err)
	assert.False(t, ok, "unknown id")

	// Delete one.
	ok, err = insp.DeleteDeadLetter(ctx, topic, "g", all[1].ID)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = insp.DeleteDeadLetter(ctx, topic, "g", all[1].ID)
	require.NoError(t, err)
	assert.False(t, ok, "already deleted")
	rest := lcAwaitDead(t, insp, topic, "g", 3, time.Second)
	assert.Equal(t, []string{all[2].ID, all[3].ID, all[4].ID}, []string{rest[0].ID, rest[1].ID, rest[2].ID})

	// Requeue all: each delivered once more as attempt 1; nacked, they die again.
	n, err := insp.RequeueDeadLetters(ctx, topic, "g")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	var again []string
	for i := 0; i < 3; i++ {
		got := receive(t, ch, 2*time.Second)
		assert.Equal(t, "1", got.Metadata.Get(redisdelay.AttemptKey))
		again = append(again, got.UUID)
		got.Nack()
	}
	assert.ElementsMatch(t, []string{msgs[2].UUID, msgs[3].UUID, msgs[4].UUID}, again)
	lcAwaitDead(t, insp, topic, "g", 3, 2*time.Second)
	n, err = insp.RequeueDeadLetters(ctx, topic, "g")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for i := 0; i < 3; i++ {
		receive(t, ch, 2*time.Second).Nack()
	}
	lcAwaitDead(t, insp, topic, "g", 3, 2*time.Second)

	// Purge.
	purged, err := insp.PurgeDeadLetters(ctx, topic, "g")
	require.NoError(t, err)
	assert.EqualValues(t, 3, purged)
	purged, err = insp.PurgeDeadLetters(ctx, topic, "g")
	require.NoError(t, err)
	assert.Zero(t, purged)
	g := lcGroupStats(t, insp, topic, "g")
	assert.Zero(t, g.Dead)
	assert.EqualValues(t, 11, g.DeadTotal, "5 + 3 + 3 burials")
	nothing(t, ch, 200*time.Millisecond)

	// Delete the group (its subscriber gone first).
	require.NoError(t, sub.Close())
	ok, err = insp.DeleteGroup(ctx, topic, "g")
	require.NoError(t, err)
	assert.True(t, ok)
	st := lcStats(t, insp, topic)
	assert.Empty(t, st.Groups)
	groups, err := client.XInfoGroups(ctx, lcKey(topic, "stream")).Result()
	require.NoError(t, err)
	assert.Empty(t, groups, "group destroyed on the ready stream")
	left, err := client.Exists(ctx, lcKey(topic, "g:g:dead"), lcKey(topic, "g:g:meta"), lcKey(topic, "g:g:redo")).Result()
	require.NoError(t, err)
	assert.Zero(t, left, "the group's keys are deleted")
	ok, err = insp.DeleteGroup(ctx, topic, "g")
	require.NoError(t, err)
	assert.False(t, ok, "already deleted")
	topics, err := insp.Topics(ctx)
	require.NoError(t, err)
	assert.Contains(t, topics, topic, "the topic itself stays")
}

func TestLifecycle_InspectorRejectsBadArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	insp := lcInspector(t, newClient(t))
	topic := topic()
	errOf := func(_ any, err error) error { return err }
	for name, c := range map[string]struct {
		err   error
		is    error
		says  []string
		noSay string
	}{
		"DeadLetters topic with space":  {err: errOf(insp.DeadLetters(ctx, "a b", "g", "", 10)), is: redisdelay.ErrInvalidTopic, says: []string{`topic "a b"`, `contains " "`}},
		"DeadLetters empty group":       {err: errOf(insp.DeadLetters(ctx, topic, "", "", 10)), says: []string{"consumer group is empty"}},
		"DeadLetters group with brace":  {err: errOf(insp.DeadLetters(ctx, topic, "g{1}", "", 10)), says: []string{`consumer group "g{1}"`, `contains "{"`}},
		"DeadLetters limit 0":           {err: errOf(insp.DeadLetters(ctx, topic, "g", "", 0)), says: []string{"limit is 0", "use 1 to 10000"}},
		"DeadLetters limit 10001":       {err: errOf(insp.DeadLetters(ctx, topic, "g", "", 10001)), says: []string{"limit is 10001", "use 1 to 10000"}},
		"Waiting negative offset":       {err: errOf(insp.Waiting(ctx, topic, -1, 10)), says: []string{"offset is -1", "use 0 or more"}},
		"Waiting limit 0":               {err: errOf(insp.Waiting(ctx, topic, 0, 0)), says: []string{"limit is 0"}},
		"Waiting limit 10001":           {err: errOf(insp.Waiting(ctx, topic, 0, 10001)), says: []string{"limit is 10001"}},
		"Waiting empty topic":           {err: errOf(insp.Waiting(ctx, "", 0, 10)), is: redisdelay.ErrInvalidTopic, says: []string{"topic is empty"}},
		"Stats control character":       {err: errOf(insp.Stats(ctx, "a\nb")), is: redisdelay.ErrInvalidTopic, says: []string{"control characters"}},
		"RequeueDeadLetter bad group":   {err: errOf(insp.RequeueDeadLetter(ctx, topic, "a b", "1-1")), says: []string{`consumer group "a b"`}},
		"RequeueDeadLetters bad topic":  {err: errOf(insp.RequeueDeadLetters(ctx, "{x}", "g")), is: redisdelay.ErrInvalidTopic, says: []string{`contains "{"`}},
		"DeleteDeadLetter bad group":    {err: errOf(insp.DeleteDeadLetter(ctx, topic, "}", "1-1")), says: []string{`consumer group "}"`}},
		"PurgeDeadLetters bad topic":    {err: errOf(insp.PurgeDeadLetters(ctx, "", "g")), is: redisdelay.ErrInvalidTopic, says: []string{"topic is empty"}},
		"DeleteGroup empty group":       {err: errOf(insp.DeleteGroup(ctx, topic, "")), says: []string{"consumer group is empty"}},
		"DeleteGroup topic with tab":    {err: errOf(insp.DeleteGroup(ctx, "a\tb", "g")), is: redisdelay.ErrInvalidTopic},
		"NewInspector without a client": {err: errOf(redisdelay.NewInspector(redisdelay.InspectorConfig{})), says: []string{"InspectorConfig.Client is nil"}},
	} {
		t.Run(name, func(t *testing.T) {
			require.Error(t, c.err)
			if c.is != nil {
				assert.ErrorIs(t, c.err, c.is)
			}
			for _, s := range c.says {
				assert.ErrorContains(t, c.err, s)
			}
		})
	}
}

// Stats counts each state a message can be in, and Waiting lists delayed
// messages in due order with their due times.
func TestLifecycle_StatsAndWaitingShowWhereMessagesAre(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	insp := lcInspector(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 2, BatchSize: 1})
	idle := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "h"})
	require.NoError(t, sub.SubscribeInitialize(topic))
	require.NoError(t, idle.SubscribeInitialize(topic)) // a group that reads nothing
	ch := subscribe(t, sub, topic)

	// Waiting: published out of due order.
	type published struct {
		uuid          string
		before, after time.Time
		delay         time.Duration
	}
	var waiting []published
	for _, h := range []int{3, 1, 2} {
		d := time.Duration(h) * time.Hour
		m := delayed(delay.For(d), "in "+strconv.Itoa(h)+"h")
		before := time.Now()
		require.NoError(t, pub.Publish(topic, m))
		waiting = append(waiting, published{m.UUID, before, time.Now(), d})
	}
	sort.Slice(waiting, func(i, j int) bool { return waiting[i].delay < waiting[j].delay })

	// Dead: nacked on both attempts.
	require.NoError(t, pub.Publish(topic, lcMessage("dead")))
	for i := 0; i < 2; i++ {
		m := receive(t, ch, 2*time.Second)
		require.Equal(t, "dead", string(m.Payload))
		m.Nack()
	}
	lcAwaitDead(t, insp, topic, "g", 1, 2*time.Second)
	// Retry: the handler asks for a redelivery in an hour.
	require.NoError(t, pub.Publish(topic, lcMessage("retry")))
	m := receive(t, ch, 2*time.Second)
	require.Equal(t, "retry", string(m.Payload))
	delay.Message(m, delay.For(time.Hour))
	m.Nack()
	require.Eventually(t, func() bool { return lcGroupStats(t, insp, topic, "g").Retry == 1 }, 2*time.Second, 20*time.Millisecond)
	// Pending: held by the handler; ready: not fetched (BatchSize 1).
	require.NoError(t, pub.Publish(topic, lcMessage("held"), lcMessage("ready 1"), lcMessage("ready 2")))
	held := receive(t, ch, 2*time.Second)
	require.Equal(t, "held", string(held.Payload))

	st := lcStats(t, insp, topic)
	assert.Equal(t, topic, st.Topic)
	assert.EqualValues(t, 3, st.Waiting)
	assert.EqualValues(t, 5, st.Stream, "dead, retry, held, ready 1, ready 2")
	byGroup := map[string]redisdelay.GroupStats{}
	for _, g := range st.Groups {
		byGroup[g.Group] = g
	}
	require.Len(t, byGroup, 2)
	assert.Equal(t, redisdelay.GroupStats{Group: "g", Ready: 2, Pending: 1, Retry: 1, Dead: 1, DeadTotal: 1, Consumers: 1}, byGroup["g"])
	assert.Equal(t, redisdelay.GroupStats{Group: "h", Ready: 5}, byGroup["h"])

	// Waiting, in due order, with due times and paging.
	list, err := insp.Waiting(ctx, topic, 0, 10)
	require.NoError(t, err)
	require.Len(t, list, 3)
	for i, w := range list {
		p := waiting[i]
		assert.Equal(t, p.uuid, w.Message.UUID, "due order")
		assert.Equal(t, "in "+strconv.Itoa(int(p.delay/time.Hour))+"h", string(w.Message.Payload))
		lo, hi := p.before.Add(p.delay).Add(-5*time.Millisecond), p.after.Add(p.delay).Add(5*time.Millisecond)
		assert.True(t, !w.Due.Before(lo) && !w.Due.After(hi), "due %s not in [%s, %s]", w.Due, lo, hi)
	}
	list, err = insp.Waiting(ctx, topic, 1, 1)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, waiting[1].uuid, list[0].Message.UUID)
	list, err = insp.Waiting(ctx, topic, 3, 10)
	require.NoError(t, err)
	assert.Empty(t, list)

	topics, err := insp.Topics(ctx)
	require.NoError(t, err)
	assert.Contains(t, topics, topic)

	// Acked, the held message leaves the pending count.
	held.Ack()
	for i := 1; i <= 2; i++ {
		m := receive(t, ch, 2*time.Second)
		assert.Equal(t, "ready "+strconv.Itoa(i), string(m.Payload))
		m.Ack()
	}
	require.Eventually(t, func() bool {
		g := lcGroupStats(t, insp, topic, "g")
		return g.Ready == 0 && g.Pending == 0
	}, 2*time.Second, 20*time.Millisecond)
}

// ------------------------------------------------ reclaim and leases

// lcCrashedRead fetches one message of the ready stream as a consumer that
// then dies: it never acks nor extends the lease.
func lcCrashedRead(t *testing.T, client redis.UniversalClient, topic, group, consumer string) redis.XMessage {
	t.Helper()
	res, err := client.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: group, Consumer: consumer, Streams: []string{lcKey(topic, "stream"), ">"}, Count: 1, Block: -1,
	}).Result()
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Len(t, res[0].Messages, 1)
	return res[0].Messages[0]
}

func TestLifecycle_CrashedConsumersMessageReclaimedAfterVisibilityTimeout(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{
		ConsumerGroup: "g", VisibilityTimeout: 600 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	})
	require.NoError(t, sub.SubscribeInitialize(topic))
	msg := lcMessage("x")
	require.NoError(t, pub.Publish(topic, msg))
	lcCrashedRead(t, client, topic, "g", "crashed-1")
	readAt := time.Now()

	ch := subscribe(t, sub, topic)
	got := receive(t, ch, 3*time.Second)
	took := time.Since(readAt)
	assert.Equal(t, msg.UUID, got.UUID)
	assert.Equal(t, "x", string(got.Payload))
	assert.Equal(t, "2", got.Metadata.Get(redisdelay.AttemptKey))
	assert.GreaterOrEqual(t, took, 550*time.Millisecond, "reclaimed before the visibility timeout")
	t.Logf("reclaimed %s after the crashed read", took)
	got.Ack()
	nothing(t, ch, 300*time.Millisecond)

	held, err := client.XPendingExt(context.Background(), &redis.XPendingExtArgs{
		Stream: lcKey(topic, "stream"), Group: "g", Start: "-", End: "+", Count: 10, Consumer: "crashed-1",
	}).Result()
	require.NoError(t, err)
	assert.Empty(t, held, "the crashed consumer holds nothing any more")
}

func TestLifecycle_CrashedConsumersLastAttemptGoesToDeadLetters(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	insp := lcInspector(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{
		ConsumerGroup: "g", MaxAttempts: 1, VisibilityTimeout: 600 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	})
	require.NoError(t, sub.SubscribeInitialize(topic))
	msg := lcMessage("x")
	require.NoError(t, pub.Publish(topic, msg))
	lcCrashedRead(t, client, topic, "g", "crashed-1")
	ch := subscribe(t, sub, topic) // runs the scheduler that reclaims

	dead := lcAwaitDead(t, insp, topic, "g", 1, 3*time.Second)
	nothing(t, ch, 300*time.Millisecond)
	d := dead[0]
	assert.Equal(t, msg.UUID, d.Message.UUID)
	assert.Equal(t, 1, d.Attempts)
	assert.Contains(t, d.Reason, "not acknowledged within 600 ms")
	assert.Contains(t, d.Reason, "crashed-1")
	assert.Contains(t, d.Reason, "attempt 1 of 1")
	assert.Zero(t, lcPending(t, client, topic, "g"))
}

// A live subscription's slow handler keeps its message past several
// visibility timeouts: the lease is extended, nobody else gets it, and its
// Ack settles it for good.
func TestLifecycle_SlowHandlerKeepsItsMessageByLeaseExtension(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	insp := lcInspector(t, client)
	config := redisdelay.SubscriberConfig{
		ConsumerGroup: "g", VisibilityTimeout: 500 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	}
	slow := lcSubscriber(t, client, config)
	other := lcSubscriber(t, client, config)
	chSlow := subscribe(t, slow, topic)

	msg := lcMessage("slow")
	require.NoError(t, pub.Publish(topic, msg))
	got := receive(t, chSlow, 2*time.Second)
	chOther := subscribe(t, other, topic)
	nothing(t, chOther, 2*time.Second) // 4× VisibilityTimeout
	assert.NoError(t, got.Context().Err(), "the handler's context stays alive")
	got.Ack()

	nothing(t, chOther, time.Second)
	nothing(t, chSlow, 10*time.Millisecond)
	g := lcGroupStats(t, insp, topic, "g")
	assert.Zero(t, g.Pending+g.Ready+g.Retry+g.Dead, "settled once: %+v", g)
}

// Messages fetched behind a handler that runs long go back to the group
// (attempt unchanged) instead of waiting for it; the slow one stays put.
func TestLifecycle_MessagesFetchedBehindSlowHandlerGoToOtherConsumers(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	config := redisdelay.SubscriberConfig{
		ConsumerGroup: "g", BatchSize: 10, VisibilityTimeout: 600 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	}
	slow := lcSubscriber(t, client, config)
	other := lcSubscriber(t, client, config)
	require.NoError(t, slow.SubscribeInitialize(topic))
	msgs := []*message.Message{lcMessage("slow"), lcMessage("b"), lcMessage("c"), lcMessage("d")}
	require.NoError(t, pub.Publish(topic, msgs...))
	chSlow := subscribe(t, slow, topic) // fetches all four in one read
	first := receive(t, chSlow, 2*time.Second)
	require.Equal(t, "slow", string(first.Payload))

	chOther := subscribe(t, other, topic)
	start := time.Now()
	for _, want := range []string{"b", "c", "d"} {
		got := receive(t, chOther, 2*time.Second) // within 2/3 VisibilityTimeout + a read
		assert.Equal(t, want, string(got.Payload))
		assert.Equal(t, "1", got.Metadata.Get(redisdelay.AttemptKey), "a hand-back is not an attempt")
		got.Ack()
	}
	t.Logf("messages behind the slow handler delivered elsewhere after %s", time.Since(start))
	nothing(t, chOther, 900*time.Millisecond) // the slow handler's message stays leased
	first.Ack()
	nothing(t, chSlow, 300*time.Millisecond)
	g := lcGroupStats(t, lcInspector(t, client), topic, "g")
	assert.Zero(t, g.Pending+g.Ready+g.Retry+g.Dead, "each settled once: %+v", g)
}

// A scheduler removes consumers that hold nothing and stayed silent past
// ConsumerIdleTimeout, and keeps those holding a message.
func TestLifecycle_IdleConsumersWithoutMessagesAreRemoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	topic := topic()
	stream := lcKey(topic, "stream")
	pub := lcPublisher(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{
		ConsumerGroup: "g", ConsumerIdleTimeout: time.Second, VisibilityTimeout: time.Minute, DisableScheduler: true,
	})
	require.NoError(t, sub.SubscribeInitialize(topic))
	require.NoError(t, pub.Publish(topic, lcMessage("held")))
	lcCrashedRead(t, client, topic, "g", "holder")
	require.NoError(t, client.XGroupCreateConsumer(ctx, stream, "g", "idler").Err())
	created := time.Now()

	consumers := func() map[string]int64 {
		cs, err := client.XInfoConsumers(ctx, stream, "g").Result()
		require.NoError(t, err)
		out := map[string]int64{}
		for _, c := range cs {
			out[c.Name] = c.Pending
		}
		return out
	}
	require.Equal(t, map[string]int64{"holder": 1, "idler": 0}, consumers())

	lcManager(t, client, redisdelay.ManagerConfig{
		Topics: []string{topic}, CheckInterval: 100 * time.Millisecond, TrimInterval: 200 * time.Millisecond,
	})
	require.Eventually(t, func() bool {
		_, ok := consumers()["idler"]
		return !ok
	}, 4*time.Second, 20*time.Millisecond, "idle consumer not removed")
	assert.GreaterOrEqual(t, time.Since(created), 950*time.Millisecond, "removed before ConsumerIdleTimeout")
	time.Sleep(500 * time.Millisecond) // a few more cleanup rounds
	assert.Equal(t, map[string]int64{"holder": 1}, consumers(), "a consumer holding a message stays")
}

// ----------------------------------------------------------------- trimming

// Trimming drops only entries every group has read and acknowledged: what a
// group has not read, or holds pending, stays and is delivered later.
func TestLifecycle_TrimKeepsEntriesAGroupHasNotAcknowledged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	topic := topic()
	stream := lcKey(topic, "stream")
	pub := lcPublisher(t, client)
	for _, g := range []string{"a", "b"} {
		s := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: g, VisibilityTimeout: time.Minute, DisableScheduler: true})
		require.NoError(t, s.SubscribeInitialize(topic))
	}
	// Enough entries for several stream nodes: trimming removes whole nodes.
	const n = 300
	var msgs []*message.Message
	for i := 0; i < n; i++ {
		msgs = append(msgs, lcMessage(strconv.Itoa(i)))
	}
	require.NoError(t, pub.Publish(topic, msgs...))
	entries, err := client.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, n)
	ids := make([]string, n)
	for i, e := range entries {
		ids[i] = e.ID
	}

	readAs := func(group, consumer string, count int64) []string {
		res, err := client.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: count, Block: -1,
		}).Result()
		require.NoError(t, err)
		var read []string
		for _, m := range res[0].Messages {
			read = append(read, m.ID)
		}
		return read
	}
	// Group a reads and acks everything; group b acks 200, holds 50 pending
	// and has not read the last 50.
	readA := readAs("a", "ca", n)
	require.Len(t, readA, n)
	require.NoError(t, client.XAck(ctx, stream, "a", readA...).Err())
	readB := readAs("b", "cb", 250)
	require.Len(t, readB, 250)
	require.NoError(t, client.XAck(ctx, stream, "b", readB[:200]...).Err())

	lcManager(t, client, redisdelay.ManagerConfig{
		Topics: []string{topic}, CheckInterval: 100 * time.Millisecond, TrimInterval: 200 * time.Millisecond,
	})
	require.Eventually(t, func() bool { return client.XLen(ctx, stream).Val() < n }, 3*time.Second, 20*time.Millisecond,
		"nothing trimmed although both groups acked the first 200 entries")
	time.Sleep(500 * time.Millisecond) // more trim rounds
	left, err := client.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	kept := map[string]bool{}
	for _, e := range left {
		kept[e.ID] = true
	}
	for i := 200; i < n; i++ {
		require.True(t, kept[ids[i]], "entry %d (%s; pending or unread for group b) was trimmed", i, ids[i])
	}
	t.Logf("stream trimmed from %d to %d entries", n, len(left))

	// The pending (reclaimed from the silent consumer cb, once a subscriber
	// lowers the group's visibility timeout) and the unread entries are all
	// delivered.
	b := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "b", VisibilityTimeout: 300 * time.Millisecond, DisableScheduler: true})
	ch := subscribe(t, b, topic)
	got := map[string]int{}
	deadline := time.After(5 * time.Second)
	for len(got) < 100 {
		select {
		case m := <-ch:
			got[string(m.Payload)]++
			m.Ack()
		case <-deadline:
			t.Fatalf("group b received %d of its 100 unacknowledged messages", len(got))
		}
	}
	for i := 200; i < n; i++ {
		assert.Equal(t, 1, got[strconv.Itoa(i)], "message %d", i)
	}
}

// Before any group exists nothing is trimmed: the entries wait for the
// first group.
func TestLifecycle_TrimWithoutGroupsKeepsEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	var msgs []*message.Message
	for i := 0; i < 300; i++ {
		msgs = append(msgs, lcMessage(strconv.Itoa(i)))
	}
	require.NoError(t, pub.Publish(topic, msgs...))
	lcManager(t, client, redisdelay.ManagerConfig{
		Topics: []string{topic}, CheckInterval: 50 * time.Millisecond, TrimInterval: 100 * time.Millisecond,
	})
	require.Never(t, func() bool { return client.XLen(ctx, lcKey(topic, "stream")).Val() != 300 },
		time.Second, 50*time.Millisecond, "entries trimmed with no group")
}

// ---------------------------------------------------------------- poison

// Entries that are not messages (another tool wrote them) go to the dead
// letters with their raw bytes, and the subscription carries on.
func TestLifecycle_UndecodableEntriesGoToDeadLettersAndDeliveryContinues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	topic := topic()
	stream := lcKey(topic, "stream")
	pub := lcPublisher(t, client)
	insp := lcInspector(t, client)
	sub := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	require.NoError(t, sub.SubscribeInitialize(topic))
	require.NoError(t, client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"m", "not a message"}}).Err())
	require.NoError(t, client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"x", "y"}}).Err())
	valid := lcMessage("valid")
	require.NoError(t, pub.Publish(topic, valid))

	ch := subscribe(t, sub, topic)
	got := receive(t, ch, 2*time.Second)
	assert.Equal(t, valid.UUID, got.UUID)
	got.Ack()
	nothing(t, ch, 200*time.Millisecond)

	dead := lcAwaitDead(t, insp, topic, "g", 2, 2*time.Second)
	assert.Nil(t, dead[0].Message)
	assert.Equal(t, "not a message", string(dead[0].Body))
	assert.Contains(t, dead[0].Reason, "corrupt")
	assert.Equal(t, 1, dead[0].Attempts)
	assert.Nil(t, dead[1].Message)
	assert.Empty(t, dead[1].Body)
	assert.Contains(t, dead[1].Reason, "corrupt")
	assert.Contains(t, dead[1].Reason, "no field m")
	assert.Zero(t, lcPending(t, client, topic, "g"))
}

// ------------------------------------------------------------- shutdown

// Close cancels a running handler's context and waits for its Ack, which
// counts: no one gets the message again.
func TestLifecycle_CloseWaitsForRunningHandlersAck(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	config := redisdelay.SubscriberConfig{
		ConsumerGroup: "g", CloseTimeout: 5 * time.Second, VisibilityTimeout: 500 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	}
	first := lcSubscriber(t, client, config)
	ch := subscribe(t, first, topic)
	require.NoError(t, pub.Publish(topic, lcMessage("x")))
	msg := receive(t, ch, 2*time.Second)

	cancelled := make(chan error, 1)
	go func() {
		<-msg.Context().Done()
		cancelled <- msg.Context().Err()
		time.Sleep(300 * time.Millisecond) // finishing up
		msg.Ack()
	}()
	start := time.Now()
	require.NoError(t, first.Close())
	took := time.Since(start)
	select {
	case err := <-cancelled:
		assert.ErrorIs(t, err, context.Canceled)
	default:
		t.Fatal("Close returned without cancelling the handler's context")
	}
	assert.GreaterOrEqual(t, took, 250*time.Millisecond, "Close did not wait for the handler")
	assert.Less(t, took, 3*time.Second)
	assert.Zero(t, lcPending(t, client, topic, "g"), "the Ack was recorded before Close returned")

	second := lcSubscriber(t, client, config)
	nothing(t, subscribe(t, second, topic), 1500*time.Millisecond) // > VisibilityTimeout + CheckInterval
}

// A handler that never finishes: Close gives up after CloseTimeout and the
// message goes to another consumer of the group at once, same attempt.
func TestLifecycle_CloseHandsBackMessageOfStuckHandler(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	stuck := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", CloseTimeout: 500 * time.Millisecond})
	other := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g"}) // VisibilityTimeout 30s
	ch := subscribe(t, stuck, topic)
	msg := lcMessage("x")
	require.NoError(t, pub.Publish(topic, msg))
	held := receive(t, ch, 2*time.Second)
	chOther := subscribe(t, other, topic)

	start := time.Now()
	require.NoError(t, stuck.Close())
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, 450*time.Millisecond, "Close did not wait CloseTimeout")
	assert.Less(t, took, 2500*time.Millisecond, "Close waited far beyond CloseTimeout")
	assert.Error(t, held.Context().Err(), "handler's context cancelled")

	closed := time.Now()
	again := receive(t, chOther, 2*time.Second)
	t.Logf("Close took %s; redelivered %s after it", took, time.Since(closed))
	assert.Equal(t, msg.UUID, again.UUID)
	assert.Equal(t, "1", again.Metadata.Get(redisdelay.AttemptKey), "a hand-back keeps the attempt")
	again.Ack()
	held.Ack() // far too late: no effect
	nothing(t, chOther, 300*time.Millisecond)
	assert.Zero(t, lcPending(t, client, topic, "g"))
}

// Prefetched messages not yet handed to a handler go back to the group as
// soon as Close starts, while the handler still finishes its own.
func TestLifecycle_CloseHandsBackPrefetchedMessagesAtOnce(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	topic := topic()
	pub := lcPublisher(t, client)
	first := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", BatchSize: 10, CloseTimeout: 5 * time.Second})
	other := lcSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	require.NoError(t, first.SubscribeInitialize(topic))
	var msgs []*message.Message
	for i := 0; i < 5; i++ {
		msgs = append(msgs, lcMessage(strconv.Itoa(i)))
	}
	require.NoError(t, pub.Publish(topic, msgs...))
	ch := subscribe(t, first, topic)
	handled := receive(t, ch, 2*time.Second)
	require.Equal(t, msgs[0].UUID, handled.UUID)
	chOther := subscribe(t, other, topic)
	nothing(t, chOther, 300*time.Millisecond) // the other four are prefetched
	require.EqualValues(t, 5, lcPending(t, client, topic, "g"))

	go func() {
		<-handled.Context().Done()
		time.Sleep(1500 * time.Millisecond)
		handled.Ack()
	}()
	closeDone := lcCloseAsync(first)
	var got []string
	for i := 0; i < 4; i++ {
		m := receive(t, chOther, time.Second)
		assert.Equal(t, "1", m.Metadata.Get(redisdelay.AttemptKey))
		got = append(got, m.UUID)
		m.Ack()
	}
	select {
	case <-closeDone:
		t.Error("prefetched messages came back only after Close returned")
	default:
	}
	assert.ElementsMatch(t, []string{msgs[1].UUID, msgs[2].UUID, msgs[3].UUID, msgs[4].UUID}, got)
	select {
	case <-closeDone:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	nothing(t, chOther, 300*time.Millisecond) // the handled one was acked
	assert.Zero(t, lcPending(t, client, topic, "g"))
}

// ------------------------------------------------------------ Redis down

// lcProxy is a TCP proxy to the test server that can refuse connections
// (cut), swallow traffic (stall) and come back (restore), so clients lose
// Redis while the shared server keeps running for the other tests.
type lcProxy struct {
	target, addr string

	mu      sync.Mutex
	ln      net.Listener // nil while cut
	stalled bool
	pipes   map[*lcPipe]struct{}
	held    map[net.Conn]struct{} // client connections that get no answer
}

type lcPipe struct{ down, up net.Conn }

func newLcProxy(t *testing.T) *lcProxy {
	needSingle(t, "it cuts and stalls connections through a TCP proxy in front of the test server")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &lcProxy{target: redisAddr, addr: ln.Addr().String(), ln: ln,
		pipes: map[*lcPipe]struct{}{}, held: map[net.Conn]struct{}{}}
	go p.accept(ln)
	t.Cleanup(func() { p.cut(0) })
	return p
}

// client returns a go-redis client through the proxy, with default options
// but the pool size.
func (p *lcProxy) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.addr, PoolSize: 32})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (p *lcProxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *lcProxy) serve(down net.Conn) {
	p.mu.Lock()
	if p.stalled {
		p.held[down] = struct{}{}
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = down.Close()
		return
	}
	pipe := &lcPipe{down: down, up: up}
	p.mu.Lock()
	if p.ln == nil || p.stalled {
		p.mu.Unlock()
		_ = down.Close()
		_ = up.Close()
		return
	}
	p.pipes[pipe] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, down); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
	<-done
	p.mu.Lock()
	_, mine := p.pipes[pipe] // else cut or stall took it over
	delete(p.pipes, pipe)
	p.mu.Unlock()
	if mine {
		_ = down.Close()
		_ = up.Close()
	}
}

// cut refuses new connections and closes the clients' connections at once;
// their server sides stay open for linger, so a reply Redis sends meanwhile
// (a blocked read served by a publish) is lost on the way.
func (p *lcProxy) cut(linger time.Duration) {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	var ups []net.Conn
	for pipe := range p.pipes {
		_ = pipe.down.Close()
		ups = append(ups, pipe.up)
	}
	for c := range p.held {
		_ = c.Close()
	}
	p.pipes, p.held, p.stalled = map[*lcPipe]struct{}{}, map[net.Conn]struct{}{}, false
	p.mu.Unlock()
	closeUps := func() {
		for _, c := range ups {
			_ = c.Close()
		}
	}
	if linger > 0 {
		time.AfterFunc(linger, closeUps)
	} else {
		closeUps()
	}
}

// stall keeps every connection open, and accepts new ones, but nothing
// reaches Redis and no reply comes back: a network partition without resets.
func (p *lcProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	for pipe := range p.pipes {
		_ = pipe.up.Close()
		p.held[pipe.down] = struct{}{}
	}
	p.pipes = map[*lcPipe]struct{}{}
}

func (p *lcProxy) restore(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.held {
		_ = c.Close()
	}
	p.held, p.stalled = map[net.Conn]struct{}{}, false
	if p.ln != nil {
		return
	}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err, "proxy cannot listen on %s again", p.addr)
	p.ln = ln
	go p.accept(ln)
}

// lcIsCause reports whether err wraps a network or context error: the
// cause of a failed call to an unreachable Redis.
func lcIsCause(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.Is(err, io.EOF)
}

// Publish to an unreachable Redis fails within PublishTimeout (plus a
// margin) with an error naming the topic and wrapping the cause, and
// returns promptly when the message's context ends first.
func TestLifecycle_PublishFailsBoundedWhenRedisIsUnreachable(t *testing.T) {
	t.Parallel()
	proxy := newLcProxy(t)
	client := proxy.client(t)
	topic := topic()
	const timeout = 500 * time.Millisecond
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, PublishTimeout: timeout}, logger)
	require.NoError(t, err)
	patient, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, PublishTimeout: time.Minute}, logger)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(topic, lcMessage("before")))
	require.NoError(t, patient.Publish(topic, lcMessage("before")))

	publish := func(p *redisdelay.Publisher, msg *message.Message) (error, time.Duration) {
		start := time.Now()
		err := p.Publish(topic, msg)
		return err, time.Since(start)
	}
	check := func(t *testing.T, err error, took, bound time.Duration) {
		t.Helper()
		require.Error(t, err)
		require.ErrorContains(t, err, topic)
		assert.True(t, lcIsCause(err), "the error does not wrap its cause: %#v", err)
		assert.Less(t, took, bound, "Publish took too long: %v", err)
		t.Logf("failed after %s: %v", took, err)
	}
	resumed := func(t *testing.T) {
		t.Helper()
		require.Eventually(t, func() bool { return pub.Publish(topic, lcMessage("after")) == nil },
			5*time.Second, 50*time.Millisecond, "Publish does not work again after Redis is back")
	}

	t.Run("refused", func(t *testing.T) {
		proxy.cut(0)
		err, took := publish(pub, lcMessage("x"))
		check(t, err, took, timeout+1500*time.Millisecond)

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		msg := lcMessage("x")
		msg.SetContext(ctx)
		err, took = publish(patient, msg)
		check(t, err, took, time.Second)

		proxy.restore(t)
		resumed(t)
	})
	t.Run("stalled by timeout", func(t *testing.T) {
		proxy.stall()
		defer proxy.restore(t)
		err, took := publish(pub, lcMessage("x"))
		check(t, err, took, timeout+1500*time.Millisecond)
	})
	t.Run("stalled by context", func(t *testing.T) {
		proxy.stall()
		defer proxy.restore(t)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		msg := lcMessage("x")
		msg.SetContext(ctx)
		err, took := publish(patient, msg)
		check(t, err, took, 300*time.Millisecond+time.Second)
	})
	resumed(t)
}

// A subscriber with its embedded scheduler loses Redis for 1.5s while
// messages, some delayed, are published: once Redis is reachable again all
// of them arrive, with nothing restarted.
func TestLifecycle_SubscriberAndSchedulerResumeAfterRedisOutage(t *testing.T) {
	t.Parallel()
	proxy := newLcProxy(t)
	topic := topic()
	direct := newClient(t)
	pub := lcPublisher(t, direct) // straight to Redis
	sub := lcSubscriber(t, proxy.client(t), redisdelay.SubscriberConfig{
		ConsumerGroup: "g", CheckInterval: 200 * time.Millisecond, CloseTimeout: time.Second,
	})
	ch := subscribe(t, sub, topic)
	first := lcMessage("first")
	require.NoError(t, pub.Publish(topic, first))
	receive(t, ch, 2*time.Second).Ack()
	time.Sleep(100 * time.Millisecond) // the subscription is back in its blocking read

	want := map[string]string{}
	publish := func(msg *message.Message) {
		require.NoError(t, pub.Publish(topic, msg))
		want[msg.UUID] = string(msg.Payload)
	}
	publish(delayed(delay.For(700*time.Millisecond), "due during the outage"))
	proxy.cut(0)
	cutAt := time.Now()
	// Let Redis notice the closed connections first: a publish it serves to
	// a blocked read before that is the lost-reply case, tested on its own
	// (TestLifecycle_ReadReplyLostInTransitIsStillDelivered).
	time.Sleep(50 * time.Millisecond)
	publish(lcMessage("immediate 1"))
	publish(lcMessage("immediate 2"))
	publish(delayed(delay.For(500*time.Millisecond), "delayed 0.5s"))
	publish(delayed(delay.For(2500*time.Millisecond), "due after the outage"))
	publish(lcMessage("immediate 3"))
	time.Sleep(1500*time.Millisecond - time.Since(cutAt))
	proxy.restore(t)
	restored := time.Now()

	got := map[string]int{}
	deadline := time.After(8 * time.Second)
	for len(got) < len(want) {
		select {
		case m := <-ch:
			require.NotNil(t, m, "channel closed")
			_, expected := want[m.UUID]
			assert.True(t, expected, "unexpected message %q", m.Payload)
			got[m.UUID]++
			m.Ack()
		case <-deadline:
			var missing []string
			for id, p := range want {
				if got[id] == 0 {
					missing = append(missing, p)
				}
			}
			pending, _ := direct.XPendingExt(context.Background(), &redis.XPendingExtArgs{
				Stream: lcKey(topic, "stream"), Group: "g", Start: "-", End: "+", Count: 100,
			}).Result()
			t.Fatalf("after the outage: missing %q; pending in the ready stream: %+v", missing, pending)
		}
	}
	t.Logf("all %d delivered %s after Redis came back", len(want), time.Since(restored))
	nothing(t, ch, 300*time.Millisecond)
	for id, n := range got {
		if n > 1 {
			t.Logf("message %q delivered %d times (at-least-once)", want[id], n)
		}
	}
}

// A blocked read that Redis serves while the connection is breaking: the
// entry is assigned to the consumer but the reply never arrives. The client
// library retries the read on a new connection by itself, so the
// subscription sees no error. The message must still be delivered: re-read,
// or reclaimed after VisibilityTimeout.
func TestLifecycle_ReadReplyLostInTransitIsStillDelivered(t *testing.T) {
	t.Parallel()
	proxy := newLcProxy(t)
	topic := topic()
	direct := newClient(t)
	pub := lcPublisher(t, direct)
	const visibility = time.Second
	sub := lcSubscriber(t, proxy.client(t), redisdelay.SubscriberConfig{
		ConsumerGroup: "g", CheckInterval: 100 * time.Millisecond, VisibilityTimeout: visibility,
		BlockTime:    3 * time.Second, // the read is surely blocked when the connection breaks
		CloseTimeout: time.Second,
	})
	ch := subscribe(t, sub, topic)
	require.NoError(t, pub.Publish(topic, lcMessage("first")))
	receive(t, ch, 2*time.Second).Ack()
	time.Sleep(200 * time.Millisecond) // back in the blocking read

	// The server side of the connections lingers after the cut: the publish
	// serves the blocked read, whose reply is lost on the way.
	proxy.cut(500 * time.Millisecond)
	lost := lcMessage("reply lost")
	require.NoError(t, pub.Publish(topic, lost))
	time.Sleep(100 * time.Millisecond)
	proxy.restore(t)

	select {
	case m := <-ch:
		require.NotNil(t, m, "channel closed")
		assert.Equal(t, lost.UUID, m.UUID)
		m.Ack()
	case <-time.After(3*visibility + 2*time.Second):
		pending, _ := direct.XPendingExt(context.Background(), &redis.XPendingExtArgs{
			Stream: lcKey(topic, "stream"), Group: "g", Start: "-", End: "+", Count: 10,
		}).Result()
		t.Fatalf("message never delivered (%s after the outage, VisibilityTimeout %s); "+
			"pending in the ready stream: %+v", 3*visibility+2*time.Second, visibility, pending)
	}
	nothing(t, ch, 300*time.Millisecond)
}
