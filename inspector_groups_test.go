package redisdelay_test

// The Inspector's listings of a consumer group's messages (ready, pending,
// retrying), its consumers, run now, and the Redis server's INFO.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/store"

	"github.com/redisdelay/watermill-redisdelay"
)

func TestInspector_GroupStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)

	// Groups "late" and "crashed" exist but have no running consumer:
	// what is published after they subscribed once is ready for them.
	for _, g := range []string{"late", "crashed"} {
		idle := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: g, DisableScheduler: true})
		idleCtx, stop := context.WithCancel(ctx)
		_, err := idle.Subscribe(idleCtx, env.topic)
		require.NoError(t, err)
		stop()
		require.NoError(t, idle.Close())
	}

	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Consumer: "worker-1",
		// A retry an hour away stays in the retry set for the test.
		RetryDelay: func(int) time.Duration { return time.Hour }})
	ch := subscribe(t, sub, env.topic)
	var published []string
	for n := range 5 {
		msg := newMessage(strconv.Itoa(n))
		msg.Metadata.Set("n", strconv.Itoa(n))
		published = append(published, msg.UUID)
		require.NoError(t, env.pub.Publish(env.topic, msg))
	}
	for n := range 5 {
		if m := receive(t, ch, 5*time.Second); n == 1 || n == 2 {
			m.Nack()
		} else {
			m.Ack()
		}
	}
	// "crashed" has two messages pending with a consumer that died.
	held := []string{crashedRead(t, env.client, env.topic, "crashed", "worker-9").ID, crashedRead(t, env.client, env.topic, "crashed", "worker-9").ID}
	require.Eventually(t, func() bool {
		g := groupStats(t, env.insp, env.topic, "g")
		return g.Retry == 2 && g.Pending == 0
	}, 5*time.Second, 10*time.Millisecond)

	// Ready, paged: the five, in publish order, for "late" only.
	var ready []redisdelay.GroupMessage
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		page, next, err := env.insp.Ready(ctx, env.topic, "late", cursor, 2)
		require.NoError(t, err)
		assert.LessOrEqual(t, len(page), 2)
		ready = append(ready, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Len(t, ready, 5)
	for n, m := range ready {
		assert.Equal(t, published[n], m.Message.UUID)
		assert.Equal(t, strconv.Itoa(n), m.Message.Metadata.Get("n"))
		assert.Equal(t, 1, m.Attempt)
		assert.WithinDuration(t, time.Now(), m.Queued, time.Minute)
	}
	none, next, err := env.insp.Ready(ctx, env.topic, "g", "", 10)
	require.NoError(t, err)
	assert.Empty(t, none, "g fetched everything")
	assert.Empty(t, next)

	// Pending: the two held, with their consumer and lease.
	pending, next, err := env.insp.Pending(ctx, env.topic, "crashed", "", 10)
	require.NoError(t, err)
	assert.Empty(t, next)
	require.Len(t, pending, 2)
	for n, p := range pending {
		assert.Equal(t, "0:m:"+held[n], p.ID)
		assert.Equal(t, published[n], p.Message.UUID)
		assert.Equal(t, "worker-9", p.Consumer)
		assert.Equal(t, 1, p.Attempt)
		assert.WithinDuration(t, time.Now(), p.Renewed, time.Minute)
		assert.Equal(t, 30*time.Second, p.LeaseExpires.Sub(p.Renewed), "the default visibility timeout")
	}
	first, next, err := env.insp.Pending(ctx, env.topic, "crashed", "", 1)
	require.NoError(t, err)
	require.Len(t, first, 1)
	second, _, err := env.insp.Pending(ctx, env.topic, "crashed", next, 1)
	require.NoError(t, err)
	require.Len(t, second, 1)
	assert.Equal(t, pending[1].ID, second[0].ID)
	rest3, _, err := env.insp.Ready(ctx, env.topic, "crashed", "", 10)
	require.NoError(t, err)
	assert.Len(t, rest3, 3, "what the dead consumer did not fetch")
	settled, _, err := env.insp.Pending(ctx, env.topic, "g", "", 10)
	require.NoError(t, err)
	assert.Empty(t, settled, "g settled everything")

	// Retrying: the two nacked, as attempt 2, due in an hour.
	retrying, next, err := env.insp.Retrying(ctx, env.topic, "g", "", 10)
	require.NoError(t, err)
	assert.Empty(t, next)
	require.Len(t, retrying, 2)
	got := map[string]bool{}
	for _, r := range retrying {
		got[r.Message.UUID] = true
		assert.Equal(t, 2, r.Attempt)
		assert.WithinDuration(t, time.Now().Add(time.Hour), r.Due, time.Minute)
	}
	assert.Equal(t, map[string]bool{published[1]: true, published[2]: true}, got)
	one, next, err := env.insp.Retrying(ctx, env.topic, "g", "", 1)
	require.NoError(t, err)
	require.Len(t, one, 1)
	two, last, err := env.insp.Retrying(ctx, env.topic, "g", next, 1)
	require.NoError(t, err)
	require.Len(t, two, 1)
	assert.NotEqual(t, one[0].ID, two[0].ID)
	rest, _, err := env.insp.Retrying(ctx, env.topic, "g", last, 1)
	require.NoError(t, err)
	assert.Empty(t, rest)

	// Consumers: the dead worker, holding two, seen when it read; and
	// the live one of "g".
	consumers, err := env.insp.Consumers(ctx, env.topic, "crashed")
	require.NoError(t, err)
	require.Len(t, consumers, 1)
	assert.Equal(t, "worker-9", consumers[0].Name)
	assert.Equal(t, int64(2), consumers[0].Pending)
	assert.WithinDuration(t, time.Now(), consumers[0].LastSeen, time.Minute)
	consumers, err = env.insp.Consumers(ctx, env.topic, "g")
	require.NoError(t, err)
	require.Len(t, consumers, 1)
	assert.True(t, strings.HasPrefix(consumers[0].Name, "worker-1-"), "the Consumer name and the subscription's suffix: %s", consumers[0].Name)
	assert.Zero(t, consumers[0].Pending)

	// Bad arguments.
	for _, call := range []func() error{
		func() error { _, _, err := env.insp.Ready(ctx, env.topic, "g", "nonsense", 10); return err },
		func() error { _, _, err := env.insp.Ready(ctx, env.topic, "g", "7:m:1-0", 10); return err },
		func() error { _, _, err := env.insp.Pending(ctx, env.topic, "g", "0:x:1-0", 10); return err },
		func() error { _, _, err := env.insp.Retrying(ctx, env.topic, "g", "0:nonsense", 10); return err },
		func() error { _, _, err := env.insp.Retrying(ctx, env.topic, "g", "3:1:m", 10); return err },
	} {
		err := call()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "cursor")
	}
	_, _, err = env.insp.Ready(ctx, env.topic, "g", "", 0)
	assert.ErrorContains(t, err, "limit is 0: use 1 to 10000")
	_, err = env.insp.Consumers(ctx, env.topic, "")
	assert.ErrorIs(t, err, redisdelay.ErrInvalidName)
}

func TestInspector_RunNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)

	byUUID := delayed(delay.For(time.Hour), "by uuid")
	byKey := businessKeyMessage("order-1", time.Hour, "by key", "")
	far := delayed(delay.For(48*time.Hour), "far tier")
	var tenants []*message.Message
	for n := range 3 {
		m := delayed(delay.For(time.Hour), "tenant "+strconv.Itoa(n))
		m.Metadata.Set("tenant", "acme")
		tenants = append(tenants, m)
	}
	require.NoError(t, env.pub.Publish(env.topic, append([]*message.Message{byUUID, byKey, far}, tenants...)...))

	ok, err := env.insp.RunNow(ctx, env.topic, byUUID.UUID)
	require.NoError(t, err)
	assert.True(t, ok)
	got := receive(t, ch, 5*time.Second)
	assert.Equal(t, byUUID.UUID, got.UUID)
	got.Ack()
	ok, err = env.insp.RunNow(ctx, env.topic, byUUID.UUID)
	require.NoError(t, err)
	assert.False(t, ok, "no longer waiting")

	ok, err = env.insp.RunNowKey(ctx, env.topic, "order-1")
	require.NoError(t, err)
	assert.True(t, ok)
	got = receive(t, ch, 5*time.Second)
	assert.Equal(t, byKey.UUID, got.UUID)
	got.Ack()

	ok, err = env.insp.RunNow(ctx, env.topic, far.UUID)
	require.NoError(t, err)
	assert.True(t, ok, "a message of the far tier")
	got = receive(t, ch, 5*time.Second)
	assert.Equal(t, far.UUID, got.UUID)
	got.Ack()

	_, err = env.insp.RunNowWhere(ctx, env.topic, redisdelay.Filter{}, redisdelay.BulkOptions{})
	assert.ErrorIs(t, err, redisdelay.ErrEmptyFilter)
	_, err = env.insp.RunNow(ctx, env.topic, "")
	assert.ErrorIs(t, err, redisdelay.ErrInvalidMessage)

	acme := redisdelay.Filter{Metadata: map[string]string{"tenant": "acme"}}
	p, err := env.insp.RunNowWhere(ctx, env.topic, acme, redisdelay.BulkOptions{DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, int64(3), p.Matched)
	assert.Zero(t, p.Done)
	p, err = env.insp.RunNowWhere(ctx, env.topic, acme, redisdelay.BulkOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(3), p.Done)
	all := map[string]bool{}
	for range 3 {
		m := receive(t, ch, 5*time.Second)
		all[m.UUID] = true
		m.Ack()
	}
	assert.Equal(t, map[string]bool{tenants[0].UUID: true, tenants[1].UUID: true, tenants[2].UUID: true}, all)
}

func TestInspector_Servers(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ctx := context.Background()
	servers, err := env.insp.Servers(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, servers)
	for _, s := range servers {
		assert.NotEmpty(t, s.Version)
		assert.Contains(t, []string{"redis", "valkey"}, s.Name)
		assert.Positive(t, s.UsedMemory)
	}

	needSingle(t, "its own server, to set the policy")
	own := setupOwnServer(t)
	require.NoError(t, own.server.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	servers, err = own.insp.Servers(ctx)
	require.NoError(t, err)
	require.Len(t, servers, 1)
	assert.Equal(t, "allkeys-lru", servers[0].MaxMemoryPolicy)
	assert.Contains(t, servers[0].Warning, "lost without an error")
	assert.Contains(t, servers[0].Warning, "maxmemory is not set")
	require.NoError(t, own.server.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	servers, err = own.insp.Servers(ctx)
	require.NoError(t, err)
	assert.Empty(t, servers[0].Warning)

	// A user without +info: the rest is unknown, not an error.
	user, _ := newACLUser(t, "allcommands", "-info", "allkeys")
	servers, err = newInspector(t, user).Servers(ctx)
	require.NoError(t, err)
	require.Len(t, servers, 1)
	assert.True(t, servers[0].InfoDenied)
}

// Consumer.Stuck: a consumer holding a message with no sign of life for
// twice the group's visibility timeout is stuck; a live one holding a
// message its handler has not settled renews its lease and is not, nor is
// one silent and holding nothing.
func TestInspector_ConsumersStuck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	// A short visibility timeout, stored for the group, so "twice of it"
	// passes within the test; no scheduler, which would reclaim the
	// crashed consumer's message.
	cfg := redisdelay.SubscriberConfig{ConsumerGroup: "g", Consumer: "live", DisableScheduler: true, VisibilityTimeout: 100 * time.Millisecond}
	live := newSubscriber(t, env.client, cfg)
	require.NoError(t, live.SubscribeInitialize(env.topic))
	require.NoError(t, env.pub.Publish(env.topic, newMessage("1"), newMessage("2"), newMessage("3")))
	crashedRead(t, env.client, env.topic, "g", "crashed")
	idle := crashedRead(t, env.client, env.topic, "g", "idle")
	require.NoError(t, env.client.XAck(ctx, store.Keys{Prefix: redisdelay.DefaultKeyPrefix}.Shard(env.topic, 0).Stream(), "g", idle.ID).Err()) // holds nothing now
	ch := subscribe(t, live, env.topic)
	held := receive(t, ch, 5*time.Second) // not settled while the test runs
	defer held.Ack()

	byName := func() map[string]redisdelay.Consumer {
		cs, err := env.insp.Consumers(ctx, env.topic, "g")
		require.NoError(t, err)
		out := map[string]redisdelay.Consumer{}
		for _, c := range cs {
			name, _, _ := strings.Cut(c.Name, "-") // a Subscriber's name takes a unique suffix
			out[name] = c
		}
		return out
	}
	require.Eventually(t, func() bool { return byName()["crashed"].Stuck }, 10*time.Second, 10*time.Millisecond)
	// Past twice the timeout for all three: only the crashed one is stuck.
	require.Eventually(t, func() bool { return byName()["idle"].Idle >= 500*time.Millisecond }, 10*time.Second, 10*time.Millisecond)
	cs := byName()
	assert.True(t, cs["crashed"].Stuck)
	assert.Equal(t, int64(1), cs["crashed"].Pending)
	assert.False(t, cs["live"].Stuck, "a live consumer renews what it holds: %+v", cs["live"])
	assert.Equal(t, int64(1), cs["live"].Pending)
	assert.False(t, cs["idle"].Stuck, "holds nothing: %+v", cs["idle"])
}

// Consumer.Active is zero where Redis does not tell it (before 7.2), not
// "now": never after LastSeen (a success is an attempt too).
func TestInspector_ConsumersActiveNotNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	require.NoError(t, newPublisher(t, env.client).Publish(env.topic, newMessage("1")))
	crashedRead(t, env.client, env.topic, "g", "crashed")
	require.Eventually(t, func() bool {
		cs, err := env.insp.Consumers(ctx, env.topic, "g")
		require.NoError(t, err)
		require.Len(t, cs, 1)
		if cs[0].Idle < 200*time.Millisecond {
			return false
		}
		assert.True(t, cs[0].Active.IsZero() || !cs[0].Active.After(cs[0].LastSeen), "active %v, last seen %v", cs[0].Active, cs[0].LastSeen)
		return true
	}, 10*time.Second, 20*time.Millisecond)
}

// Retrying pages by (due time, member): retries due in the same
// millisecond (the retry set's score is the due ms: common for messages
// nacked together) are listed once each, across pages, whatever leaves
// the set or joins it between pages: the page's last member falling due,
// members before it falling due, a new retry due earlier.
func TestInspector_RetryingPagesEqualDueTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	require.NoError(t, sub.SubscribeInitialize(env.topic))

	// The retry set as retry_later writes it (lib.lua): score = due ms *
	// 1024, member "<attempt>:<id>"; written here so that they share a due
	// millisecond for sure, an hour ahead.
	key := store.Keys{Prefix: redisdelay.DefaultKeyPrefix}.Shard(env.topic, 0).Retry("g")
	score := float64(time.Now().Add(time.Hour).UnixMilli() * 1024)
	var all []string
	for n := range 9 {
		m := fmt.Sprintf("2:1-%d", n)
		all = append(all, m)
		require.NoError(t, env.client.ZAdd(ctx, key, redis.Z{Score: score, Member: m}).Err())
	}
	var seen []string
	page := func(cursor string) string {
		msgs, next, err := env.insp.Retrying(ctx, env.topic, "g", cursor, 2)
		require.NoError(t, err)
		for _, m := range msgs {
			seen = append(seen, m.ID[len("0:"):])
		}
		return next
	}

	cursor := page("") // 1-0, 1-1
	// The page's last falls due (leaves the set) before the next page.
	require.NoError(t, env.client.ZRem(ctx, key, "2:1-1").Err())
	cursor = page(cursor) // 1-2, 1-3
	// A member before the cursor falls due, and a retry due earlier joins.
	require.NoError(t, env.client.ZRem(ctx, key, "2:1-0").Err())
	require.NoError(t, env.client.ZAdd(ctx, key, redis.Z{Score: score - 1024, Member: "2:0-new"}).Err())
	for cursor != "" {
		cursor = page(cursor)
	}
	assert.Equal(t, all, seen, "each once, in order")
}

// RunNowWhere counts each message once: a far-tier message it pulls into
// the waiting set and makes due is met there again by the same run (no
// scheduler moves it on: none runs), and a run repeated finds only
// messages already due, which it leaves alone.
func TestInspector_RunNowWhereCountsEachOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)

	// More far messages than one batch reads (1,000): the second batch
	// reads the waiting set the first one's far messages were pulled to.
	const far, near = 1200, 10
	var msgs []*message.Message
	for n := range far + near {
		d := 48 * time.Hour // the far tier
		if n >= far {
			d = time.Hour // the waiting set
		}
		m := delayed(delay.For(d), "m"+strconv.Itoa(n))
		m.Metadata.Set("tenant", "acme")
		msgs = append(msgs, m)
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	acme := redisdelay.Filter{Metadata: map[string]string{"tenant": "acme"}}

	p, err := env.insp.RunNowWhere(ctx, env.topic, acme, redisdelay.BulkOptions{DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, int64(far+near), p.Matched)
	p, err = env.insp.RunNowWhere(ctx, env.topic, acme, redisdelay.BulkOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(far+near), p.Matched, "matched")
	assert.Equal(t, int64(far+near), p.Done, "made due")

	p, err = env.insp.RunNowWhere(ctx, env.topic, acme, redisdelay.BulkOptions{})
	require.NoError(t, err)
	assert.Zero(t, p.Matched, "a run repeated: all are due already")
	assert.Zero(t, p.Done)
}

// Pending tells the message a handler has from those fetched with it:
// with one handler busy and the default batch, one is "handling" and the
// rest "buffered"; a consumer that never reports (here a raw read, as a
// release before 0.2.0 would) shows "unreported". The consumer reports a
// handler's message once it has had it for a second (reportAfter), long
// before the renewal every third of the visibility timeout (10 s here).
func TestInspector_PendingTellsHandledFromBuffered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	// The group exists and the four are in its stream before its
	// subscriber reads: one read fetches them all.
	first := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	require.NoError(t, first.SubscribeInitialize(env.topic))
	for n := range 4 {
		require.NoError(t, env.pub.Publish(env.topic, newMessage(strconv.Itoa(n))))
	}
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)
	// handled is what a handler has; buffered counts the others when
	// all are reported.
	states := func() (handled string, at time.Time, buffered int) {
		ps, _, err := env.insp.Pending(ctx, env.topic, "g", "", 10)
		require.NoError(t, err)
		for _, p := range ps {
			switch p.Handler {
			case redisdelay.HandlerRunning:
				require.Empty(t, handled, "one handler at a time")
				handled, at = p.Message.UUID, p.HandedAt
			case redisdelay.HandlerBuffered:
				buffered++
			default:
				return "", at, -1
			}
		}
		return handled, at, buffered
	}
	for n := range 2 {
		m := receive(t, ch, 5*time.Second)
		received := time.Now()
		require.Eventually(t, func() bool {
			h, at, buffered := states()
			return h == m.UUID && buffered == 3-n && at.After(received.Add(-time.Second)) && !at.After(time.Now())
		}, 5*time.Second, 50*time.Millisecond, "message %d: handling, those behind it buffered", n)
		loc, err := env.insp.Locate(ctx, env.topic, m.UUID)
		require.NoError(t, err)
		require.Len(t, loc.Locations, 1)
		assert.Equal(t, redisdelay.HandlerRunning, loc.Locations[0].Handler)
		assert.Contains(t, loc.Locations[0].Next, "'s handler has it since ")
		m.Ack()
	}

	// SubscribeInitialize, not Subscribe: a subscriber reading would take
	// the entries the raw read below needs (CI saw it: redis: nil).
	raw := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "raw", DisableScheduler: true})
	require.NoError(t, raw.SubscribeInitialize(env.topic))
	crashedRead(t, env.client, env.topic, "raw", "worker-9")
	ps, _, err := env.insp.Pending(ctx, env.topic, "raw", "", 10)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, redisdelay.HandlerUnreported, ps[0].Handler)
	assert.True(t, ps[0].HandedAt.IsZero())
}
