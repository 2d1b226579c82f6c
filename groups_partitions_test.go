package redisdelay_test

// Groups combined with partitions and ordered subscriptions.
//
// Each test of groups_*_test.go ends with awaitGroupsSettled
// (helpers_groups_test.go): once everything is settled, no group state is
// left in Redis.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// With 4 partitions and no PartitionKey, all messages of a group go to the
// partition of its group (PartitionOf), so GroupConcurrency 1 holds
// exactly: subscribers in two processes never run two messages of a group
// at once and run each group's in due order, and the groups spread over
// the partitions.
func TestGroupsCombo_PartitionsPlaceAndOrder(t *testing.T) {
	t.Parallel()
	const parts, groups, each = 4, 8, 10
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, parts)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, GroupConcurrency: 1}
	first := newSubscriber(t, env.client, config)
	require.NoError(t, first.SubscribeInitialize(env.topic))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})

	var msgs []*message.Message
	for i := range each {
		for g := range groups {
			msgs = append(msgs, groupedMessage(fmt.Sprint("tenant-", g), i))
		}
	}
	require.NoError(t, pub.Publish(env.topic, msgs...))
	awaitQueuedInGroups(t, env.insp, env.topic, "g", groups*each)
	states, queued := fairFields(t, env.client, env.topic, "g", parts)
	used := map[int]bool{}
	for g := range groups {
		name := fmt.Sprint("tenant-", g)
		home := redisdelay.PartitionOf(name, parts)
		assert.Equal(t, []int{home}, states[name], "group %s has state in partitions %v", name, states[name])
		assert.Equal(t, map[int]int{home: each}, queued[name], "group %s's messages by partition", name)
		used[home] = true
	}
	require.GreaterOrEqual(t, len(used), 2, "8 groups over 4 partitions use more than one")

	h := newHandled()
	done := make(chan struct{}, groups*each)
	second := newSubscriber(t, newClient(t), config)
	for _, sub := range []*redisdelay.Subscriber{first, second} {
		ch := subscribe(t, sub, env.topic)
		for range 2 {
			go func() {
				for msg := range ch {
					g := h.start(t, msg)
					time.Sleep(2 * time.Millisecond) // overlapping handlers, were the cap not held
					h.end(g)
					msg.Ack()
					done <- struct{}{}
				}
			}()
		}
	}
	for range groups * each {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("handled %d of %d messages", h.count(), groups*each)
		}
	}
	h.mu.Lock()
	for g := range groups {
		name := fmt.Sprint("tenant-", g)
		assert.Equal(t, 1, h.most[name], "group %s ran more than one at once", name)
		assert.Equal(t, seqs(each), h.order[name], "group %s", name)
	}
	h.mu.Unlock()
	awaitGroupsSettled(t, env.client, env.topic, "g", parts)
}

// Round robin holds within a partition of a partitioned topic: a big
// group's backlog queued first does not hold back the small groups of its
// partition, and the groups of the other partitions go on beside it. With
// no GroupConcurrency (the default), only the ring makes this so.
func TestGroupsCombo_PartitionsRoundRobin(t *testing.T) {
	t.Parallel()
	const parts, big, small, each, others = 4, 600, 6, 5, 3
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, parts)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts})
	require.NoError(t, sub.SubscribeInitialize(env.topic))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}})

	home := redisdelay.PartitionOf("big", parts)
	var near, far []string // small groups in the big group's partition, and groups elsewhere
	for i := 0; len(near) < small || len(far) < others; i++ {
		name := fmt.Sprint("s", i)
		if redisdelay.PartitionOf(name, parts) == home {
			if len(near) < small {
				near = append(near, name)
			}
		} else if len(far) < others {
			far = append(far, name)
		}
	}
	var msgs []*message.Message
	for i := range big {
		msgs = append(msgs, groupedMessage("big", i))
	}
	require.NoError(t, pub.Publish(env.topic, msgs...))
	for _, g := range append(append([]string{}, near...), far...) {
		msgs = msgs[:0]
		for i := range each {
			msgs = append(msgs, groupedMessage(g, i))
		}
		require.NoError(t, pub.Publish(env.topic, msgs...))
	}
	total := big + (small+others)*each
	awaitQueuedInGroups(t, env.insp, env.topic, "g", int64(total))

	inHome := map[string]bool{"big": true}
	for _, g := range near {
		inHome[g] = true
	}
	ch := subscribe(t, sub, env.topic)
	next := map[string]int{}
	pos, lastNear := 0, 0 // among the deliveries of the big group's partition
	for range total {
		msg := receive(t, ch, 5*time.Second)
		g, seq := splitPayload(t, msg)
		require.Equal(t, next[g], seq, "group %s out of order", g)
		next[g]++
		if inHome[g] {
			pos++
			if g != "big" {
				lastNear = pos
			}
		}
		msg.Ack()
	}
	t.Logf("the last of %d small groups' messages in the big group's partition was its delivery %d of %d", small*each, lastNear, big+small*each)
	// each turn of the ring serves each of the partition's 7 groups, plus
	// the batch in flight
	require.LessOrEqual(t, lastNear, (small+1)*each+2*32)
	for _, g := range far {
		require.Equal(t, each, next[g], "group %s", g)
	}
	nothing(t, ch, 200*time.Millisecond)
	awaitGroupsSettled(t, env.client, env.topic, "g", parts)
}

// Ordered subscriptions (two subscribers sharing two partitions) deliver
// grouped messages: every one once, each group's in due order, one at a
// time per partition; a nacked one is retried in place, before its
// group's next message. RetryDelay is short so that the retry comes within
// the test (the default is a second or more).
func TestGroupsCombo_Ordered(t *testing.T) {
	t.Parallel()
	const parts, groups, each = 2, 6, 8
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, parts)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, Ordered: true,
		RetryDelay: func(int) time.Duration { return 50 * time.Millisecond }}
	var (
		mu       sync.Mutex
		inFlight = map[int]bool{}
		order    = map[string][]string{}
		total    int
		done     = make(chan struct{})
	)
	for range 2 {
		ch := subscribe(t, newSubscriber(t, newClient(t), config), env.topic)
		go func() {
			for msg := range ch {
				g, seq := splitPayload(t, msg)
				part := redisdelay.PartitionOf(g, parts)
				mu.Lock()
				if inFlight[part] {
					t.Errorf("partition %d handled two messages at once", part)
				}
				inFlight[part] = true
				order[g] = append(order[g], fmt.Sprint(seq, "#", msg.Metadata.Get(redisdelay.AttemptKey)))
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inFlight[part] = false
				nack := g == "g0" && seq == 3 && msg.Metadata.Get(redisdelay.AttemptKey) == "1"
				if !nack {
					total++
					if total == groups*each {
						close(done)
					}
				}
				mu.Unlock()
				if nack {
					msg.Nack()
				} else {
					msg.Ack()
				}
			}
		}()
	}
	require.Eventually(t, func() bool {
		owners := map[string]bool{}
		for p := range parts {
			if o, err := env.client.Get(context.Background(), shardOf(env.topic, p).Owner("g")).Result(); err == nil {
				owners[o] = true
			}
		}
		return len(owners) == parts
	}, 10*time.Second, 20*time.Millisecond, "the subscribers share the partitions")

	var msgs []*message.Message
	for i := range each {
		for g := range groups {
			msgs = append(msgs, groupedMessage(fmt.Sprint("g", g), i))
		}
	}
	require.NoError(t, pub.Publish(env.topic, msgs...))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("handled %d of %d messages: %v", total, groups*each, order)
	}
	mu.Lock()
	for g := range groups {
		name := fmt.Sprint("g", g)
		var want []string
		for i := range each {
			want = append(want, fmt.Sprint(i, "#1"))
			if name == "g0" && i == 3 {
				want = append(want, "3#2")
			}
		}
		assert.Equal(t, want, order[name], "group %s", name)
	}
	mu.Unlock()
	awaitGroupsSettled(t, env.client, env.topic, "g", parts)
}
