package redisdelay_test

import (
	"context"
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

// PublisherConfig.MinReplicas: Publish WAITs for replicas on the connection
// that ran the publish script.

// More replicas than any test deployment has (the single server has none,
// the cluster's masters and the sentinel master one each).
const tooManyReplicas = 5

func replicaPublisher(t *testing.T, client redis.UniversalClient, minReplicas int, timeout time.Duration) *redisdelay.Publisher {
	t.Helper()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{
		Client: client, MinReplicas: minReplicas, ReplicaTimeout: timeout,
	}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// Too few replicas: ErrNotReplicated after ReplicaTimeout, and the messages
// are stored all the same (delivered). Retrying the delayed one is a no-op.
func TestMinReplicas_NotReplicatedButStored(t *testing.T) {
	env := setup(t)
	const timeout = 300 * time.Millisecond
	pub := replicaPublisher(t, env.client, tooManyReplicas, timeout)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)

	now := message.NewMessage(watermill.NewUUID(), []byte("now"))
	start := time.Now()
	err := pub.Publish(env.topic, now)
	took := time.Since(start)
	require.ErrorIs(t, err, redisdelay.ErrNotReplicated)
	assert.Contains(t, err.Error(), "are stored on the master")
	assert.Contains(t, err.Error(), "of the 5 replicas required")
	assert.GreaterOrEqual(t, took, timeout-50*time.Millisecond, "WAIT returned before ReplicaTimeout")
	t.Logf("ErrNotReplicated after %s: %v", took, err)
	msg := receive(t, ch, 5*time.Second)
	assert.Equal(t, now.UUID, msg.UUID)
	msg.Ack()

	later := delayed(delay.For(500*time.Millisecond), "later")
	require.ErrorIs(t, pub.Publish(env.topic, later), redisdelay.ErrNotReplicated)
	require.ErrorIs(t, pub.Publish(env.topic, later), redisdelay.ErrNotReplicated, "the retry of a waiting delayed message")
	msg = receive(t, ch, 5*time.Second)
	assert.Equal(t, later.UUID, msg.UUID)
	msg.Ack()
	nothing(t, ch, time.Second) // the retry stored nothing more
}

// WAIT itself failing (here: the ACL user may run scripts but not WAIT) is
// an ErrNotReplicated too: the script has stored the messages.
func TestMinReplicas_WaitFails(t *testing.T) {
	needSingle(t, "it creates an ACL user on the one server")
	env := setup(t)
	ctx := context.Background()
	user := "nowait-" + watermill.NewShortUUID()
	require.NoError(t, env.client.Do(ctx, "ACL", "SETUSER", user, "on", "nopass", "~*", "&*", "+@all", "-wait").Err())
	t.Cleanup(func() { _ = env.client.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	client := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "x"})
	t.Cleanup(func() { _ = client.Close() })

	pub := replicaPublisher(t, client, 1, time.Second)
	msg := delayed(delay.For(time.Hour), "x")
	err := pub.Publish(env.topic, msg)
	require.ErrorIs(t, err, redisdelay.ErrNotReplicated)
	assert.Contains(t, err.Error(), "WAIT for replicas failed")
	assert.Contains(t, err.Error(), "NOPERM")
	waiting, err := env.insp.Waiting(ctx, env.topic, 0, 10)
	require.NoError(t, err)
	require.Len(t, waiting, 1, "the message is stored")
	assert.Equal(t, msg.UUID, waiting[0].Message.UUID)
}

// With replicas (a Cluster or Sentinel deployment) Publish succeeds, and
// the messages are delivered.
func TestMinReplicas_Replicated(t *testing.T) {
	if !clusterMode() && !sentinelMode() {
		t.Skip("needs replicas: run with REDISDELAY_TEST_CLUSTER (.ci/cluster.sh start) or REDISDELAY_TEST_SENTINEL (.ci/sentinel.sh start)")
	}
	env := setup(t)
	pub := replicaPublisher(t, env.client, 1, 2*time.Second)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)
	want := map[string]bool{}
	for i := range 20 {
		var msg *message.Message
		if i%2 == 0 {
			msg = message.NewMessage(watermill.NewUUID(), []byte("now"))
		} else {
			msg = delayed(delay.For(200*time.Millisecond), "later")
		}
		require.NoError(t, pub.Publish(env.topic, msg))
		want[msg.UUID] = true
	}
	for len(want) > 0 {
		msg := receive(t, ch, 10*time.Second)
		delete(want, msg.UUID)
		msg.Ack()
	}
}

func TestMinReplicas_Validate(t *testing.T) {
	env := setup(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	for _, c := range []struct {
		config redisdelay.PublisherConfig
		want   string
	}{
		{redisdelay.PublisherConfig{Client: env.client, MinReplicas: -1},
			"redisdelay: PublisherConfig.MinReplicas is -1: use 0 (do not wait for replicas) or more"},
		{redisdelay.PublisherConfig{Client: env.client, ReplicaTimeout: -time.Second},
			"redisdelay: PublisherConfig.ReplicaTimeout is -1s: use at least 1ms (0 means the default)"},
		{redisdelay.PublisherConfig{Client: env.client, MinReplicas: 1, ReplicaTimeout: 2 * time.Second, PublishTimeout: time.Second},
			"redisdelay: PublisherConfig.ReplicaTimeout (2s) is not under PublishTimeout (1s): Publish would give up before the replicas could confirm"},
		{redisdelay.PublisherConfig{Client: ring, MinReplicas: 1},
			"redisdelay: PublisherConfig.MinReplicas needs a *redis.Client (plain or Sentinel) or a *redis.ClusterClient: WAIT must run on the connection that stored the messages, which a *redis.Ring does not expose"},
	} {
		_, err := redisdelay.NewPublisher(c.config, nil)
		assert.EqualError(t, err, c.want)
	}
	// A Ring is fine without MinReplicas; a long ReplicaTimeout is fine without it too.
	_, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: ring, ReplicaTimeout: time.Minute}, nil)
	assert.NoError(t, err)
}
