package redisdelaytest_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
	"github.com/redisdelay/watermill-redisdelay/redisdelaytest"
)

// The tests run against the server at REDISDELAY_TEST_ADDR (loopback
// only), or one TestMain starts; each uses a key prefix of its own.
var redisAddr string

func TestMain(m *testing.M) {
	addr, release, err := redistest.ForPackage()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisdelaytest tests:", err)
		os.Exit(1)
	}
	redisAddr = addr
	code := m.Run()
	release()
	os.Exit(code)
}

// env is a publisher, a subscribing group and an inspector on a key
// prefix of the test's own, with the library's default configuration.
type env struct {
	t      *testing.T
	ctx    context.Context
	config redisdelaytest.Config
	pub    *redisdelay.Publisher
	insp   *redisdelay.Inspector
}

func newEnv(t *testing.T) *env {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = client.Close() })
	prefix := "adv-" + watermill.NewShortUUID()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix, TopicPartitions: map[string]int{"parted": 4}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: prefix})
	require.NoError(t, err)
	return &env{t: t, ctx: context.Background(), config: redisdelaytest.Config{Client: client, KeyPrefix: prefix}, pub: pub, insp: insp}
}

// subscribe subscribes group g to topic with config, and returns the
// messages' channel.
func (e *env) subscribe(topic string, config redisdelay.SubscriberConfig) <-chan *message.Message {
	e.t.Helper()
	config.Client, config.KeyPrefix = e.config.Client, e.config.KeyPrefix
	if config.ConsumerGroup == "" {
		config.ConsumerGroup = "g"
	}
	sub, err := redisdelay.NewSubscriber(config, nil)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = sub.Close() })
	ch, err := sub.Subscribe(e.ctx, topic)
	require.NoError(e.t, err)
	return ch
}

func (e *env) publish(topic string, d time.Duration, payload string) *message.Message {
	e.t.Helper()
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	delay.Message(msg, delay.For(d))
	require.NoError(e.t, e.pub.Publish(topic, msg))
	return msg
}

func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m := <-ch:
		m.Ack()
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10s")
		return nil
	}
}

func nothing(t *testing.T, ch <-chan *message.Message, during time.Duration) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected message %s (%s)", m.UUID, m.Payload)
	case <-time.After(during):
	}
}

func (e *env) due(topic, uuid string) time.Time {
	e.t.Helper()
	w, ok, err := e.insp.FindWaiting(e.ctx, topic, uuid)
	require.NoError(e.t, err)
	require.True(e.t, ok, "message %s waits", uuid)
	return w.Due
}

func TestAdvance_DueMessagesFire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ch := e.subscribe("orders", redisdelay.SubscriberConfig{})
	soon := e.publish("orders", 30*time.Minute, "close order 1")
	later := e.publish("orders", 2*time.Hour, "close order 2")
	far := e.publish("orders", 72*time.Hour, "far ahead")
	farDue := e.due("orders", far.UUID)
	nothing(t, ch, 100*time.Millisecond)

	got, err := redisdelaytest.Advance(e.ctx, e.config, 30*time.Minute, "orders")
	require.NoError(t, err)
	assert.Equal(t, redisdelaytest.Advanced{Waiting: 3, Far: 3}, got, "far messages (due in 2 minutes or more) are moved to the waiting set first")
	assert.Equal(t, soon.UUID, receive(t, ch).UUID)
	nothing(t, ch, 200*time.Millisecond)
	assert.WithinDuration(t, time.Now().Add(90*time.Minute), e.due("orders", later.UUID), time.Minute)
	assert.Equal(t, farDue.Add(-30*time.Minute), e.due("orders", far.UUID), "to the millisecond")

	_, err = redisdelaytest.Advance(e.ctx, e.config, 72*time.Hour)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{later.UUID, far.UUID}, []string{receive(t, ch).UUID, receive(t, ch).UUID})
}

func TestAdvance_Partitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ch := e.subscribe("parted", redisdelay.SubscriberConfig{TopicPartitions: map[string]int{"parted": 4}})
	want := map[string]bool{}
	for n := range 20 {
		want[e.publish("parted", time.Duration(n+1)*time.Minute, strconv.Itoa(n)).UUID] = true
	}
	got, err := redisdelaytest.Advance(e.ctx, e.config, 20*time.Minute, "parted")
	require.NoError(t, err)
	assert.Equal(t, int64(20), got.Waiting)
	for range 20 {
		m := receive(t, ch)
		assert.True(t, want[m.UUID])
		delete(want, m.UUID)
	}
}

func TestAdvance_RetryBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The default backoff doubles from 1 s: the fifth attempt comes 15 s
	// after the first. An hour of backoff makes the point.
	ch := e.subscribe("jobs", redisdelay.SubscriberConfig{RetryDelay: func(int) time.Duration { return time.Hour }})
	msg := message.NewMessage(watermill.NewUUID(), []byte("flaky"))
	require.NoError(t, e.pub.Publish("jobs", msg))
	select {
	case m := <-ch:
		m.Nack()
	case <-time.After(10 * time.Second):
		t.Fatal("no first delivery")
	}
	require.Eventually(t, func() bool {
		st, err := e.insp.Stats(e.ctx, "jobs")
		return err == nil && len(st.Groups) == 1 && st.Groups[0].Retry == 1
	}, 10*time.Second, 10*time.Millisecond)
	nothing(t, ch, 100*time.Millisecond)

	got, err := redisdelaytest.Advance(e.ctx, e.config, time.Hour, "jobs")
	require.NoError(t, err)
	assert.Equal(t, int64(1), got.Retrying)
	m := receive(t, ch)
	assert.Equal(t, msg.UUID, m.UUID)
	assert.Equal(t, "2", m.Metadata.Get(redisdelay.AttemptKey))
}

func TestAdvance_ScheduleTicks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ch := e.subscribe("reports", redisdelay.SubscriberConfig{})
	require.NoError(t, e.pub.Schedule(e.ctx, redisdelay.Schedule{ID: "hourly", Spec: "@every 1h", Topic: "reports", Payload: []byte("report")}))
	require.NoError(t, e.pub.Schedule(e.ctx, redisdelay.Schedule{ID: "other", Spec: "@every 1h", Topic: "elsewhere"}))
	list, err := e.insp.Schedules(e.ctx)
	require.NoError(t, err)
	require.Equal(t, "hourly", list[0].ID)
	next := list[0].Next

	// Three hours: the three ticks due by then, in order, with their
	// instants, as a scheduler running all along would publish them.
	got, err := redisdelaytest.Advance(e.ctx, e.config, 3*time.Hour, "reports")
	require.NoError(t, err)
	assert.Equal(t, int64(3), got.Ticks)
	for n := range 3 {
		m := receive(t, ch)
		assert.Equal(t, "hourly", m.Metadata.Get(redisdelay.ScheduleIDKey))
		tick, err := time.Parse(time.RFC3339Nano, m.Metadata.Get(redisdelay.ScheduleTickKey))
		require.NoError(t, err)
		assert.True(t, next.Add(time.Duration(n)*time.Hour).Equal(tick), "tick %d at %s", n, tick)
	}
	nothing(t, ch, 200*time.Millisecond)
	list, err = e.insp.Schedules(e.ctx)
	require.NoError(t, err)
	assert.True(t, next.Add(3*time.Hour).Equal(list[0].Next), "next tick %s", list[0].Next)
	assert.True(t, next.Add(2*time.Hour).Equal(list[0].LastTick), "last tick %s", list[0].LastTick)
	assert.Equal(t, "other", list[1].ID)
	assert.True(t, next.Equal(list[1].Next), "a schedule of another topic does not move")

	// A thousand seconds on a schedule of every second: a thousand ticks.
	require.NoError(t, e.pub.Schedule(e.ctx, redisdelay.Schedule{ID: "often", Spec: "@every 1s", Topic: "elsewhere"}))
	got, err = redisdelaytest.Advance(e.ctx, e.config, 1000*time.Second, "elsewhere")
	require.NoError(t, err)
	assert.InDelta(t, 1001, got.Ticks, 2, "1,000 of often, 0 or 1 of other")
	_, err = redisdelaytest.Advance(e.ctx, e.config, 24*time.Hour, "elsewhere")
	assert.ErrorContains(t, err, "more than 10000 ticks: advance by less at a time")
}

// Ticks missed while no scheduler ran, older than the catch-up window,
// are skipped as a tick loop would skip them.
func TestAdvance_ScheduleCatchUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	require.NoError(t, e.pub.Schedule(e.ctx, redisdelay.Schedule{ID: "m", Spec: "@every 1m", Topic: "unscheduled", CatchUpWindow: 10 * time.Minute}))
	// No scheduler runs for the prefix: the next tick was an hour ago.
	hourAgo := time.Now().Add(-time.Hour).Truncate(time.Minute)
	require.NoError(t, e.config.Client.ZAdd(e.ctx, e.config.KeyPrefix+":{schedules}:next", redis.Z{Score: float64(hourAgo.UnixMilli()), Member: "m"}).Err())
	got, err := redisdelaytest.Advance(e.ctx, e.config, time.Minute)
	require.NoError(t, err)
	assert.InDelta(t, 50, got.SkippedTicks, 1, "those before the last 10 minutes")
	assert.InDelta(t, 11, got.Ticks, 1, "those of the last 10 minutes, and the next minute's")
}

func TestAdvance_BadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := redisdelaytest.Advance(e.ctx, redisdelaytest.Config{}, time.Minute)
	assert.ErrorContains(t, err, "Config.Client is nil")
	for _, d := range []time.Duration{0, -time.Minute, 101 * 365 * 24 * time.Hour} {
		_, err = redisdelaytest.Advance(e.ctx, e.config, d)
		assert.ErrorIs(t, err, redisdelay.ErrInvalidDelay, d)
	}
	_, err = redisdelaytest.Advance(e.ctx, e.config, time.Minute, "bad{topic}")
	assert.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
}
