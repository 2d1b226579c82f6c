package redisdelay_test

// Groups (GroupKey, GroupConcurrency, GroupRateLimit) combined with the
// library's other features: partitions, the far tier, priorities, pause,
// ordered subscriptions, several consumer groups, consumer groups of an
// older version, handler timeouts, cancel and reschedule, and Watermill's
// components. Each test ends with awaitGroupsSettled (groups_test.go): once
// everything is settled, no group state is left in Redis.
//
// Two tests fail on purpose, each on a library bug reported and not fixed
// here (see their comments): TestGroupsCombo_RateLimit (a rate-limited
// group's state is never deleted) and
// TestGroupsCombo_PublishedBeforeAnyConsumerGroup (grouped messages due
// before any consumer group exists lose their group).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// fanIn delivers what each channel delivers on one channel: the
// subscriptions of one consumer group in several processes, seen as one.
// It stops forwarding when the test ends.
func fanIn(t *testing.T, chs ...<-chan *message.Message) <-chan *message.Message {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the subscribers close: registered after them
	out := make(chan *message.Message)
	for _, c := range chs {
		go func() {
			for msg := range c {
				select {
				case out <- msg:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return out
}

// groupedDelayed is groupedMessage delayed by d.
func groupedDelayed(g string, seq int, d time.Duration) *message.Message {
	msg := groupedMessage(g, seq)
	delay.Message(msg, delay.For(d))
	return msg
}

// groupOf is the grpof field of a waiting message (its group), "" when
// the partition names none for it.
func groupOf(t *testing.T, client redis.UniversalClient, tp string, part int, uuid string) string {
	t.Helper()
	g, err := client.HGet(context.Background(), shardOf(tp, part).GroupOf(), uuid).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return g
}

// redoGroups is the group (field k) of each entry of the consumer group's
// redelivery stream in partition part, by the message UUID of the entry.
func redoGroups(t *testing.T, client redis.UniversalClient, tp, group string, part int) map[string]string {
	t.Helper()
	entries, err := client.XRange(context.Background(), shardOf(tp, part).Redelivery(group), "-", "+").Result()
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		body, _ := e.Values["m"].(string)
		m, err := redisdelay.DecodeMessage([]byte(body))
		require.NoError(t, err)
		k, _ := e.Values["k"].(string)
		out[m.UUID] = k
	}
	return out
}

// handled is what the handlers of a test saw: per group, the payloads in
// the order they were handled, and the most messages of a group handled at
// once.
type handled struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	order   map[string][]int
	total   int
}

func newHandled() *handled {
	return &handled{running: map[string]int{}, most: map[string]int{}, order: map[string][]int{}}
}

// start records that a handler began with msg and returns its group.
func (h *handled) start(t *testing.T, msg *message.Message) string {
	g, seq := splitPayload(t, msg)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running[g]++
	h.most[g] = max(h.most[g], h.running[g])
	h.order[g] = append(h.order[g], seq)
	return g
}

// end records that the handler of a message of group g is done.
func (h *handled) end(g string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running[g]--
	h.total++
}

func (h *handled) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// seqs is 0, 1, ..., n-1.
func seqs(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// GroupRateLimit: each group takes a burst of Messages, then one message
// per Per/Messages (GCRA, fair.lua), whatever the other groups do. So by
// the time e after the publish, a group has delivered at most Messages +
// e/(Per/Messages) messages: in the first tenth of the interval at most 5,
// the burst. The bound is checked at every delivery (an upper bound only,
// no lower bound on timing). All are eventually delivered, each group in
// due order, with nothing published after the first call: a subscription
// whose groups are all asleep under their rate limit wakes by its own
// timer (nothing rings its bell then, and the default BlockTime, 30s, is
// far beyond the time the test allows).
//
// FAILS (library bug, reported): the groups' states are left behind once
// all is settled (see the comment at the end).
func TestGroupsCombo_RateLimit(t *testing.T) {
	t.Parallel()
	const each = 15
	// the setting under test: 5 per 500ms per group, a burst of 5 then one per 100ms
	limit := redisdelay.RateLimit{Messages: 5, Per: 500 * time.Millisecond}
	emission := limit.Per / time.Duration(limit.Messages)
	tp := topic()
	client := newClient(t)
	pub := newPublisher(t, client)
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupRateLimit: limit})
	ch := subscribe(t, sub, tp)
	awaitIdleSubscriptions(t, client, tp, 1)

	var msgs []*message.Message
	for i := range each {
		msgs = append(msgs, groupedMessage("a", i), groupedMessage("b", i))
	}
	start := time.Now()
	require.NoError(t, pub.Publish(tp, msgs...))
	got := map[string]int{}
	for range 2 * each {
		msg := receive(t, ch, 5*time.Second)
		since := time.Since(start)
		g, seq := splitPayload(t, msg)
		require.Equal(t, got[g], seq, "group %s out of order", g)
		got[g]++
		// 2ms: Redis's clock and ours, read at different moments
		allowed := limit.Messages + int((since+2*time.Millisecond)/emission)
		require.LessOrEqual(t, got[g], allowed, "group %s: %d messages delivered %s after the publish", g, got[g], since)
		msg.Ack()
	}
	t.Logf("%d messages of 2 groups delivered in %s", 2*each, time.Since(start).Round(time.Millisecond))
	require.Equal(t, map[string]int{"a": each, "b": each}, got)
	nothing(t, ch, 200*time.Millisecond)
	defer func() {
		if t.Failed() {
			now, err := client.Time(context.Background()).Result()
			t.Logf("Redis's clock at the end: %d ms (err %v); Stats: %+v", now.UnixMilli(), err, groupStats(t, newInspector(t, client), tp, "g"))
		}
	}()
	// An idle group whose limiter has not caught up waits in fwait until
	// it has, and is then deleted (fair_close), leaving nothing behind.
	awaitGroupsSettled(t, client, tp, "g", 1)
}

// fairFields reads the consumer group's fair queues in each partition: the
// groups with a state there, and how many messages each has queued.
func fairFields(t *testing.T, client redis.UniversalClient, tp, group string, parts int) (states map[string][]int, queued map[string]map[int]int) {
	t.Helper()
	states, queued = map[string][]int{}, map[string]map[int]int{}
	for p := range parts {
		m, err := client.HGetAll(context.Background(), shardOf(tp, p).Fair(group)).Result()
		require.NoError(t, err)
		for k := range m {
			g, _, isMsg := strings.Cut(k, "\x00")
			switch {
			case g == "": // the queued count
			case isMsg:
				if queued[g] == nil {
					queued[g] = map[int]int{}
				}
				queued[g][p]++
			default:
				states[g] = append(states[g], p)
			}
		}
	}
	return states, queued
}

// With 4 partitions and no PartitionKey, all messages of a group go to the
// partition of its group (PartitionOf), so GroupConcurrency 1 holds
// exactly: subscribers in two processes never run two messages of a group
// at once and run each group's in due order, and the groups spread over
// the partitions.
func TestGroupsCombo_PartitionsPlaceAndOrder(t *testing.T) {
	t.Parallel()
	const parts, groups, each = 4, 8, 10
	tp := topic()
	client := newClient(t)
	pub := newPartitionedPublisher(t, client, parts)
	insp := newInspector(t, client)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, GroupConcurrency: 1}
	first := newSubscriber(t, client, config)
	require.NoError(t, first.SubscribeInitialize(tp))
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})

	var msgs []*message.Message
	for i := range each {
		for g := range groups {
			msgs = append(msgs, groupedMessage(fmt.Sprint("tenant-", g), i))
		}
	}
	require.NoError(t, pub.Publish(tp, msgs...))
	awaitQueuedInGroups(t, insp, tp, "g", groups*each)
	states, queued := fairFields(t, client, tp, "g", parts)
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
		ch := subscribe(t, sub, tp)
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
	awaitGroupsSettled(t, client, tp, "g", parts)
}

// Round robin holds within a partition of a partitioned topic: a big
// group's backlog queued first does not hold back the small groups of its
// partition, and the groups of the other partitions go on beside it. With
// no GroupConcurrency (the default), only the ring makes this so.
func TestGroupsCombo_PartitionsRoundRobin(t *testing.T) {
	t.Parallel()
	const parts, big, small, each, others = 4, 600, 6, 5, 3
	tp := topic()
	client := newClient(t)
	pub := newPartitionedPublisher(t, client, parts)
	insp := newInspector(t, client)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts})
	require.NoError(t, sub.SubscribeInitialize(tp))
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})

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
	require.NoError(t, pub.Publish(tp, msgs...))
	for _, g := range append(append([]string{}, near...), far...) {
		msgs = msgs[:0]
		for i := range each {
			msgs = append(msgs, groupedMessage(g, i))
		}
		require.NoError(t, pub.Publish(tp, msgs...))
	}
	total := big + (small+others)*each
	awaitQueuedInGroups(t, insp, tp, "g", int64(total))

	inHome := map[string]bool{"big": true}
	for _, g := range near {
		inHome[g] = true
	}
	ch := subscribe(t, sub, tp)
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
	awaitGroupsSettled(t, client, tp, "g", parts)
}

// A grouped message delayed far enough goes to the far tier (the test
// binary's far tier takes messages due more than about 2.5s ahead, see
// TestMain), its group named in grpof all the same. Brought due by
// Inspector.Reschedule (an hour early), it is queued in its group: while
// the group's one slot (GroupConcurrency 1) is held it waits, counted in
// Grouped; then it is delivered through the redelivery stream with its
// group (field k). One due in 4s is unpacked by the scheduler and
// delivered through its group too.
func TestGroupsCombo_FarTier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := topic()
	client := newClient(t)
	pub := newPublisher(t, client)
	insp := newInspector(t, client)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1})
	require.NoError(t, sub.SubscribeInitialize(tp))
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})

	soon := groupedDelayed("a", 2, 4*time.Second)
	later := groupedDelayed("a", 1, time.Hour)
	require.NoError(t, pub.Publish(tp, soon, later))
	_, far := farKeys(t, tp)
	require.EqualValues(t, 2, far, "both went to the far tier")
	require.Equal(t, "a", groupOf(t, client, tp, 0, soon.UUID))
	require.Equal(t, "a", groupOf(t, client, tp, 0, later.UUID))

	require.NoError(t, pub.Publish(tp, groupedMessage("a", 0)))
	ch := subscribe(t, sub, tp)
	held := receive(t, ch, 5*time.Second)
	require.Equal(t, "a/0", string(held.Payload))

	ok, err := insp.Reschedule(ctx, tp, later.UUID, time.Now())
	require.NoError(t, err)
	require.True(t, ok)
	// due now: queued in its group behind the slot a/0 holds
	require.Eventually(t, func() bool {
		st := groupStats(t, insp, tp, "g")
		return st.Grouped == 1 && st.ActiveGroups == 1
	}, 5*time.Second, 10*time.Millisecond, "the rescheduled message is queued in its group")
	require.Empty(t, groupOf(t, client, tp, 0, later.UUID), "grpof names only waiting messages")
	nothing(t, ch, 200*time.Millisecond)

	held.Ack()
	msg := receive(t, ch, 5*time.Second)
	require.Equal(t, later.UUID, msg.UUID)
	require.Equal(t, "a", msg.Metadata.Get(redisdelay.GroupKey))
	require.Equal(t, "1", msg.Metadata.Get(redisdelay.AttemptKey))
	require.Equal(t, map[string]string{later.UUID: "a"}, redoGroups(t, client, tp, "g", 0), "delivered through its group's redelivery entry")
	msg.Ack()

	msg = receive(t, ch, 8*time.Second)
	require.Equal(t, soon.UUID, msg.UUID, "the one unpacked from the far tier")
	require.Equal(t, "a", redoGroups(t, client, tp, "g", 0)[soon.UUID])
	msg.Ack()
	nothing(t, ch, 200*time.Millisecond)
	buckets, far := farKeys(t, tp)
	assert.Zero(t, buckets)
	assert.Zero(t, far)
	assert.Zero(t, client.Exists(ctx, shardOf(tp, 0).GroupOf()).Val(), "grpof left behind")
	awaitGroupsSettled(t, client, tp, "g", 1)
}

// A high-priority grouped message (SetHighPriority) goes before the
// messages of its group queued earlier, high-priority ones among
// themselves in due order, and still counts against GroupConcurrency:
// with a cap of 1, subscribers in two processes run one message of the
// group at a time. Another group is not held back.
func TestGroupsCombo_HighPriority(t *testing.T) {
	t.Parallel()
	tp := topic()
	client := newClient(t)
	pub := newPublisher(t, client)
	insp := newInspector(t, client)
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1}
	first := newSubscriber(t, client, config)
	require.NoError(t, first.SubscribeInitialize(tp))
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})

	var msgs []*message.Message
	for i := range 4 {
		msgs = append(msgs, groupedMessage("a", i))
	}
	msgs = append(msgs, groupedMessage("b", 0), groupedMessage("b", 1))
	require.NoError(t, pub.Publish(tp, msgs...))
	awaitQueuedInGroups(t, insp, tp, "g", 6)
	for _, seq := range []int{100, 101} { // published after the others, due after them
		msg := groupedMessage("a", seq)
		redisdelay.SetHighPriority(msg)
		require.NoError(t, pub.Publish(tp, msg))
	}
	awaitQueuedInGroups(t, insp, tp, "g", 8)

	h := newHandled()
	done := make(chan struct{}, 8)
	for _, sub := range []*redisdelay.Subscriber{first, newSubscriber(t, newClient(t), config)} {
		ch := subscribe(t, sub, tp)
		go func() {
			for msg := range ch {
				g := h.start(t, msg)
				time.Sleep(5 * time.Millisecond) // overlapping handlers, were the cap not held
				h.end(g)
				msg.Ack()
				done <- struct{}{}
			}
		}()
	}
	for range 8 {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("handled %d of 8 messages", h.count())
		}
	}
	h.mu.Lock()
	assert.Equal(t, []int{100, 101, 0, 1, 2, 3}, h.order["a"])
	assert.Equal(t, []int{0, 1}, h.order["b"])
	assert.Equal(t, 1, h.most["a"], "group a ran more than one at once")
	assert.Equal(t, 1, h.most["b"], "group b ran more than one at once")
	h.mu.Unlock()
	awaitGroupsSettled(t, client, tp, "g", 1)
}

// receiveGroups receives n messages, acking each, and checks that each
// group's come in due order from next on; it returns the groups' next
// sequence numbers.
func receiveGroups(t *testing.T, ch <-chan *message.Message, n int, next map[string]int) map[string]int {
	t.Helper()
	for range n {
		msg := receive(t, ch, 5*time.Second)
		g, seq := splitPayload(t, msg)
		require.Equal(t, next[g], seq, "group %s out of order", g)
		next[g]++
		msg.Ack()
	}
	return next
}

// Inspector.Pause holds back grouped messages too (two partitions: the
// partition 1 subscription reads the pause flag of partition 0): paused
// before they are published, they are queued in their groups and none is
// delivered; paused while they are being delivered, the fetch in flight is
// delivered and then nothing more. Resume delivers the rest, each once, in
// group order. The default BlockTime (30s) is far longer than the test's
// waits: the pause and resume notifications act, not the periodic check.
func TestGroupsCombo_Pause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const parts, groups, each = 2, 4, 10
	tp := topic()
	client := newClient(t)
	pub := newPartitionedPublisher(t, client, parts)
	insp := newInspector(t, client)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Partitions: parts, GroupConcurrency: 1})
	require.NoError(t, sub.SubscribeInitialize(tp))
	require.NoError(t, insp.Pause(ctx, tp, "g"))
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})
	ch := subscribe(t, sub, tp)

	publish := func(from, to int) {
		var msgs []*message.Message
		for i := from; i < to; i++ {
			for g := range groups {
				msg := groupedMessage(fmt.Sprint("g", g), i)
				if i >= (from+to)/2 {
					delay.Message(msg, delay.For(200*time.Millisecond)) // due after the immediate ones
				}
				msgs = append(msgs, msg)
			}
		}
		require.NoError(t, pub.Publish(tp, msgs...))
	}
	publish(0, each)
	awaitQueuedInGroups(t, insp, tp, "g", groups*each)
	used := map[int]bool{}
	for g := range groups {
		used[redisdelay.PartitionOf(fmt.Sprint("g", g), parts)] = true
	}
	require.Len(t, used, parts, "the groups are in both partitions")
	nothing(t, ch, 500*time.Millisecond)
	st := groupStats(t, insp, tp, "g")
	require.True(t, st.Paused)
	require.EqualValues(t, groups*each, st.Grouped)
	require.EqualValues(t, groups, st.ActiveGroups)

	was, err := insp.Resume(ctx, tp, "g")
	require.NoError(t, err)
	require.True(t, was)
	next := receiveGroups(t, ch, groups*each, map[string]int{})
	nothing(t, ch, 200*time.Millisecond)
	awaitGroupsSettled(t, client, tp, "g", parts)

	// Paused while delivering: what was fetched comes, then nothing.
	publish(each, 4*each)
	next = receiveGroups(t, ch, groups, next)
	require.NoError(t, insp.Pause(ctx, tp, "g"))
	spill := 0
drain:
	for {
		select {
		case msg := <-ch:
			g, seq := splitPayload(t, msg)
			require.Equal(t, next[g], seq, "group %s out of order", g)
			next[g]++
			spill++
			msg.Ack()
		case <-time.After(500 * time.Millisecond):
			break drain
		}
	}
	t.Logf("%d messages fetched before the pause were delivered after it", spill)
	left := groups*3*each - groups - spill
	require.Positive(t, left, "the pause held nothing back")
	require.Eventually(t, func() bool {
		st := groupStats(t, insp, tp, "g")
		return st.Pending == 0 && st.Ready == 0 && st.Grouped == int64(left)
	}, 5*time.Second, 10*time.Millisecond, "the rest waits in the groups: %+v", groupStats(t, insp, tp, "g"))
	nothing(t, ch, 300*time.Millisecond)
	_, err = insp.Resume(ctx, tp, "g")
	require.NoError(t, err)
	next = receiveGroups(t, ch, left, next)
	for g := range groups {
		require.Equal(t, 4*each, next[fmt.Sprint("g", g)])
	}
	nothing(t, ch, 200*time.Millisecond)
	awaitGroupsSettled(t, client, tp, "g", parts)
}

// Ordered subscriptions (two subscribers sharing two partitions) deliver
// grouped messages: every one once, each group's in due order, one at a
// time per partition; a nacked one is retried in place, before its
// group's next message. RetryDelay is short so that the retry comes within
// the test (the default is a second or more).
func TestGroupsCombo_Ordered(t *testing.T) {
	t.Parallel()
	const parts, groups, each = 2, 6, 8
	tp := topic()
	client := newClient(t)
	pub := newPartitionedPublisher(t, client, parts)
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
		ch := subscribe(t, newSubscriber(t, newClient(t), config), tp)
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
			if o, err := client.Get(context.Background(), shardOf(tp, p).Owner("g")).Result(); err == nil {
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
	require.NoError(t, pub.Publish(tp, msgs...))
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
	awaitGroupsSettled(t, client, tp, "g", parts)
}

// receiveSet receives n messages (not acked) and returns them by payload.
func receiveSet(t *testing.T, ch <-chan *message.Message, n int) map[string]*message.Message {
	t.Helper()
	got := map[string]*message.Message{}
	for range n {
		msg := receive(t, ch, 5*time.Second)
		require.NotContains(t, got, string(msg.Payload), "delivered twice")
		got[string(msg.Payload)] = msg
	}
	return got
}

// Two consumer groups of a topic each receive every grouped message, each
// under its own GroupConcurrency (1 for x, 2 for y, each with three
// subscribers): what one consumer group holds does not count against the
// other's cap. A subscription holds one message of a capped group per
// read, so three subscriptions show the cap exactly.
func TestGroupsCombo_TwoConsumerGroups(t *testing.T) {
	t.Parallel()
	const n = 5
	tp := topic()
	client := newClient(t)
	pub := newPublisher(t, client)
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})
	consumers := func(group string, limit int) <-chan *message.Message {
		var chs []<-chan *message.Message
		for range 3 {
			sub := newSubscriber(t, newClient(t), redisdelay.SubscriberConfig{ConsumerGroup: group, GroupConcurrency: limit})
			chs = append(chs, subscribe(t, sub, tp))
		}
		return fanIn(t, chs...)
	}
	x, y := consumers("x", 1), consumers("y", 2)
	var msgs []*message.Message
	for i := range n {
		msgs = append(msgs, groupedMessage("a", i))
	}
	require.NoError(t, pub.Publish(tp, msgs...))

	gotX := receiveSet(t, x, 1)
	gotY := receiveSet(t, y, 2)
	require.Contains(t, gotX, "a/0")
	require.Contains(t, gotY, "a/0")
	require.Contains(t, gotY, "a/1")
	nothing(t, x, 300*time.Millisecond) // x's one slot is held
	nothing(t, y, 100*time.Millisecond) // y's two are

	// x moves on when its message is acked, whatever y holds
	gotX["a/0"].Ack()
	msg := receive(t, x, 5*time.Second)
	require.Equal(t, "a/1", string(msg.Payload))
	gotX["a/1"] = msg
	nothing(t, y, 100*time.Millisecond)
	gotY["a/0"].Ack()
	msg = receive(t, y, 5*time.Second)
	require.Equal(t, "a/2", string(msg.Payload))
	gotY["a/2"] = msg
	nothing(t, y, 100*time.Millisecond)
	nothing(t, x, 100*time.Millisecond)

	// the rest: both receive every message once
	gotX["a/1"].Ack()
	gotY["a/1"].Ack()
	gotY["a/2"].Ack()
	for _, c := range []struct {
		ch  <-chan *message.Message
		got map[string]*message.Message
	}{{x, gotX}, {y, gotY}} {
		for len(c.got) < n {
			msg := receive(t, c.ch, 5*time.Second)
			require.NotContains(t, c.got, string(msg.Payload), "delivered twice")
			c.got[string(msg.Payload)] = msg
			msg.Ack()
		}
	}
	for i := range n {
		assert.Contains(t, gotX, fmt.Sprint("a/", i))
		assert.Contains(t, gotY, fmt.Sprint("a/", i))
	}
	nothing(t, x, 200*time.Millisecond)
	nothing(t, y, 100*time.Millisecond)
	awaitGroupsSettled(t, client, tp, "x", 1)
	awaitGroupsSettled(t, client, tp, "y", 1)
}

// forgetGroups makes the consumer group look like one of an older
// version's subscribers (no gv in its meta hash, see init.lua) in every
// partition: schedulers hand it grouped messages through its redelivery
// stream, as plain messages.
func forgetGroups(t *testing.T, client redis.UniversalClient, tp, group string, parts int) {
	t.Helper()
	for p := range parts {
		meta := shardOf(tp, p).Meta(group)
		require.NoError(t, client.HDel(context.Background(), meta, "gv").Err())
		require.False(t, client.HExists(context.Background(), meta, "gv").Val())
		require.True(t, client.HExists(context.Background(), meta, "max").Val(), "partition %d: the group has no meta hash", p)
	}
}

// publishDueReversed publishes each groups' messages in one call, each
// group's due in the reverse of publish order (the last published due at
// once), so that due order is not publish order; payload sequence numbers
// are the due order.
func publishDueReversed(t *testing.T, pub message.Publisher, tp string, groups []string, each int) {
	t.Helper()
	var msgs []*message.Message
	for i := range each {
		for _, g := range groups {
			seq := each - 1 - i
			msgs = append(msgs, groupedDelayed(g, seq, time.Duration(seq)*50*time.Millisecond))
		}
	}
	require.NoError(t, pub.Publish(tp, msgs...))
}

// A consumer group whose subscribers predate groups (simulated: its meta
// hash lacks gv in both partitions) gets grouped messages in its
// redelivery stream when they fall due, in due order, with no group state:
// none is lost, and its subscribers read them as plain messages. First
// with no subscriber reading (the entries wait in the stream), then with
// one reading.
func TestGroupsCombo_ConsumerGroupOfOlderVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const parts, each = 2, 6
	groups := []string{"g0", "g1", "g2", "g3"}
	tp := topic()
	client := newClient(t)
	pub := newPartitionedPublisher(t, client, parts)
	insp := newInspector(t, client)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "old", Partitions: parts, GroupConcurrency: 1})
	require.NoError(t, sub.SubscribeInitialize(tp))
	forgetGroups(t, client, tp, "old", parts)
	// and a consumer group of this version beside it: each is served its way
	current := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "new", Partitions: parts, GroupConcurrency: 1})
	require.NoError(t, current.SubscribeInitialize(tp))
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})

	n := len(groups) * each
	publishDueReversed(t, pub, tp, groups, each)
	require.Eventually(t, func() bool {
		var redo int64
		for p := range parts {
			redo += client.XLen(ctx, shardOf(tp, p).Redelivery("old")).Val()
		}
		return redo == int64(n) && topicStats(t, insp, tp).Waiting == 0
	}, 5*time.Second, 10*time.Millisecond, "the grouped messages reach the redelivery streams")
	require.EqualValues(t, n, groupStats(t, insp, tp, "new").Grouped, "the current consumer group queues them in groups")
	st := groupStats(t, insp, tp, "old")
	require.Zero(t, st.Grouped)
	require.Zero(t, st.ActiveGroups)
	require.EqualValues(t, n, st.Ready)
	for p := range parts {
		require.Zero(t, client.Exists(ctx, shardOf(tp, p).Fair("old")).Val(), "partition %d has fair queues", p)
		entries, err := client.XRange(ctx, shardOf(tp, p).Redelivery("old"), "-", "+").Result()
		require.NoError(t, err)
		next := map[string]int{}
		for _, e := range entries {
			require.NotContains(t, e.Values, "k", "an old consumer group's entry names a group")
			m, err := redisdelay.DecodeMessage([]byte(e.Values["m"].(string)))
			require.NoError(t, err)
			g, seq := splitPayload(t, m)
			require.Equal(t, next[g], seq, "partition %d: group %s's entries out of due order", p, g)
			next[g]++
		}
	}

	ch := subscribe(t, sub, tp)
	next := receiveGroups(t, ch, n, map[string]int{})
	nothing(t, ch, 200*time.Millisecond)
	cur := subscribe(t, current, tp)
	receiveGroups(t, cur, n, map[string]int{})
	nothing(t, cur, 100*time.Millisecond)
	awaitGroupsSettled(t, client, tp, "new", parts)

	// With the subscriber reading (a Subscriber initializes a topic's
	// group once: Subscribe wrote no gv; forgetGroups makes sure).
	forgetGroups(t, client, tp, "old", parts)
	for _, g := range groups {
		next[g] = 0 // the second round numbers from 0 again
	}
	publishDueReversed(t, pub, tp, groups, each)
	receiveGroups(t, ch, n, next)
	receiveGroups(t, cur, n, map[string]int{})
	nothing(t, ch, 200*time.Millisecond)
	nothing(t, cur, 100*time.Millisecond)
	require.Zero(t, groupStats(t, insp, tp, "old").Grouped)
	awaitGroupsSettled(t, client, tp, "old", parts)
	awaitGroupsSettled(t, client, tp, "new", parts)
}

// A handler that hangs on a grouped message (GroupConcurrency 1) holds
// its group's slot only until HandlerTimeout: the timed-out attempt is
// retried first (after the default RetryDelay, its slot kept meanwhile,
// so the group's next message waits, also for a second subscriber), and
// once its last attempt (MaxAttempts 2) times out it is dead-lettered
// with its group and the slot comes back: the group's next message is
// delivered. HandlerTimeout is the setting under test (the default is 30
// minutes); MaxAttempts 2 ends the test after two timeouts.
func TestGroupsCombo_HandlerTimeout(t *testing.T) {
	t.Parallel()
	tp := topic()
	client := newClient(t)
	pub := newPublisher(t, client)
	insp := newInspector(t, client)
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1, MaxAttempts: 2,
		HandlerTimeout: 300 * time.Millisecond}
	ch := fanIn(t,
		subscribe(t, newSubscriber(t, client, config), tp),
		subscribe(t, newSubscriber(t, newClient(t), config), tp))
	require.NoError(t, pub.Publish(tp, groupedMessage("a", 0), groupedMessage("a", 1), groupedMessage("b", 0)))

	var hung []*message.Message // never acked nor nacked by their handler
	var seen []string
	for len(seen) < 4 {
		msg := receive(t, ch, 5*time.Second)
		seen = append(seen, string(msg.Payload)+"#"+msg.Metadata.Get(redisdelay.AttemptKey))
		if string(msg.Payload) == "a/0" {
			hung = append(hung, msg)
			continue
		}
		msg.Ack()
	}
	var ofA []string
	for _, s := range seen {
		if strings.HasPrefix(s, "a/") {
			ofA = append(ofA, s)
		}
	}
	require.Equal(t, []string{"a/0#1", "a/0#2", "a/1#1"}, ofA, "all deliveries: %v", seen)
	require.Contains(t, seen, "b/0#1")
	dead := awaitDeadLetters(t, insp, tp, "g", 1, 5*time.Second)
	require.Equal(t, "a/0", string(dead[0].Message.Payload))
	require.Equal(t, "a", dead[0].Message.Metadata.Get(redisdelay.GroupKey))
	require.Contains(t, dead[0].Reason, "handler timed out after 300ms")
	for _, msg := range hung {
		msg.Ack() // late: ignored
	}
	nothing(t, ch, 300*time.Millisecond)
	require.Len(t, awaitDeadLetters(t, insp, tp, "g", 1, time.Second), 1)
	awaitGroupsSettled(t, client, tp, "g", 1)
}

// Inspector.Cancel and Reschedule reach waiting grouped messages in both
// tiers (a business key of over 255 bytes keeps a message in the waiting
// set whatever its due time; one without goes to the far tier): a cancelled one is never
// delivered and leaves no grpof field; a rescheduled one falls due and is
// queued in its group, behind the message holding the group's slot
// (GroupConcurrency 1), then delivered in due order. Once queued in its
// group a message is no longer waiting: Cancel does not find it.
func TestGroupsCombo_CancelAndReschedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := topic()
	client := newClient(t)
	pub := newPublisher(t, client)
	insp := newInspector(t, client)
	sub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1})
	require.NoError(t, sub.SubscribeInitialize(tp))
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})

	keyed := func(msg *message.Message, key string) *message.Message {
		redisdelay.SetBusinessKey(msg, key)
		return msg
	}
	// a key of over 255 bytes keeps a message in the waiting set
	nearGone := keyed(groupedDelayed("a", 98, time.Hour), "near-gone"+strings.Repeat(".", 256))
	farGone := groupedDelayed("a", 99, time.Hour)
	farMoved := groupedDelayed("a", 1, time.Hour)
	nearMoved := keyed(groupedDelayed("a", 2, time.Hour), "near-moved"+strings.Repeat(".", 256))
	require.NoError(t, pub.Publish(tp, nearGone, farGone, farMoved, nearMoved))
	_, far := farKeys(t, tp)
	require.EqualValues(t, 2, far, "the two without a business key are in the far tier")
	for _, m := range []*message.Message{nearGone, farGone, farMoved, nearMoved} {
		require.Equal(t, "a", groupOf(t, client, tp, 0, m.UUID), "grpof of %s", m.Payload)
	}

	for _, m := range []*message.Message{nearGone, farGone} {
		ok, err := insp.Cancel(ctx, tp, m.UUID)
		require.NoError(t, err)
		require.True(t, ok, "cancel %s", m.Payload)
		require.Empty(t, groupOf(t, client, tp, 0, m.UUID), "cancelled %s keeps its grpof field", m.Payload)
	}
	require.EqualValues(t, 2, topicStats(t, insp, tp).Waiting)

	require.NoError(t, pub.Publish(tp, groupedMessage("a", 0)))
	ch := subscribe(t, sub, tp)
	held := receive(t, ch, 5*time.Second)
	require.Equal(t, "a/0", string(held.Payload))
	now := time.Now()
	for k, m := range []*message.Message{farMoved, nearMoved} {
		ok, err := insp.Reschedule(ctx, tp, m.UUID, now.Add(time.Duration(k)*100*time.Millisecond))
		require.NoError(t, err)
		require.True(t, ok, "reschedule %s", m.Payload)
	}
	require.Eventually(t, func() bool {
		st := groupStats(t, insp, tp, "g")
		return st.Grouped == 2 && topicStats(t, insp, tp).Waiting == 0
	}, 5*time.Second, 10*time.Millisecond, "the rescheduled messages are queued in their group")
	ok, err := insp.Cancel(ctx, tp, farMoved.UUID)
	require.NoError(t, err)
	require.False(t, ok, "a message queued in its group is no longer waiting")
	nothing(t, ch, 200*time.Millisecond)

	held.Ack()
	for _, want := range []*message.Message{farMoved, nearMoved} {
		msg := receive(t, ch, 5*time.Second)
		require.Equal(t, want.UUID, msg.UUID, "want %s, got %s", want.Payload, msg.Payload)
		require.Equal(t, "a", msg.Metadata.Get(redisdelay.GroupKey))
		msg.Ack()
	}
	nothing(t, ch, 300*time.Millisecond)
	assert.Zero(t, client.Exists(ctx, shardOf(tp, 0).GroupOf()).Val(), "grpof left behind: %v",
		client.HGetAll(ctx, shardOf(tp, 0).GroupOf()).Val())
	assert.Empty(t, businessKeyState(t, tp, 0))
	awaitGroupsSettled(t, client, tp, "g", 1)
}

// routerHandlers adds Router handlers over subscribers of one consumer
// group: each of subs gets a handler of its own (name-0, name-1, ...), so
// they run concurrently, as in several processes.
func routerHandlers(router *message.Router, name, tp string, subs []*redisdelay.Subscriber, h message.NoPublishHandlerFunc) {
	for k, sub := range subs {
		router.AddNoPublisherHandler(fmt.Sprint(name, "-", k), tp, sub, h)
	}
}

// In a Router with middleware.Retry inside middleware.PoisonQueue, two
// subscribers of a consumer group with GroupConcurrency 1: a grouped
// message retried in the handler keeps its group's slot (the group's next
// message waits), one that fails for good goes to the poison topic with
// its group (the metadata travels), where it is queued in that group for
// the poison topic's consumer group, and the original is acked, giving the
// slot back.
func TestGroupsCombo_RouterRetryAndPoisonQueue(t *testing.T) {
	t.Parallel()
	tp, poisonTp := topic(), topic()
	client := newClient(t)
	pub := newPublisher(t, client)
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp, poisonTp}})
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1}
	subs := []*redisdelay.Subscriber{newSubscriber(t, client, config), newSubscriber(t, newClient(t), config)}
	poisonSub := newSubscriber(t, client, redisdelay.SubscriberConfig{ConsumerGroup: "p", GroupConcurrency: 1})
	require.NoError(t, poisonSub.SubscribeInitialize(poisonTp))

	poison, err := middleware.PoisonQueue(pub, poisonTp)
	require.NoError(t, err)
	router := newRouter(t)
	router.AddMiddleware(poison, middleware.Retry{MaxRetries: 2, InitialInterval: 10 * time.Millisecond}.Middleware)
	h := newHandled()
	calls := map[string]int{}
	routerHandlers(router, "h", tp, subs, func(msg *message.Message) error {
		g := h.start(t, msg)
		defer h.end(g)
		if msg.Metadata.Get(redisdelay.GroupKey) != g {
			return fmt.Errorf("message %s lost its group: %v", msg.Payload, msg.Metadata)
		}
		time.Sleep(2 * time.Millisecond) // overlapping handlers, were the cap not held
		h.mu.Lock()
		calls[string(msg.Payload)]++
		n := calls[string(msg.Payload)]
		h.mu.Unlock()
		switch {
		case string(msg.Payload) == "a/1":
			return errors.New("a/1 always fails")
		case string(msg.Payload) == "a/0" && n < 3:
			return errors.New("a/0 fails twice")
		}
		return nil
	})
	runRouter(t, router)

	require.NoError(t, pub.Publish(tp, groupedMessage("a", 0), groupedMessage("a", 1), groupedMessage("a", 2), groupedMessage("b", 0)))
	require.Eventually(t, func() bool { return h.count() == 3*2+1+1 }, 5*time.Second, 10*time.Millisecond, "handler calls")
	h.mu.Lock()
	assert.Equal(t, []int{0, 0, 0, 1, 1, 1, 2}, h.order["a"], "the Retry middleware's calls keep the group's order")
	assert.Equal(t, []int{0}, h.order["b"])
	assert.Equal(t, 1, h.most["a"])
	h.mu.Unlock()

	ch := subscribe(t, poisonSub, poisonTp)
	msg := receive(t, ch, 5*time.Second)
	require.Equal(t, "a/1", string(msg.Payload))
	require.Equal(t, "a", msg.Metadata.Get(redisdelay.GroupKey))
	require.Equal(t, tp, msg.Metadata.Get(middleware.PoisonedTopicKey))
	require.Equal(t, "a", redoGroups(t, client, poisonTp, "p", 0)[msg.UUID], "queued in its group on the poison topic")
	msg.Ack()
	nothing(t, ch, 200*time.Millisecond)
	awaitGroupsSettled(t, client, tp, "g", 1)
	awaitGroupsSettled(t, client, poisonTp, "p", 1)
}

// Grouped messages published through Watermill's delay.NewPublisher (a
// default delay, and one set with delay.WithContext) keep their group, are
// queued in it in due order, not publish order; middleware.DelayOnError's
// retry of a grouped message (a Nack with a delay) keeps the group's slot
// through its delay (GroupConcurrency 1), so the group's next message comes
// after the retry, while another group goes on.
func TestGroupsCombo_DelayPublisherAndDelayOnError(t *testing.T) {
	t.Parallel()
	tp := topic()
	client := newClient(t)
	pub := newPublisher(t, client)
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})
	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1}
	subs := []*redisdelay.Subscriber{newSubscriber(t, client, config), newSubscriber(t, newClient(t), config)}

	router := newRouter(t)
	router.AddMiddleware((&middleware.DelayOnError{InitialInterval: 300 * time.Millisecond, MaxInterval: time.Second, Multiplier: 2}).Middleware)
	var mu sync.Mutex
	var seen []string
	routerHandlers(router, "h", tp, subs, func(msg *message.Message) error {
		attempt := msg.Metadata.Get(redisdelay.AttemptKey)
		mu.Lock()
		seen = append(seen, string(msg.Payload)+"#"+attempt+"@"+msg.Metadata.Get(redisdelay.GroupKey))
		mu.Unlock()
		if string(msg.Payload) == "a/0" && attempt == "1" {
			return errors.New("a/0 fails once")
		}
		return nil
	})
	runRouter(t, router)

	delayed, err := delay.NewPublisher(pub, delay.PublisherConfig{
		DefaultDelayGenerator: func(delay.DefaultDelayGeneratorParams) (delay.Delay, error) {
			return delay.For(300 * time.Millisecond), nil
		},
	})
	require.NoError(t, err)
	// a/1 first with the default delay, then a/0 due earlier
	require.NoError(t, delayed.Publish(tp, groupedMessage("a", 1), groupedMessage("b", 0)))
	first := groupedMessage("a", 0)
	first.SetContext(delay.WithContext(context.Background(), delay.For(100*time.Millisecond)))
	require.NoError(t, delayed.Publish(tp, first))

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 4
	}, 5*time.Second, 10*time.Millisecond, "deliveries")
	mu.Lock()
	var ofA []string
	for _, s := range seen {
		if strings.HasPrefix(s, "a/") {
			ofA = append(ofA, s)
		}
	}
	assert.Equal(t, []string{"a/0#1@a", "a/0#2@a", "a/1#1@a"}, ofA, "all deliveries: %v", seen)
	assert.Contains(t, seen, "b/0#1@b")
	mu.Unlock()
	awaitGroupsSettled(t, client, tp, "g", 1)
	mu.Lock()
	assert.Len(t, seen, 4, "no further delivery: %v", seen)
	mu.Unlock()
}

// Grouped messages that fall due while the topic has no consumer group
// wait for the first (they do not go to the ready stream, where a later
// consumer group would read them ungrouped): then GroupConcurrency 1 and
// the group's order hold for them as for any other. BatchSize 1: each
// subscription holds one message at a time, so two subscriptions could
// hold two of a group at once were the cap not held.
func TestGroupsCombo_PublishedBeforeAnyConsumerGroup(t *testing.T) {
	t.Parallel()
	const each = 4
	ctx := context.Background()
	tp := topic()
	client := newClient(t)
	pub := newPublisher(t, client)
	runManager(t, client, redisdelay.ManagerConfig{Topics: []string{tp}})
	var msgs []*message.Message
	for i := range each {
		msgs = append(msgs, groupedMessage("a", i))
	}
	require.NoError(t, pub.Publish(tp, msgs...))
	// With no consumer group to queue them for, the scheduler keeps them,
	// due, for the first one (promote.lua's gorphan): still Waiting.
	require.Eventually(t, func() bool {
		n, err := client.ZCard(ctx, shardKey(tp, 0, "gorphan")).Result()
		return err == nil && n == each
	}, 5*time.Second, 10*time.Millisecond, "the scheduler keeps them for a consumer group")
	require.EqualValues(t, each, topicStats(t, newInspector(t, client), tp).Waiting)
	n, err := client.XLen(ctx, shardOf(tp, 0).Stream()).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing in the ready stream")

	config := redisdelay.SubscriberConfig{ConsumerGroup: "g", GroupConcurrency: 1, BatchSize: 1}
	h := newHandled()
	done := make(chan struct{}, each)
	for _, c := range []redis.UniversalClient{client, newClient(t)} {
		ch := subscribe(t, newSubscriber(t, c, config), tp)
		go func() {
			for msg := range ch {
				g := h.start(t, msg)
				time.Sleep(50 * time.Millisecond) // overlapping handlers, were the cap not held
				h.end(g)
				msg.Ack()
				done <- struct{}{}
			}
		}()
	}
	for range each {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("handled %d of %d messages", h.count(), each)
		}
	}
	h.mu.Lock()
	assert.Equal(t, 1, h.most["a"], "group a ran more than one message at once (GroupConcurrency 1)")
	assert.Equal(t, seqs(each), h.order["a"], "group a's order")
	h.mu.Unlock()
	awaitGroupsSettled(t, client, tp, "g", 1)
}
