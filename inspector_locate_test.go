package redisdelay_test

// Inspector.Locate: one message found in every state it can be in.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// locations indexes a LocateResult's locations by group and state.
func locations(t *testing.T, r redisdelay.LocateResult) map[string]redisdelay.Location {
	t.Helper()
	out := map[string]redisdelay.Location{}
	for _, l := range r.Locations {
		k := l.Group + "/" + string(l.State)
		require.NotContains(t, out, k, "located twice")
		require.NotEmpty(t, l.Next, "every location says what happens next")
		out[k] = l
	}
	return out
}

// idleGroup makes the consumer group on the env's topic, whose only
// subscription ended at once: it exists and reads nothing.
func idleGroup(t *testing.T, env *env, group string) {
	t.Helper()
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: group, DisableScheduler: true})
	ctx, stop := context.WithCancel(context.Background())
	_, err := sub.Subscribe(ctx, env.topic)
	require.NoError(t, err)
	stop()
	require.NoError(t, sub.Close())
}

func TestInspector_LocateEveryState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)

	// "late" exists and reads nothing; "crashed" holds the message with
	// a consumer that died; "g" nacks it (an hour's retry); "d" buries it.
	idleGroup(t, env, "late")
	held := crashedReadLater(t, env)

	g := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", RetryDelay: func(int) time.Duration { return time.Hour }})
	d := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "d", MaxAttempts: 1})
	gch, dch := subscribe(t, g, env.topic), subscribe(t, d, env.topic)

	msg := newMessage("where am I")
	msg.Metadata.Set(redisdelay.BusinessKey, "order-7")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	receive(t, gch, 5*time.Second).Nack()
	receive(t, dch, 5*time.Second).Nack()
	held()
	awaitDeadLetters(t, env.insp, env.topic, "d", 1, 5*time.Second)
	require.Eventually(t, func() bool { return groupStats(t, env.insp, env.topic, "g").Retry == 1 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, env.insp.Pause(ctx, env.topic, "late"))

	for _, by := range []string{"uuid", "key"} {
		var r redisdelay.LocateResult
		var err error
		if by == "uuid" {
			r, err = env.insp.Locate(ctx, env.topic, msg.UUID)
		} else {
			r, err = env.insp.LocateKey(ctx, env.topic, "order-7")
		}
		require.NoError(t, err)
		assert.Empty(t, r.Unsearched, by)
		at := locations(t, r)
		require.Len(t, at, 4, "%s: %+v", by, r.Locations)

		ready := at["late/ready"]
		assert.True(t, ready.Paused)
		assert.Contains(t, ready.Next, "paused")
		assert.Equal(t, msg.UUID, ready.Message.UUID)
		assert.True(t, strings.HasPrefix(ready.ID, "0:m:"), ready.ID)

		pending := at["crashed/pending"]
		assert.Equal(t, "worker-9", pending.Consumer)
		assert.Equal(t, 1, pending.Attempt)
		assert.Equal(t, 30*time.Second, pending.LeaseExpires.Sub(pending.Renewed))
		assert.Contains(t, pending.Next, `Consumer "worker-9" holds it`)

		retry := at["g/retrying"]
		assert.Equal(t, 2, retry.Attempt)
		assert.WithinDuration(t, time.Now().Add(time.Hour), retry.Due, time.Minute)
		assert.Contains(t, retry.Next, "as attempt 2")

		dead := at["d/dead"]
		assert.Equal(t, 1, dead.Attempt)
		assert.NotEmpty(t, dead.Reason)
		assert.Contains(t, dead.Next, "dead letter")
	}

	// Once "g" and "d" are done with it, the ready stream still holds it
	// for "late": it is acknowledged for them... not in those groups'
	// listings, but located all the same.
	r, err := env.insp.Locate(ctx, env.topic, newMessage("").UUID)
	require.NoError(t, err)
	assert.Empty(t, r.Locations, "an unknown UUID is nowhere")
	assert.Positive(t, r.Read, "the stream was read")
}

// crashedReadLater reads the next message of the topic as consumer
// worker-9 of group "crashed", which then dies: call the function returned
// once the message is published. The group is created first, so it gets
// the message.
func crashedReadLater(t *testing.T, env *env) func() {
	idleGroup(t, env, "crashed")
	return func() { crashedRead(t, env.client, env.topic, "crashed", "worker-9") }
}

func TestInspector_LocateWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	// The tests' far tier starts a second or two ahead (main_test.go).
	near, far := delayed(delay.For(500*time.Millisecond), "near"), delayed(delay.For(time.Hour), "far")
	far.Metadata.Set(redisdelay.BusinessKey, "far-key")
	require.NoError(t, env.pub.Publish(env.topic, near, far))

	r, err := env.insp.Locate(ctx, env.topic, near.UUID)
	require.NoError(t, err)
	require.Len(t, r.Locations, 1)
	l := r.Locations[0]
	assert.Equal(t, redisdelay.StateWaiting, l.State)
	assert.False(t, l.Far)
	assert.Equal(t, "near", string(l.Message.Payload))
	assert.WithinDuration(t, time.Now(), l.Due, 5*time.Second)
	assert.Contains(t, l.Next, "copies it to each consumer group")

	r, err = env.insp.LocateKey(ctx, env.topic, "far-key")
	require.NoError(t, err)
	require.Len(t, r.Locations, 1)
	l = r.Locations[0]
	assert.Equal(t, redisdelay.StateWaiting, l.State)
	assert.True(t, l.Far)
	assert.Equal(t, far.UUID, l.Message.UUID)
	assert.Contains(t, l.Next, "far tier")

	_, err = env.insp.Locate(ctx, env.topic, "")
	assert.ErrorIs(t, err, redisdelay.ErrInvalidMessage, "an empty UUID is refused")
	_, err = env.insp.Locate(ctx, "bad{topic", near.UUID)
	assert.Error(t, err)
	_, err = env.insp.LocateWith(ctx, env.topic, redisdelay.LocateQuery{UUID: near.UUID, BusinessKey: "far-key"})
	assert.ErrorContains(t, err, "give a UUID or a business key, not both")
	_, err = env.insp.LocateWith(ctx, env.topic, redisdelay.LocateQuery{UUID: near.UUID, Scan: -1})
	assert.ErrorContains(t, err, "scan budget -1")
	r, err = env.insp.LocateWith(ctx, env.topic, redisdelay.LocateQuery{UUID: near.UUID, Scan: 1})
	require.NoError(t, err)
	assert.Len(t, r.Locations, 1, "waiting messages need no scan")
}

// TestInspector_LocateBounded: a ready stream longer than the scan budget
// is read at both ends only, and the result says what was left unread.
func TestInspector_LocateBounded(t *testing.T) {
	defer redisdelay.SetLocateBudget(3)()
	ctx := context.Background()
	env := setup(t)
	idleGroup(t, env, "late")
	var uuids []string
	for range 10 {
		m := newMessage("x")
		uuids = append(uuids, m.UUID)
		require.NoError(t, env.pub.Publish(env.topic, m))
	}
	for n, want := range map[int]bool{0: true, 2: true, 5: false, 7: true, 9: true} {
		r, err := env.insp.Locate(ctx, env.topic, uuids[n])
		require.NoError(t, err)
		assert.Equal(t, want, len(r.Locations) == 1, "message %d", n)
		require.Len(t, r.Unsearched, 1, "message %d", n)
		assert.Contains(t, r.Unsearched[0], "ready stream: 4 entries not read")
	}
}

// A Redis error midway (here: an ACL user that may not scan hashes, which
// the retry sets' bodies need) fails the lookup, saying what it was doing.
func TestInspector_LocateRedisError(t *testing.T) {
	admin := singleClient(t, "it creates an ACL user on the one server")
	ctx := context.Background()
	env := setup(t)
	g := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", DisableScheduler: true})
	gctx, stop := context.WithCancel(ctx)
	_, err := g.Subscribe(gctx, env.topic)
	require.NoError(t, err)
	stop()
	require.NoError(t, g.Close())
	msg := newMessage("x")
	require.NoError(t, env.pub.Publish(env.topic, msg))

	user := "nohscan-" + watermill.NewShortUUID()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "on", "nopass", "~*", "&*", "+@all", "-hscan").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	client := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "x"})
	t.Cleanup(func() { _ = client.Close() })
	insp := newInspector(t, client)
	_, err = insp.Locate(ctx, env.topic, msg.UUID)
	require.Error(t, err)
	assert.ErrorContains(t, err, "NOPERM")
	assert.ErrorContains(t, err, `locate message "`+msg.UUID+`" in topic`)
}
