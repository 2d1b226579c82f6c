package redisdelay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Reject (the default): a second waiting message with the key fails with
// the holder named, storing nothing of its call; an identical re-publish is
// a no-op; an immediate message with a held key is rejected too.
func TestBusinessKey_Reject(t *testing.T) {
	t.Parallel()
	env := setup(t)
	first := businessKeyMessage("order-1", time.Hour, "first", "")
	require.NoError(t, env.pub.Publish(env.topic, first))
	require.NoError(t, env.pub.Publish(env.topic, first.Copy()), "an identical re-publish is a no-op")
	before := topicState(t, env.topic)
	want := fmt.Sprintf(`redisdelay: duplicate business key: key "order-1" is held by message %q waiting in topic %q: cancel it first (CancelKey), or publish with the "keep-first" or "replace" BusinessKeyPolicy`, first.UUID, env.topic)

	for name, msgs := range map[string][]*message.Message{
		"delayed":          {businessKeyMessage("order-1", 2*time.Hour, "second", "")},
		"immediate":        {businessKeyMessage("order-1", 0, "now", "")},
		"with a bystander": {delayed(delay.For(time.Minute), "bystander"), businessKeyMessage("order-1", time.Minute, "second", redisdelay.RejectDuplicateKey)},
	} {
		err := env.pub.Publish(env.topic, msgs...)
		require.ErrorIs(t, err, redisdelay.ErrDuplicateBusinessKey, name)
		require.EqualError(t, err, want, name)
		require.Equal(t, before, topicState(t, env.topic), "%s: a rejected call changed the topic", name)
	}
	require.Equal(t, map[string]string{"order-1": first.UUID}, businessKeyState(t, env.topic, 0))

	// another key, and no key, are unaffected
	require.NoError(t, env.pub.Publish(env.topic, businessKeyMessage("order-2", time.Hour, "other", ""), delayed(delay.For(time.Hour), "no key")))
	require.Len(t, businessKeyState(t, env.topic, 0), 2)
}

// Keep first: the waiting message keeps its body and due time, the new one
// is dropped and Publish returns nil; per topic by config, overridden per
// message.
func TestBusinessKey_KeepFirst(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pub := env.publisher(t, redisdelay.PublisherConfig{TopicBusinessKeyPolicy: map[string]redisdelay.BusinessKeyPolicy{env.topic: redisdelay.KeepFirst}})
	first := businessKeyMessage("order-1", time.Hour, "first", "")
	require.NoError(t, pub.Publish(env.topic, first))
	due := waitingScore(t, env.topic, first.UUID)
	before := topicState(t, env.topic)

	require.NoError(t, pub.Publish(env.topic, businessKeyMessage("order-1", time.Minute, "second", "")))
	require.NoError(t, pub.Publish(env.topic, businessKeyMessage("order-1", 0, "immediate", "")), "an immediate message with a held key is dropped too")
	require.Equal(t, before, topicState(t, env.topic))
	require.Equal(t, due, waitingScore(t, env.topic, first.UUID))

	// a per-message policy overrides the topic's
	err := pub.Publish(env.topic, businessKeyMessage("order-1", time.Minute, "strict", redisdelay.RejectDuplicateKey))
	require.ErrorIs(t, err, redisdelay.ErrDuplicateBusinessKey)
	// other topics keep the default
	other := topic()
	require.NoError(t, pub.Publish(other, businessKeyMessage("order-1", time.Hour, "a", "")))
	require.ErrorIs(t, pub.Publish(other, businessKeyMessage("order-1", time.Hour, "b", "")), redisdelay.ErrDuplicateBusinessKey)
}

// Replace: the waiting message is removed and the new one stored with its
// own body and due time; an immediate one removes it and is sent at once.
func TestBusinessKey_Replace(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pub := env.publisher(t, redisdelay.PublisherConfig{BusinessKeyPolicy: redisdelay.KeepFirst})
	first := businessKeyMessage("order-1", time.Hour, "first", "")
	require.NoError(t, pub.Publish(env.topic, first))

	second := businessKeyMessage("order-1", time.Minute, "second", redisdelay.ReplaceWaiting)
	require.NoError(t, pub.Publish(env.topic, second))
	got := content(t, env.topic)
	require.Equal(t, []string{second.UUID}, got.waiting)
	require.Equal(t, 1, got.bodies)
	require.Less(t, waitingScore(t, env.topic, second.UUID), float64(time.Now().Add(2*time.Minute).UnixMilli()*1024), "rescheduled to its own due time")
	require.Equal(t, map[string]string{"order-1": second.UUID}, businessKeyState(t, env.topic, 0))

	now := businessKeyMessage("order-1", 0, "now", redisdelay.ReplaceWaiting)
	require.NoError(t, pub.Publish(env.topic, now))
	got = content(t, env.topic)
	require.Empty(t, got.waiting)
	require.Equal(t, 0, got.bodies)
	require.EqualValues(t, 1, got.ready)
	require.Empty(t, businessKeyState(t, env.topic, 0), "an immediate message holds no key")
	// the key is free: a new waiting message takes it under any policy
	require.NoError(t, pub.Publish(env.topic, businessKeyMessage("order-1", time.Hour, "again", redisdelay.RejectDuplicateKey)))
}

// CancelKey (Publisher and Inspector) recalls the waiting message holding a
// key and frees the key; Cancel by UUID frees it too; after the message
// became due the key is free and CancelKey reports false.
func TestBusinessKey_CancelAndRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)

	a := businessKeyMessage("order-1", time.Hour, "a", "")
	require.NoError(t, env.pub.Publish(env.topic, a))
	ok, err := env.pub.CancelKey(ctx, env.topic, "order-1")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = env.pub.CancelKey(ctx, env.topic, "order-1")
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, content(t, env.topic).waiting)
	require.Zero(t, content(t, env.topic).bodies)
	require.Empty(t, businessKeyState(t, env.topic, 0))

	b := businessKeyMessage("order-1", time.Hour, "b", "")
	require.NoError(t, env.pub.Publish(env.topic, b))
	ok, err = env.insp.CancelKey(ctx, env.topic, "order-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, businessKeyState(t, env.topic, 0))

	c := businessKeyMessage("order-1", time.Hour, "c", "")
	require.NoError(t, env.pub.Publish(env.topic, c))
	ok, err = env.pub.Cancel(ctx, env.topic, c.UUID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, businessKeyState(t, env.topic, 0), "Cancel by UUID frees the key")

	// due: moved to the ready stream by a scheduler, the key is free
	d := businessKeyMessage("order-1", 50*time.Millisecond, "d", "")
	require.NoError(t, env.pub.Publish(env.topic, d, businessKeyMessage("order-2", time.Hour, "stays", "")))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}, CheckInterval: 100 * time.Millisecond})
	require.Eventually(t, func() bool { return content(t, env.topic).ready == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"order-2"}, keysOf(businessKeyState(t, env.topic, 0)), "promotion frees the key of the message it moves only")
	ok, err = env.pub.CancelKey(ctx, env.topic, "order-1")
	require.NoError(t, err)
	require.False(t, ok, "a message already due cannot be recalled")
	require.NoError(t, env.pub.Publish(env.topic, businessKeyMessage("order-1", time.Hour, "e", "")))

	_, err = env.pub.CancelKey(ctx, env.topic, "")
	require.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
	require.EqualError(t, err, fmt.Sprintf(`redisdelay: invalid message: cancel in topic %q: the business key is empty`, env.topic))
	_, err = env.insp.CancelKey(ctx, "a b", "k")
	require.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
	_, err = env.pub.CancelKey(ctx, "", "k")
	require.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// In a partitioned topic a message with a business key and no PartitionKey
// goes to the partition of its key, where the uniqueness check runs;
// CancelKey finds it there, and in another partition when a PartitionKey
// placed it.
func TestBusinessKey_Partitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const parts = 4
	env := setup(t)
	pub := env.publisher(t, redisdelay.PublisherConfig{Partitions: parts})
	var first []*message.Message
	for i := range 12 {
		key := fmt.Sprint("order-", i)
		msg := businessKeyMessage(key, time.Hour, "x", "")
		require.NoError(t, pub.Publish(env.topic, msg))
		first = append(first, msg)
		err := pub.Publish(env.topic, businessKeyMessage(key, time.Hour, "y", ""))
		require.ErrorIs(t, err, redisdelay.ErrDuplicateBusinessKey, key)
		require.ErrorContains(t, err, fmt.Sprintf("waiting in partition %d of topic %q", redisdelay.PartitionOf(key, parts), env.topic))
	}
	for i, msg := range first {
		key := fmt.Sprint("order-", i)
		part := redisdelay.PartitionOf(key, parts)
		require.Equal(t, msg.UUID, businessKeyState(t, env.topic, part)[key], key)
	}
	withPK := businessKeyMessage("pk-order", time.Hour, "z", "")
	pk := "customer-0"
	for i := 1; redisdelay.PartitionOf(pk, parts) == redisdelay.PartitionOf("pk-order", parts); i++ {
		pk = fmt.Sprint("customer-", i)
	}
	withPK.Metadata.Set(redisdelay.PartitionKey, pk)
	pkPart := redisdelay.PartitionOf(pk, parts)
	require.NoError(t, pub.Publish(env.topic, withPK))
	require.Equal(t, withPK.UUID, businessKeyState(t, env.topic, pkPart)["pk-order"])

	for i := range first {
		ok, err := pub.CancelKey(ctx, env.topic, fmt.Sprint("order-", i))
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, err := newInspector(t, newClient(t)).CancelKey(ctx, env.topic, "pk-order")
	require.NoError(t, err)
	require.True(t, ok, "found outside the partition of the key")
	for p := range parts {
		require.Empty(t, businessKeyState(t, env.topic, p))
	}
	require.EqualValues(t, 0, topicStats(t, newInspector(t, newClient(t)), env.topic).Waiting)
}

// Bad business key input: two messages of one call with the same key, an
// unknown per-message policy, and config errors.
func TestBusinessKey_BadInput(t *testing.T) {
	t.Parallel()
	env := setup(t)
	a, b := businessKeyMessage("k", time.Hour, "a", ""), businessKeyMessage("k", 0, "b", "")
	err := env.pub.Publish(env.topic, a, b)
	require.ErrorIs(t, err, redisdelay.ErrDuplicateBusinessKey)
	require.EqualError(t, err, fmt.Sprintf(`redisdelay: duplicate business key: messages 0 and 1 of one Publish call to topic %q share business key "k": publish them in separate calls`, env.topic))

	bad := businessKeyMessage("k", time.Hour, "a", "overwrite")
	err = env.pub.Publish(env.topic, bad)
	require.ErrorIs(t, err, redisdelay.ErrInvalidMessage)
	require.EqualError(t, err, fmt.Sprintf(`redisdelay: invalid message: message %q to topic %q: metadata _redisdelay_business_key_policy="overwrite" is not a business key policy: use "reject", "keep-first", "replace", "replace-keep-due" or "keep-last-if-active"`, bad.UUID, env.topic))
	require.Equal(t, "", topicState(t, env.topic))

	// a policy without a key is ignored
	noKey := delayed(delay.For(time.Hour), "x")
	noKey.Metadata.Set(redisdelay.BusinessKeyPolicyKey, "whatever")
	require.NoError(t, env.pub.Publish(env.topic, noKey))

	for _, c := range []struct {
		config redisdelay.PublisherConfig
		want   string
	}{
		{redisdelay.PublisherConfig{BusinessKeyPolicy: "first"}, `redisdelay: PublisherConfig.BusinessKeyPolicy is "first": use "reject" (the default), "keep-first", "replace", "replace-keep-due" or "keep-last-if-active"`},
		{redisdelay.PublisherConfig{TopicBusinessKeyPolicy: map[string]redisdelay.BusinessKeyPolicy{"t": "x"}}, `redisdelay: PublisherConfig.TopicBusinessKeyPolicy["t"] is "x": use "reject", "keep-first", "replace", "replace-keep-due" or "keep-last-if-active"`},
		{redisdelay.PublisherConfig{TopicBusinessKeyPolicy: map[string]redisdelay.BusinessKeyPolicy{"a}": redisdelay.KeepFirst}}, `redisdelay: invalid topic: PublisherConfig.TopicBusinessKeyPolicy key "a}" contains "}" at byte 1`},
		{redisdelay.PublisherConfig{MaxWaiting: -1}, `redisdelay: PublisherConfig.MaxWaiting is -1: use 0 (no bound) or more`},
		{redisdelay.PublisherConfig{MaxReady: -5}, `redisdelay: PublisherConfig.MaxReady is -5: use 0 (no bound) or more`},
		{redisdelay.PublisherConfig{TopicMaxWaiting: map[string]int{"t": -1}}, `redisdelay: PublisherConfig.TopicMaxWaiting["t"] is -1: use 0 (no bound) or more`},
		{redisdelay.PublisherConfig{TopicMaxReady: map[string]int{"t": -2}}, `redisdelay: PublisherConfig.TopicMaxReady["t"] is -2: use 0 (no bound) or more`},
		{redisdelay.PublisherConfig{TopicMaxReady: map[string]int{"": 2}}, `redisdelay: invalid topic: PublisherConfig.TopicMaxReady key is empty`},
	} {
		c.config.Client = env.client
		_, err := redisdelay.NewPublisher(c.config, logger)
		require.ErrorContains(t, err, c.want)
	}
}

// The waiting and ready bounds: a call beyond one fails with ErrQueueFull,
// naming the bound and the count, storing nothing; per-topic overrides; in
// a partitioned topic each partition holds ceil(bound / partitions).
func TestBusinessKey_QueueFull(t *testing.T) {
	t.Parallel()
	env := setup(t)
	free, small := topic(), topic()
	pub := env.publisher(t, redisdelay.PublisherConfig{MaxWaiting: 2, MaxReady: 3,
		TopicMaxWaiting: map[string]int{free: 0}, TopicMaxReady: map[string]int{small: 1}})

	require.NoError(t, pub.Publish(env.topic, delayed(delay.For(time.Hour), "1")))
	before := topicState(t, env.topic)
	err := pub.Publish(env.topic, delayed(delay.For(time.Hour), "2"), delayed(delay.For(time.Hour), "3"))
	require.ErrorIs(t, err, redisdelay.ErrQueueFull)
	require.EqualError(t, err, fmt.Sprintf(`redisdelay: queue full: topic %q holds 1 waiting messages (delayed, not yet due) and the call adds 2, over its bound (PublisherConfig.MaxWaiting is 2): nothing of the call is stored`, env.topic))
	require.Equal(t, before, topicState(t, env.topic))
	require.NoError(t, pub.Publish(env.topic, delayed(delay.For(time.Hour), "2")), "one more fits")

	// immediate messages count against the ready bound only
	require.NoError(t, pub.Publish(env.topic, newMessage("r1"), newMessage("r2"), newMessage("r3")))
	before = topicState(t, env.topic)
	err = pub.Publish(env.topic, newMessage("r4"))
	require.ErrorIs(t, err, redisdelay.ErrQueueFull)
	require.EqualError(t, err, fmt.Sprintf(`redisdelay: queue full: topic %q holds 3 ready stream entries (due, not yet trimmed) and the call adds 1, over its bound (PublisherConfig.MaxReady is 3): nothing of the call is stored`, env.topic))
	err = pub.Publish(env.topic, delayed(delay.For(time.Hour), "3"))
	require.ErrorContains(t, err, "holds 2 waiting messages")
	require.Equal(t, before, topicState(t, env.topic))

	// a replace at the bound swaps, an identical re-publish is a no-op
	k := businessKeyMessage("k", time.Hour, "k", redisdelay.ReplaceWaiting)
	ok, err := pub.Cancel(context.Background(), env.topic, content(t, env.topic).waiting[0])
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, pub.Publish(env.topic, k))
	require.NoError(t, pub.Publish(env.topic, k.Copy()))
	require.NoError(t, pub.Publish(env.topic, businessKeyMessage("k", 2*time.Hour, "k2", redisdelay.ReplaceWaiting)))
	require.Len(t, content(t, env.topic).waiting, 2)

	// per-topic overrides
	for i := range 5 {
		require.NoError(t, pub.Publish(free, delayed(delay.For(time.Hour), fmt.Sprint(i))), "TopicMaxWaiting 0: no bound")
	}
	require.NoError(t, pub.Publish(small, newMessage("s1")))
	err = pub.Publish(small, newMessage("s2"))
	require.EqualError(t, err, fmt.Sprintf(`redisdelay: queue full: topic %q holds 1 ready stream entries (due, not yet trimmed) and the call adds 1, over its bound (PublisherConfig.TopicMaxReady[%q] is 1): nothing of the call is stored`, small, small))

	// partitions: 5 over 2 partitions is 3 per partition
	parted := env.publisher(t, redisdelay.PublisherConfig{Partitions: 2, MaxWaiting: 5})
	pt := topic()
	var keyOn1 string
	for i := 0; keyOn1 == ""; i++ {
		if redisdelay.PartitionOf(fmt.Sprint("p", i), 2) == 1 {
			keyOn1 = fmt.Sprint("p", i)
		}
	}
	for i := range 3 {
		msg := delayed(delay.For(time.Hour), fmt.Sprint(i))
		msg.Metadata.Set(redisdelay.PartitionKey, keyOn1)
		require.NoError(t, parted.Publish(pt, msg))
	}
	msg := delayed(delay.For(time.Hour), "4")
	msg.Metadata.Set(redisdelay.PartitionKey, keyOn1)
	err = parted.Publish(pt, msg)
	require.ErrorIs(t, err, redisdelay.ErrQueueFull)
	require.EqualError(t, err, fmt.Sprintf(`redisdelay: queue full: partition 1 of topic %q holds 3 waiting messages (delayed, not yet due) and the call adds 1, over its bound (3 per partition: PublisherConfig.MaxWaiting is 5 over 2 partitions): nothing of the call is stored`, pt))
}

// Coalesced calls in one script run keep their own results: each is
// checked against the bound and the business keys as left by the calls
// before it, as if they had run one after another.
func TestBusinessKey_CoalescedKeysAndBounds(t *testing.T) {
	t.Parallel()
	env := setupGated(t, redisdelay.PublisherConfig{MaxWaiting: 3})
	env.counter.n.Store(0)
	first, second := twoInFlight(t, env.proxy, env.pub, env.topic)

	a := businessKeyMessage("k", time.Hour, "a", "")
	b := businessKeyMessage("k", 2*time.Hour, "b", redisdelay.ReplaceWaiting) // replaces a, in the same run
	c := businessKeyMessage("k", time.Hour, "c", "")                          // rejected: b holds k
	d := businessKeyMessage("k", time.Hour, "d", redisdelay.KeepFirst)        // dropped
	big := []*message.Message{delayed(delay.For(time.Hour), "1"), delayed(delay.For(time.Hour), "2"), delayed(delay.For(time.Hour), "3"), delayed(delay.For(time.Hour), "4")}
	small := []*message.Message{delayed(delay.For(time.Hour), "5"), delayed(delay.For(time.Hour), "6")}
	last := []*message.Message{delayed(delay.For(time.Hour), "7")}
	calls := [][]*message.Message{{a}, {b}, {c}, {d}, big, small, last}
	errs := make([]chan error, len(calls))
	for i, msgs := range calls {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- env.pub.Publish(env.topic, msgs...) }()
		awaitQueued(t, env.pub, env.topic, i+1) // queued in this order
	}
	env.proxy.open()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.NoError(t, <-errs[0])
	require.NoError(t, <-errs[1])
	require.EqualError(t, <-errs[2], fmt.Sprintf(`redisdelay: duplicate business key: key "k" is held by message %q waiting in topic %q: cancel it first (CancelKey), or publish with the "keep-first" or "replace" BusinessKeyPolicy`, b.UUID, env.topic))
	require.NoError(t, <-errs[3])
	require.EqualError(t, <-errs[4], fmt.Sprintf(`redisdelay: queue full: topic %q holds 1 waiting messages (delayed, not yet due) and the call adds 4, over its bound (PublisherConfig.MaxWaiting is 3): nothing of the call is stored`, env.topic))
	require.NoError(t, <-errs[5], "a smaller call after a full one still fits")
	require.ErrorContains(t, <-errs[6], "holds 3 waiting messages")
	assert.EqualValues(t, 3, env.counter.n.Load(), "script runs: two in flight, then all queued calls in one")

	got := content(t, env.topic)
	require.ElementsMatch(t, []string{b.UUID, small[0].UUID, small[1].UUID}, got.waiting)
	require.Equal(t, 3, got.bodies)
	require.Equal(t, map[string]string{"k": b.UUID}, businessKeyState(t, env.topic, 0))
	w, ok, err := env.insp.FindWaiting(context.Background(), env.topic, b.UUID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "b", string(w.Message.Payload))
}

// CancelKey on a closed Publisher fails with ErrClosed.
func TestBusinessKey_CancelAfterClose(t *testing.T) {
	t.Parallel()
	env := setup(t)
	require.NoError(t, env.pub.Close())
	_, err := env.pub.CancelKey(context.Background(), env.topic, "k")
	require.ErrorIs(t, err, redisdelay.ErrClosed)
}

// Redis unreachable: both recalls say what they were doing and why.
func TestBusinessKey_CancelRedisDown(t *testing.T) {
	t.Parallel()
	env := setupUnreachable(t)
	_, err := env.insp.CancelKey(context.Background(), "orders", "k")
	require.ErrorContains(t, err, `redisdelay: cancel business key "k" in topic "orders": read the partition counts of 1 topic(s): dial tcp 127.0.0.1:1`)
	_, err = env.pub.CancelKey(context.Background(), "orders", "k")
	require.ErrorContains(t, err, `redisdelay: cancel business key "k" in topic "orders": dial tcp 127.0.0.1:1`)
}
