package redisdelay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Many goroutines publishing at once, one message or several per call,
// delayed and immediate: everything is stored exactly once.
func TestPublish_ConcurrentStoresEverythingOnce(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const goroutines, calls = 64, 40
	var (
		wg                   sync.WaitGroup
		mu                   sync.Mutex
		delayedIDs           = map[string]bool{}
		readyCount, dupCount int
	)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				var msgs []*message.Message
				for k := 0; k < 1+i%3; k++ {
					msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("%d/%d/%d", g, i, k)))
					if (i+k)%2 == 0 {
						delay.Message(msg, delay.For(time.Hour))
					}
					msgs = append(msgs, msg)
				}
				if !assert.NoError(t, env.pub.Publish(env.topic, msgs...)) {
					return
				}
				// an identical retry of a waiting message is a no-op
				if i%5 == 0 && msgs[0].Metadata.Get(delay.DelayedForKey) != "" {
					if !assert.NoError(t, env.pub.Publish(env.topic, msgs[0])) {
						return
					}
					mu.Lock()
					dupCount++
					mu.Unlock()
				}
				mu.Lock()
				for _, m := range msgs {
					if m.Metadata.Get(delay.DelayedForKey) != "" {
						delayedIDs[m.UUID] = true
					} else {
						readyCount++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.NoError(t, env.pub.Close())

	c := content(t, env.topic)
	require.Positive(t, dupCount)
	assert.Len(t, c.waiting, len(delayedIDs), "waiting messages")
	assert.Equal(t, len(delayedIDs), c.bodies, "bodies")
	assert.Equal(t, int64(readyCount), c.ready, "ready messages")
	for _, id := range c.waiting {
		assert.True(t, delayedIDs[id], "unexpected waiting message %s", id)
	}
}

// Messages due at the same instant keep their publish order, within a call
// and across calls queued into one round trip.
func TestPublish_KeepsOrderWithinEqualDueTimes(t *testing.T) {
	t.Parallel()
	env := setupGated(t, redisdelay.PublisherConfig{})
	var want []string
	var msgs []*message.Message
	// More than one chunk of the script's variadic calls; fewer than 1024
	// (the sequence that orders equal due times wraps at 1024); within
	// the bounds of one run.
	for i := 0; i < 510; i++ {
		// The same delay, due in the same ms: a duration only. delay.For
		// also writes an until instant, which wins when the message is
		// prepared late in its second, and two calls prepared a few ms
		// apart then get due times that far apart (the delay is measured
		// from the prepare, applied from the store).
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
		msg.Metadata.Set(delay.DelayedForKey, time.Hour.String())
		msgs = append(msgs, msg)
		want = append(want, msg.UUID)
	}
	a, b := twoInFlight(t, env.proxy, env.pub, env.topic)
	first := make(chan error, 1)
	go func() { first <- env.pub.Publish(env.topic, msgs[:400]...) }()
	awaitQueued(t, env.pub, env.topic, 1)
	second := make(chan error, 1)
	go func() { second <- env.pub.Publish(env.topic, msgs[400:]...) }()
	awaitQueued(t, env.pub, env.topic, 2)
	env.proxy.open()
	require.NoError(t, <-a)
	require.NoError(t, <-b)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	assert.Equal(t, want, content(t, env.topic).waiting)
	assert.EqualValues(t, 3, env.counter.n.Load(), "script runs: two in flight, then both queued calls in one")
}

// Calls that queue behind a round trip in flight go together in the next
// one; a call whose UUID clashes with another's waiting message fails
// alone, storing none of its messages, and the others succeed.
func TestPublish_CoalescedDuplicateFailsOnlyItsCall(t *testing.T) {
	t.Parallel()
	env := setupGated(t, redisdelay.PublisherConfig{})
	// due within a second: in the waiting set (a far message re-published
	// costs another round trip: TestFar_Republish); no scheduler runs
	waiting := delayed(delay.For(time.Second), "original")
	require.NoError(t, env.pub.Publish(env.topic, waiting))
	env.counter.n.Store(0)

	first, second := twoInFlight(t, env.proxy, env.pub, env.topic)

	clash := waiting.Copy()
	clash.Payload = []byte("changed")
	bystander := delayed(delay.For(time.Hour), "bystander of the clash")
	identical := waiting.Copy() // an identical re-publish is a no-op, not a clash
	type call struct {
		name string
		msgs []*message.Message
		err  chan error
	}
	calls := []*call{
		{name: "clash", msgs: []*message.Message{bystander, clash}},
		{name: "identical", msgs: []*message.Message{identical, delayed(delay.For(time.Minute), "with identical")}},
	}
	// two queued calls with the same new UUID and different bodies: the
	// first in the queue wins, as if they had run one after another
	fresh := delayed(delay.For(time.Hour), "fresh A")
	freshB := fresh.Copy()
	freshB.Payload = []byte("fresh B")
	calls = append(calls, &call{name: "fresh", msgs: []*message.Message{fresh}}, &call{name: "fresh", msgs: []*message.Message{freshB}})
	for i := 0; i < 8; i++ {
		calls = append(calls, &call{name: fmt.Sprint("other ", i), msgs: []*message.Message{
			delayed(delay.For(time.Duration(i+1)*time.Minute), "other"),
			message.NewMessage(watermill.NewUUID(), []byte("ready")),
		}})
	}
	for _, c := range calls {
		c.err = make(chan error, 1)
		go func() { c.err <- env.pub.Publish(env.topic, c.msgs...) }()
	}
	awaitQueued(t, env.pub, env.topic, len(calls))
	env.proxy.open()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	freshFailed := 0
	for _, c := range calls {
		err := <-c.err
		if c.name == "fresh" {
			if err != nil {
				require.ErrorIs(t, err, redisdelay.ErrDuplicateMessage)
				freshFailed++
			}
			continue
		}
		if c.name == "clash" {
			require.ErrorIs(t, err, redisdelay.ErrDuplicateMessage)
			require.EqualError(t, err, fmt.Sprintf(`redisdelay: duplicate message UUID: message %q is already waiting in topic %q with a different body: cancel it first or use a new UUID`, waiting.UUID, env.topic))
		} else {
			require.NoError(t, err, c.name)
		}
	}
	assert.Equal(t, 1, freshFailed, "one of two calls with the same new UUID and different bodies fails")
	assert.EqualValues(t, 3, env.counter.n.Load(), "script runs: two in flight, then all queued calls in one")

	got := content(t, env.topic)
	assert.Len(t, got.waiting, 1+1+1+8, "waiting: the original, the one beside identical, fresh, the others'")
	assert.NotContains(t, got.waiting, bystander.UUID, "a message of the failed call was stored")
	assert.EqualValues(t, 1+2+8, got.ready, "ready: the warm-up message, the two in flight, the others'")
	body, err := env.client.HGet(context.Background(), shardOf(env.topic, 0).Bodies(), waiting.UUID).Result()
	require.NoError(t, err)
	assert.Contains(t, body, "original")
	assert.NotContains(t, body, "changed")
}

// A call that gives up while queued returns its timeout error, is never
// sent, and the calls around it succeed.
func TestPublish_TimeoutWhileOthersSucceed(t *testing.T) {
	t.Parallel()
	env := setupGated(t, redisdelay.PublisherConfig{})

	first, second := twoInFlight(t, env.proxy, env.pub, env.topic)

	impatient := delayed(delay.For(time.Hour), "impatient")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	impatient.SetContext(ctx)
	patient := delayed(delay.For(time.Hour), "patient")
	impatientErr, patientErr := make(chan error, 1), make(chan error, 1)
	go func() { impatientErr <- env.pub.Publish(env.topic, impatient) }()
	go func() { patientErr <- env.pub.Publish(env.topic, patient) }()

	start := time.Now()
	select {
	case err := <-impatientErr:
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.EqualError(t, err, fmt.Sprintf(`redisdelay: publish 1 message(s) to topic %q: gave up before sending the messages (none is stored): context deadline exceeded`, env.topic))
		require.Less(t, time.Since(start), 2*time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("a Publish whose context ended did not return")
	}
	env.proxy.open()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.NoError(t, <-patientErr)
	got := content(t, env.topic)
	assert.Equal(t, []string{patient.UUID}, got.waiting)
	assert.EqualValues(t, 3, env.counter.n.Load(), "script runs")

	// A call that gives up while its round trip is in flight says its
	// messages may or may not be stored; the publisher goes on.
	env.proxy.hold()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	late := delayed(delay.For(time.Hour), "late")
	late.SetContext(ctx2)
	errc := inFlight(t, env.proxy, func() error { return env.pub.Publish(env.topic, late) })
	err := <-errc
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, strings.Contains(err.Error(), "may or may not be stored"), err.Error())
	env.proxy.open()
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(time.Hour), "after")))
}

// Close loses no queued call: it waits until they are sent and answered;
// calls after Close fail with ErrClosed.
func TestPublish_CloseFlushesQueuedCalls(t *testing.T) {
	t.Parallel()
	env := setupGated(t, redisdelay.PublisherConfig{})
	first, second := twoInFlight(t, env.proxy, env.pub, env.topic)
	errs := make(chan error, 5)
	for i := 0; i < 5; i++ {
		go func() { errs <- env.pub.Publish(env.topic, delayed(delay.For(time.Hour), "queued")) }()
	}
	awaitQueued(t, env.pub, env.topic, 5)
	closed := make(chan error, 1)
	go func() { closed <- env.pub.Close() }()
	require.Eventually(t, func() bool { return redisdelay.Closing(env.pub) }, 5*time.Second, time.Millisecond)
	require.Equal(t, redisdelay.ErrClosed, env.pub.Publish(env.topic, message.NewMessage("late", nil)))
	select {
	case <-closed:
		t.Fatal("Close returned with calls in flight")
	case <-time.After(100 * time.Millisecond):
	}
	env.proxy.open()
	require.NoError(t, <-closed)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	for i := 0; i < 5; i++ {
		require.NoError(t, <-errs)
	}
	assert.Len(t, content(t, env.topic).waiting, 5)
}

// A run carries at most 512 messages: a larger queued call is stored in
// parts, the first alone, the calls queued after it together in the next
// run, then its other part.
func TestPublish_BoundsCoalescedRuns(t *testing.T) {
	t.Parallel()
	env := setupGated(t, redisdelay.PublisherConfig{})
	a, b := twoInFlight(t, env.proxy, env.pub, env.topic)
	var errs []chan error
	total := 0
	for _, n := range []int{600, 10, 1} {
		msgs := make([]*message.Message, n)
		for i := range msgs {
			msgs[i] = delayed(delay.For(time.Hour), "x")
		}
		total += n
		errc := make(chan error, 1)
		go func() { errc <- env.pub.Publish(env.topic, msgs...) }()
		errs = append(errs, errc)
		awaitQueued(t, env.pub, env.topic, len(errs)) // queued in this order
	}
	env.proxy.open()
	require.NoError(t, <-a)
	require.NoError(t, <-b)
	for _, errc := range errs {
		require.NoError(t, <-errc)
	}
	assert.Len(t, content(t, env.topic).waiting, total)
	// Two in flight, then the large call's first part (512: the bound),
	// then the other two calls together and its second part (88), in one
	// run or two: the second part is queued when its first is done, so it
	// rides with the other two if no run took them by then (a loaded
	// machine, where the second call in flight answers late). Unbounded,
	// everything queued would go in one run: 3.
	runs := env.counter.n.Load()
	assert.True(t, runs == 4 || runs == 5, "script runs: %d, want 4 or 5", runs)
}

// partsPublisher is a Publisher whose client counts the scripts it runs,
// with topic registered and the script loaded.
func partsPublisher(t *testing.T, topic string) (*redisdelay.Publisher, *scriptCounter) {
	t.Helper()
	client := newClient(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), nil)))
	loadPublishScripts(t, pub)
	counter := &scriptCounter{}
	client.AddHook(counter)
	return pub, counter
}

// countedEnv is an env whose pub is a partsPublisher of its topic.
type countedEnv struct {
	*env
	counter *scriptCounter
}

// setupCounted returns a test's env with a partsPublisher as pub.
func setupCounted(t *testing.T) *countedEnv {
	t.Helper()
	e := setup(t)
	pub, counter := partsPublisher(t, e.topic)
	e.pub = pub
	return &countedEnv{env: e, counter: counter}
}

// waitingUUIDs lists the UUIDs Inspector.Waiting returns for topic, in due
// order, the far tier's included.
func waitingUUIDs(t *testing.T, topic string) []string {
	t.Helper()
	msgs, err := newInspector(t, newClient(t)).Waiting(context.Background(), topic, 0, 10_000)
	require.NoError(t, err)
	uuids := make([]string, len(msgs))
	for i, m := range msgs {
		uuids[i] = m.Message.UUID
	}
	return uuids
}

// A call of more than 512 messages is stored in parts of 512, in call
// order: messages published with the same delay keep their order across
// the parts (delay.For, not delay.Until: Watermill sets both keys for
// Until, the For one from the clock of each message's creation).
func TestPublish_LargeCallGoesInParts(t *testing.T) {
	t.Parallel()
	env := setupCounted(t)
	msgs := make([]*message.Message, 1000) // fewer than 1024: see TestPublish_KeepsOrderWithinEqualDueTimes
	want := make([]string, len(msgs))
	for i := range msgs {
		msgs[i] = delayed(delay.For(time.Hour), "x")
		want[i] = msgs[i].UUID
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	assert.EqualValues(t, 2, env.counter.n.Load(), "parts of 512 and 488 messages")
	assert.Equal(t, want, waitingUUIDs(t, env.topic))
}

// A part holds far messages of at most 128 far buckets: 200 messages due
// in 200 different buckets go in two parts, 200 in one bucket in one.
func TestPublish_PartsBoundFarBuckets(t *testing.T) {
	t.Parallel()
	width, _, _ := redisdelay.FarTier()
	for _, spread := range []bool{true, false} {
		env := setupCounted(t)
		start := time.Now().Add(time.Hour).Truncate(width)
		msgs := make([]*message.Message, 200)
		for i := range msgs {
			due := start
			if spread {
				due = start.Add(time.Duration(i) * width)
			}
			msgs[i] = delayed(delay.Until(due), "x")
		}
		require.NoError(t, env.pub.Publish(env.topic, msgs...))
		runs := int64(1)
		if spread {
			runs = 2
		}
		assert.Equal(t, runs, env.counter.n.Load(), "spread: %v", spread)
		st := topicStats(t, env.insp, env.topic)
		assert.EqualValues(t, 200, st.Waiting, "spread: %v", spread)
	}
}

// When a part fails, the parts after it are not sent, and the error says
// how many of the call's messages are stored.
func TestPublish_PartFailureSaysWhatIsStored(t *testing.T) {
	t.Parallel()
	env := setupCounted(t)
	held := delayed(delay.For(time.Second), "held") // in the waiting set: no far pull
	require.NoError(t, env.pub.Publish(env.topic, held))
	msgs := make([]*message.Message, 1100)
	for i := range msgs {
		msgs[i] = delayed(delay.For(time.Hour), "x")
	}
	msgs[520].UUID = held.UUID // in the second part
	err := env.pub.Publish(env.topic, msgs...)
	require.ErrorIs(t, err, redisdelay.ErrDuplicateMessage)
	require.ErrorContains(t, err, fmt.Sprintf("the first 512 of the call's 1100 messages to topic %q are stored: a Publish call is stored in parts", env.topic))
	assert.EqualValues(t, 3, env.counter.n.Load(), "the held message, the two first parts; not the third")
	assert.EqualValues(t, 513, topicStats(t, env.insp, env.topic).Waiting)

	// The rest goes on a retry once the clash is gone; the stored ones (in
	// the far tier) are no-ops. Their part is sent twice: once to find them
	// all there, once after they were moved to the waiting set.
	msgs[520].UUID = watermill.NewUUID()
	env.counter.n.Store(0)
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	assert.EqualValues(t, 1101, topicStats(t, env.insp, env.topic).Waiting)
	// one more when farpull.lua is not loaded yet (go-redis sends EVAL after EVALSHA)
	assert.InDelta(t, 2+512+1+1, env.counter.n.Load(), 1, "script runs: the first part twice with a far pull per message, the other two once")
}

// A call whose context has already ended is not sent: coalesced runs are
// shared, so its context could not stop the run once it was. Found in
// review: such calls used to be stored while reporting that they may not be.
func TestPublish_WithEndedContextStoresNothing(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: env.client}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 20 {
		msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
		if i%2 == 0 {
			delay.Message(msg, delay.For(time.Hour))
		}
		msg.SetContext(ctx)
		err := pub.Publish(env.topic, msg)
		require.ErrorIs(t, err, context.Canceled)
		require.EqualError(t, err, fmt.Sprintf(`redisdelay: publish 1 message(s) to topic %q: gave up before sending the messages (none is stored): context canceled`, env.topic))
	}
	assert.Equal(t, topicContent{waiting: []string{}}, content(t, env.topic))
}
