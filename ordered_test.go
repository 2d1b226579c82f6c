package redisdelay_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Three ordered subscribers share four partitions: every key's messages
// are handled one at a time, in publish order, each exactly once, and the
// work is shared.
func TestOrdered_KeysHandledSeriallyInOrder(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const parts, keys, perKey = 4, 12, 25
	pub := newPartitionedPublisher(t, env.client, parts)

	var (
		mu         sync.Mutex
		inFlight   = map[string]bool{}
		last       = map[string]int{}
		byConsumer = map[int]int{}
		total      int
		done       = make(chan struct{})
	)
	for c := range 3 {
		sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, Ordered: true, BatchSize: 4,
			BlockTime: 100 * time.Millisecond})
		ch := subscribe(t, sub, env.topic)
		go func() {
			for msg := range ch {
				key := msg.Metadata.Get(redisdelay.PartitionKey)
				seq, _ := strconv.Atoi(string(msg.Payload))
				mu.Lock()
				if inFlight[key] {
					t.Errorf("key %s handled concurrently", key)
				}
				inFlight[key] = true
				if prev, ok := last[key]; ok && seq != prev+1 {
					t.Errorf("key %s: message %d after %d", key, seq, prev)
				}
				mu.Unlock()
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				mu.Lock()
				inFlight[key] = false
				last[key] = seq
				byConsumer[c]++
				total++
				if total == keys*perKey {
					close(done)
				}
				mu.Unlock()
				msg.Ack()
			}
		}()
	}
	// Publishing once the subscriptions share the partitions.
	require.Eventually(t, func() bool {
		owners := map[string]int{}
		for p := range parts {
			if o, err := env.client.Get(context.Background(), shardOf(env.topic, p).Owner("g")).Result(); err == nil {
				owners[o]++
			}
		}
		return len(owners) == 3
	}, 10*time.Second, 20*time.Millisecond)
	for seq := range perKey {
		for k := range keys {
			require.NoError(t, pub.Publish(env.topic, keyedMessage("key-"+strconv.Itoa(k), seq)))
		}
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("handled %d of %d messages", total, keys*perKey)
	}
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		require.Equal(t, perKey-1, last["key-"+strconv.Itoa(k)])
	}
	busy := 0
	for _, n := range byConsumer {
		if n > 0 {
			busy++
		}
	}
	require.GreaterOrEqual(t, busy, 2, "partitions are shared: %v", byConsumer)
}

// A nacked message is retried in place, after its retry delay, before the
// next message of its partition; at MaxAttempts it goes to the dead
// letters and the partition moves on.
func TestOrdered_NackRetriesInPlace(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, 1)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Ordered: true, MaxAttempts: 3,
		RetryDelay: func(int) time.Duration { return 50 * time.Millisecond }})
	ch := subscribe(t, sub, env.topic)
	for seq := range 3 {
		require.NoError(t, pub.Publish(env.topic, keyedMessage("k", seq)))
	}
	var got []string
	var lastAt time.Time
	for len(got) < 6 {
		msg := receive(t, ch, 5*time.Second)
		if !lastAt.IsZero() && string(msg.Payload) == "0" {
			assert.GreaterOrEqual(t, time.Since(lastAt), 50*time.Millisecond, "retry delay")
		}
		lastAt = time.Now()
		got = append(got, string(msg.Payload)+"/"+msg.Metadata.Get(redisdelay.AttemptKey))
		switch string(msg.Payload) {
		case "0": // fails every time: dead-lettered after 3 attempts
			msg.Nack()
		case "1": // fails once
			if msg.Metadata.Get(redisdelay.AttemptKey) == "1" {
				msg.Nack()
			} else {
				msg.Ack()
			}
		default:
			msg.Ack()
		}
	}
	require.Equal(t, []string{"0/1", "0/2", "0/3", "1/1", "1/2", "2/1"}, got)
	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 1, 5*time.Second)
	require.Equal(t, "0", string(dead[0].Message.Payload))
	require.Equal(t, 3, dead[0].Attempts)
	nothing(t, ch, 200*time.Millisecond)
}

// A second ordered subscriber takes half the partitions from the first,
// and all of them when the first closes; messages keep their order.
func TestOrdered_PartitionsRebalance(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const parts = 4
	owners := func() map[string]int {
		n := map[string]int{}
		for p := range parts {
			o, err := env.client.Get(context.Background(), shardOf(env.topic, p).Owner("g")).Result()
			if err == nil {
				n[o]++
			}
		}
		return n
	}
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, Ordered: true, BlockTime: 50 * time.Millisecond,
		VisibilityTimeout: 3 * time.Second}
	a := newSubscriber(t, env.client, config)
	subscribe(t, a, env.topic)
	require.Eventually(t, func() bool { return len(owners()) == 1 && owners()[firstKey(owners())] == parts }, 5*time.Second, 20*time.Millisecond)

	b := newSubscriber(t, env.client, config)
	chB := subscribe(t, b, env.topic)
	require.Eventually(t, func() bool {
		o := owners()
		return len(o) == 2 && o[firstKey(o)] == 2
	}, 10*time.Second, 20*time.Millisecond, "two and two: %v", owners())

	require.NoError(t, a.Close())
	require.Eventually(t, func() bool { o := owners(); return len(o) == 1 && o[firstKey(o)] == parts }, 10*time.Second, 20*time.Millisecond)
	pub := newPartitionedPublisher(t, env.client, parts)
	for seq := range 20 {
		require.NoError(t, pub.Publish(env.topic, keyedMessage("k", seq)))
	}
	for seq := range 20 {
		msg := receive(t, chB, 5*time.Second)
		require.Equal(t, strconv.Itoa(seq), string(msg.Payload))
		msg.Ack()
	}
}

func firstKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}

// When an owner dies, the next owner takes its partition over once the
// ownership expires, and first delivers what the dead one held, in order.
func TestOrdered_TakeoverFromDeadOwner(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, 1)
	init := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Ordered: true})
	require.NoError(t, init.SubscribeInitialize(env.topic))
	for seq := range 6 {
		require.NoError(t, pub.Publish(env.topic, keyedMessage("k", seq)))
	}
	// A consumer that fetched the first four and died, owning the partition.
	ctx := context.Background()
	_, err := env.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{shardOf(env.topic, 0).Stream(), ">"}, Count: 4}).Result()
	require.NoError(t, err)
	require.NoError(t, env.client.Set(ctx, shardOf(env.topic, 0).Owner("g"), "dead", 500*time.Millisecond).Err())

	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Ordered: true, BlockTime: 50 * time.Millisecond})
	ch := subscribe(t, sub, env.topic)
	start := time.Now()
	for seq := range 6 {
		msg := receive(t, ch, 5*time.Second)
		require.Equal(t, strconv.Itoa(seq), string(msg.Payload))
		if seq == 0 {
			require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "taken over only after the dead owner's lease")
		}
		msg.Ack()
	}
	nothing(t, ch, 200*time.Millisecond)
}

// Owners keep reading what they own through Pause/Resume cycles, with
// many partitions on few subscriptions (the shape of an ordered stall seen
// in CI, where one process owned every partition and read none): every
// message published meanwhile is delivered once the group is resumed.
func TestOrdered_OwnersReadAfterPauseResume(t *testing.T) {
	t.Parallel()
	const parts = 8
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, parts)
	var mu sync.Mutex
	got := map[string]bool{}
	for range 2 {
		sub := newSubscriber(t, newClient(t), redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, Ordered: true})
		ch := subscribe(t, sub, env.topic)
		go func() {
			for msg := range ch {
				mu.Lock()
				got[msg.UUID] = true
				mu.Unlock()
				msg.Ack()
			}
		}()
	}
	ctx := context.Background()
	sent := 0
	for round := range 5 {
		require.NoError(t, env.insp.Pause(ctx, env.topic, "g"))
		for i := range 40 {
			require.NoError(t, pub.Publish(env.topic, keyedMessage(strconv.Itoa(i), round*40+i)))
			sent++
		}
		time.Sleep(50 * time.Millisecond)
		_, err := env.insp.Resume(ctx, env.topic, "g")
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == sent
		}, 10*time.Second, 10*time.Millisecond, "round %d: not all of %d delivered", round, sent)
	}
}

// An owner whose application stopped receiving from the Subscribe channel
// (a consumer loop stuck in a handler that ignores its context) gives its
// partitions up within a lease, instead of renewing them for as long as
// its process lives: the group's other member then delivers everything,
// the stuck delivery included (after its HandlerTimeout), each key in
// order.
func TestOrdered_StuckOwnerGivesUp(t *testing.T) {
	t.Parallel()
	const parts, keys, perKey = 4, 8, 5
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, parts)
	// A short visibility timeout (an ownership lease of 2 s) and handler
	// timeout keep the test to seconds; the defaults give up after 30 min.
	cfg := redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, Ordered: true,
		VisibilityTimeout: 3 * time.Second, HandlerTimeout: 500 * time.Millisecond}
	stuck := subscribe(t, newSubscriber(t, newClient(t), cfg), env.topic)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	took := make(chan struct{})
	go func() {
		select {
		case <-stuck: // never acked, and nothing received after it
			close(took)
		case <-ctx.Done():
		}
	}()

	var mu sync.Mutex
	last := map[string]int{}
	got := 0
	healthy := subscribe(t, newSubscriber(t, newClient(t), cfg), env.topic)
	go func() {
		for msg := range healthy {
			key := msg.Metadata.Get(redisdelay.PartitionKey)
			seq, _ := strconv.Atoi(string(msg.Payload))
			mu.Lock()
			prev, seen := last[key]
			switch {
			case !seen && seq == 0, seen && seq == prev+1:
				last[key] = seq
				got++
			case seen && seq <= prev: // a redelivery of one the stuck owner held
			default:
				t.Errorf("key %s: message %d after %d", key, seq, prev)
			}
			mu.Unlock()
			msg.Ack()
		}
	}()
	for seq := range perKey {
		for k := range keys {
			require.NoError(t, pub.Publish(env.topic, keyedMessage("k"+strconv.Itoa(k), seq)))
		}
	}
	select {
	case <-took:
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck subscriber received nothing: it owns no partition")
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got == keys*perKey
	}, 30*time.Second, 20*time.Millisecond, "the healthy subscriber did not get every message")
}
