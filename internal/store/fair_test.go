package store

import (
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The scripts of groups (fair.lua and those including it) driven directly
// on a real server: after every step, fairEnv.check reads the consumer
// group's fair queues, its redelivery stream and its retry set and checks
// fair.lua's invariants (see its header, and check).

// Round robin: one message per group per turn of the ring, in the order
// the groups' first messages fell due, whatever each group's backlog; a
// group leaves the ring when its queue is empty.
func TestFair_RoundRobin(t *testing.T) {
	for _, count := range []int{1, 9} {
		t.Run("count "+strconv.Itoa(count), func(t *testing.T) {
			e := newFairEnv(t, fairPolicy{})
			e.publish(slices.Concat(msgs("A", 4), msgs("B", 2), msgs("C", 3))...)
			e.promote()
			v := e.view()
			require.Equal(t, []string{"A", "B", "C"}, v.ring)
			require.EqualValues(t, 9, v.n)
			var order []string
			for range 20 {
				got, r := e.pick("c", count)
				order = append(order, payloads(got)...)
				if !r.More {
					break
				}
			}
			require.Equal(t, []string{"A1", "B1", "C1", "A2", "B2", "C2", "A3", "C3", "A4"}, order)
			v = e.view()
			require.Empty(t, v.ring)
			require.EqualValues(t, -1, v.n, "nothing queued: no count")
			for _, g := range []string{"A", "B", "C"} {
				require.EqualValues(t, map[string]int64{"A": 4, "B": 2, "C": 3}[g], v.states[g].f, g)
			}
			got, _ := e.read("c", 10)
			require.Empty(t, got)
			for _, id := range e.pendingOf("c") {
				e.ack(fairGot{id: id})
			}
			e.settled()
		})
	}
}

// A group joining while the ring turns goes to the back of the ring; a
// group that was emptied and gets messages again joins at the back.
func TestFair_RingJoinsAtTheBack(t *testing.T) {
	e := newFairEnv(t, fairPolicy{})
	e.publish(slices.Concat(msgs("A", 3), msgs("B", 1))...)
	e.promote()
	got, _ := e.pick("c", 2)
	require.Equal(t, []string{"A1", "B1"}, payloads(got))
	e.publish(&fairMsg{payload: "C1", group: "C"}, &fairMsg{payload: "B2", group: "B"})
	e.promote()
	require.Equal(t, []string{"A", "C", "B"}, e.view().ring)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A2", "C1", "B2", "A3"}, payloads(got))
	e.ack(got...)
	for _, id := range e.pendingOf("c") {
		e.ack(fairGot{id: id})
	}
	e.settled()
}

// A grouped message waits in the waiting set until due, then goes to the
// back of its group; a consumer group whose subscribers do not read groups
// (no gv in its meta hash: an older version) gets it in its redelivery
// stream instead, as an ungrouped redelivery (no field k).
func TestFair_DueOrderAndOlderSubscribers(t *testing.T) {
	e := newFairEnv(t, fairPolicy{})
	old := "old"
	_, err := e.c.SAdd(e.ctx, e.sh.Groups(), old).Result()
	require.NoError(t, err)
	for _, key := range []string{e.sh.Stream(), e.sh.Redelivery(old)} {
		require.NoError(t, e.c.XGroupCreateMkStream(e.ctx, key, old, "0").Err())
	}
	require.NoError(t, e.c.HSet(e.ctx, e.sh.Meta(old), "vis", 60_000).Err())
	e.publish(&fairMsg{payload: "A1", group: "A", delay: 300 * time.Millisecond}, &fairMsg{payload: "A2", group: "A"})
	promote := func() {
		r, err := Promote(e.ctx, e.c, e.sh, PromoteArgs{Groups: []string{e.cg, old}, Batch: 256, Owner: "owner", Lease: time.Minute, MayTake: true, Extend: true})
		require.NoError(t, err)
		e.check("promote")
		if r.Wait > 0 && r.Wait < 5000 {
			time.Sleep(time.Duration(r.Wait) * time.Microsecond)
			_, err = Promote(e.ctx, e.c, e.sh, PromoteArgs{Groups: []string{e.cg, old}, Batch: 256, Owner: "owner", Lease: time.Minute, MayTake: true, Extend: true})
			require.NoError(t, err)
			e.check("promote")
		}
	}
	promote()
	require.EqualValues(t, 1, e.view().n, "A1 is not due yet")
	time.Sleep(320 * time.Millisecond)
	promote()
	got, _ := e.pick("c", 10)
	require.Equal(t, []string{"A2", "A1"}, payloads(got), "in due order")
	entries, err := e.c.XRange(e.ctx, e.sh.Redelivery(old), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 2)
	for _, m := range entries {
		require.NotContains(t, m.Values, "k")
		require.Equal(t, "1", m.Values["a"])
	}
	require.Zero(t, e.c.Exists(e.ctx, e.sh.Fair(old)).Val())
	e.ack(got...)
	e.settled()
}

// Where a message handed back goes in its group: nacked without delay,
// released (Close) or reclaimed, to the front (next in its group); nacked
// with a delay, to the retry set keeping its slot, then to the front when
// due; buried, nowhere (slot given back); requeued from the dead letters,
// to the back.
func TestFair_FrontAndBack(t *testing.T) {
	e := newFairEnv(t, fairPolicy{cap: 1, vis: 100, max: 3})
	e.publish(slices.Concat(msgs("A", 3), msgs("B", 2))...)
	e.promote()

	got, _ := e.pick("c", 10)
	require.Equal(t, []string{"A1", "B1"}, payloads(got))
	a1 := got[0]

	// nack without delay: front of A, slot given back
	require.EqualValues(t, 1, e.nack(a1, 0, ""))
	require.Equal(t, []string{"A"}, e.view().ring)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A1"}, payloads(got))
	require.Equal(t, 2, got[0].attempt)
	a1 = got[0]

	// nack with a delay: retry set, the slot kept; front once due
	require.EqualValues(t, 1, e.nack(a1, 40*time.Millisecond, ""))
	v := e.view()
	require.EqualValues(t, 1, v.states["A"].f, "a retry keeps its group's slot")
	require.Empty(t, v.ring)
	got, _ = e.pick("c", 10)
	require.Empty(t, got, "A's slot is taken by its retry, B's by B1")
	time.Sleep(60 * time.Millisecond)
	e.promote()
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A1"}, payloads(got), "the retry is next in its group")
	require.Equal(t, 3, got[0].attempt)
	a1 = got[0]

	// buried: slot given back, A2 next; requeued: to the back of A
	require.EqualValues(t, 2, e.nack(a1, 0, "failed"))
	dead, err := e.c.XRange(e.ctx, e.sh.Dead(e.cg), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "A", dead[0].Values["k"], "a dead letter names its group")
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A2"}, payloads(got))
	a2 := got[0]
	require.Equal(t, 1, e.requeue(10))
	e.ack(a2)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A3"}, payloads(got), "a requeued dead letter goes to the back of its group")
	e.ack(got...)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"A1"}, payloads(got))
	require.Equal(t, 1, got[0].attempt, "requeued as attempt 1")
	a1 = got[0]

	// released (Close): to the front, slots given back; the consumer goes
	require.EqualValues(t, 2, e.release("c", 1))
	require.ElementsMatch(t, []string{"A", "B"}, e.view().ring)
	got, _ = e.pick("d", 10)
	require.ElementsMatch(t, []string{"A1", "B1"}, payloads(got), "released messages are next in their groups")
	for _, g := range got {
		require.Equal(t, map[string]int{"A1": 1, "B1": 1}[g.payload], g.attempt, "a released message keeps its attempt")
	}

	// reclaimed (visibility timeout 100 ms, no backoff): to the front
	time.Sleep(150 * time.Millisecond)
	r := e.reclaim(1)
	require.EqualValues(t, 2, r.Requeued)
	got, _ = e.pick("c", 10)
	require.ElementsMatch(t, []string{"A1", "B1"}, payloads(got))
	for _, g := range got {
		require.Equal(t, 2, g.attempt)
	}
	// reclaimed out of attempts (max 3): buried, slot given back
	time.Sleep(150 * time.Millisecond)
	e.reclaim(1000)
	got, _ = e.pick("c", 10)
	require.ElementsMatch(t, []string{"A1", "B1"}, payloads(got))
	time.Sleep(150 * time.Millisecond)
	r = e.reclaim(1000)
	require.EqualValues(t, 2, r.Buried)
	got, _ = e.pick("c", 10)
	require.ElementsMatch(t, []string{"B2"}, payloads(got))
	e.ack(got...)
	require.Equal(t, 2, e.requeue(10))
	for range 10 {
		got, r := e.pick("c", 10)
		e.ack(got...)
		if !r.More && len(got) == 0 {
			break
		}
	}
	e.settled()
}

// Keep last if active: the business key is the group "\x01<key>", cap 1
// whatever the consumer group's cap, and at most one fresh message queued,
// replaced by each newer one; a retry of the active one goes in front of
// it.
func TestFair_KeepLastIfActive(t *testing.T) {
	e := newFairEnv(t, fairPolicy{})
	k := func(p string) *fairMsg { return &fairMsg{payload: p, key: "order-7"} }
	g := "\x01order-7"
	// while waiting, a newer message replaces the waiting one
	e.publish(k("k1"))
	e.publish(k("k2"))
	n, err := e.c.ZCard(e.ctx, e.sh.Waiting()).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	e.promote()
	v := e.view()
	require.EqualValues(t, 1, v.n)
	require.Equal(t, []string{g}, v.ring)

	got, _ := e.pick("c", 10)
	require.Equal(t, []string{"k2"}, payloads(got))
	k2 := got[0]
	require.Equal(t, g, k2.group)

	// active: one fresh message queued, replaced by newer ones
	e.publish(k("k3"))
	e.promote()
	v = e.view()
	require.EqualValues(t, 1, v.n)
	require.Equal(t, v.states[g].h, v.states[g].d, "d names the fresh message")
	require.Empty(t, v.ring, "cap 1: not served while k2 is active")
	e.publish(k("k4"))
	e.promote()
	e.publish(k("k5"))
	e.promote()
	v = e.view()
	require.EqualValues(t, 1, v.n, "each newer message replaces the queued one")
	got, _ = e.pick("c", 10)
	require.Empty(t, got)

	// a retry of the active message goes in front of the fresh one
	require.EqualValues(t, 1, e.nack(k2, 0, ""))
	v = e.view()
	require.EqualValues(t, 2, v.n)
	e.publish(k("k6"))
	e.promote()
	require.EqualValues(t, 2, e.view().n, "the fresh one is replaced, the retry kept")
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"k2"}, payloads(got))
	require.Equal(t, 2, got[0].attempt)
	e.ack(got...)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"k6"}, payloads(got))
	v = e.view()
	require.EqualValues(t, -1, v.states[g].d, "no fresh message queued")
	e.publish(k("k7"))
	e.promote()
	e.ack(got...)
	got, _ = e.pick("c", 10)
	require.Equal(t, []string{"k7"}, payloads(got))
	e.ack(got...)
	e.settled()
}

// Caps: a capped group gets at most one message per pick call, leaves the
// ring once its slots are taken and rejoins (at the back) when one is
// given back.
func TestFair_Caps(t *testing.T) {
	t.Run("cap 1", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{cap: 1})
		e.publish(slices.Concat(msgs("A", 3), msgs("B", 3), msgs("C", 3))...)
		e.promote()
		got, r := e.pick("c", 10)
		require.Equal(t, []string{"A1", "B1", "C1"}, payloads(got))
		require.False(t, r.More, "every group's slot is taken")
		require.Empty(t, e.view().ring)
		first := got
		got, _ = e.pick("c", 10)
		require.Empty(t, got)
		e.ack(first[1])
		require.Equal(t, []string{"B"}, e.view().ring)
		got, _ = e.pick("c", 10)
		require.Equal(t, []string{"B2"}, payloads(got))
		e.ack(first[2])
		e.ack(first[0])
		require.Equal(t, []string{"C", "A"}, e.view().ring)
		got, _ = e.pick("c", 10)
		require.Equal(t, []string{"C2", "A2"}, payloads(got))
	})
	t.Run("cap 2", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{cap: 2})
		e.publish(slices.Concat(msgs("A", 3), msgs("B", 3), msgs("C", 1))...)
		e.promote()
		got, r := e.pick("c", 10)
		require.Equal(t, []string{"A1", "B1", "C1"}, payloads(got), "one message per capped group per call")
		require.True(t, r.More)
		// The lap ended at A, moved to the back of the ring: B goes first.
		got, r = e.pick("c", 10)
		require.Equal(t, []string{"B2", "A2"}, payloads(got))
		require.False(t, r.More)
		require.Empty(t, e.view().ring)
		e.ack(got[1])
		got, _ = e.pick("c", 10)
		require.Equal(t, []string{"A3"}, payloads(got))
		require.Empty(t, e.view().ring, "A emptied")
	})
}

// The rate limiter (GCRA, n messages per period): a group takes a burst of
// n, then one every period/n; over its rate it sleeps in fwait, and the
// pick tells when the first sleeper wakes.
func TestFair_RateLimit(t *testing.T) {
	e := newFairEnv(t, fairPolicy{rate: "2/600"}) // emission interval 300 ms
	e.publish(slices.Concat(msgs("A", 5), msgs("B", 1))...)
	e.promote()
	start := e.nowMs()
	got, r := e.pick("c", 10)
	end := e.nowMs()
	require.Equal(t, []string{"A1", "B1", "A2"}, payloads(got), "a burst of 2")
	v := e.view()
	require.Contains(t, v.wait, "A")
	require.Empty(t, v.ring)
	require.False(t, r.More)
	wake := r.Wake.UnixMilli()
	require.GreaterOrEqual(t, wake, start+300, "A may take its next message 300 ms after its first")
	require.LessOrEqual(t, wake, end+300)
	require.EqualValues(t, wake, v.wait["A"])
	got, r = e.pick("c", 10)
	require.Empty(t, got, "asleep")
	require.Equal(t, wake, r.Wake.UnixMilli())

	// Then one message every 300 ms: each pick after the wake-up takes
	// one, and A sleeps 300 ms more.
	for round := range 3 {
		for e.nowMs() < wake {
			time.Sleep(time.Until(time.UnixMilli(wake)) + time.Millisecond)
		}
		got, r = e.pick("c", 10)
		require.Len(t, got, 1, "one message per emission interval")
		if round == 2 {
			break // A emptied
		}
		require.InDelta(t, wake+300, r.Wake.UnixMilli(), 1, "the next 300 ms later")
		wake = r.Wake.UnixMilli()
		if e.nowMs() < wake {
			got, _ = e.pick("c", 10)
			require.Empty(t, got, "asleep until then")
		}
	}
	got, r = e.pick("c", 10)
	require.Empty(t, got)
	require.True(t, r.Wake.IsZero(), "nothing asleep: A emptied")
	for _, id := range e.pendingOf("c") {
		e.ack(fairGot{id: id})
	}
}

// A rate-limited group holding nothing keeps its state only while its
// limiter has not caught up: once everything is settled and the period
// has passed, the consumer group's fair queues are gone (fair.lua's header:
// "the hash holds only active groups"; Inspector's ActiveGroups counts the
// states).
func TestFair_RateLimitedStateGoesOnceCaughtUp(t *testing.T) {
	e := newFairEnv(t, fairPolicy{rate: "1/1000"})
	e.publish(msgs("A", 1)...)
	e.promote()
	got, _ := e.pick("c", 10)
	require.Len(t, got, 1)
	e.ack(got...)
	require.Contains(t, e.view().states, "A", "acknowledged within A's emission interval: its state is kept for the limiter")
	time.Sleep(1100 * time.Millisecond)
	// What a subscription does next: its reads pick (nothing to pick).
	_, r := e.read("c", 10)
	_, _ = e.pick("c", 10)
	st, err := PartitionStats(e.ctx, e.c, e.sh)
	require.NoError(t, err)
	t.Logf("the read's pick says more = %v, wake = %v; ActiveGroups %d, Grouped %d", r.Pick.More, r.Pick.Wake, st.Groups[0].Active, st.Groups[0].Grouped)
	e.settled()
}

// A read whose pick moves nothing while groups are left in the ring (here
// rate-limited groups: the pick puts at most 4 × count of them to sleep
// per call) and that finds nothing to read: no error, nothing read, and
// the pick says to pick again.
func TestFair_ReadWhenThePickMovesNothing(t *testing.T) {
	e := newFairEnv(t, fairPolicy{rate: "1/60000"})
	var all []*fairMsg
	for _, g := range []string{"A", "B", "C", "D", "E"} {
		all = append(all, msgs(g, 2)...)
	}
	e.publish(all...)
	e.promote()
	got, _ := e.pick("c", 5)
	require.Equal(t, []string{"A1", "B1", "C1", "D1", "E1"}, payloads(got))
	require.Equal(t, []string{"A", "B", "C", "D", "E"}, e.view().ring, "each over its rate, not yet found so")
	r, err := e.tryRead("c", 1)
	require.NoError(t, err, "4 groups put to sleep, E left in the ring, nothing to read")
	require.Empty(t, r.Streams)
	require.True(t, r.Pick.More)
}

// High priority: a group's high-priority messages go before its others,
// and the groups with some (fprio) are served before the ring; a capped
// group joins fprio when its slot is given back.
func TestFair_HighPriority(t *testing.T) {
	t.Run("before the ring", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{})
		e.publish(slices.Concat(msgs("A", 3), msgs("B", 1))...)
		e.publish(&fairMsg{payload: "Bh", group: "B", high: true})
		e.publish(&fairMsg{payload: "Ah1", group: "A", high: true}, &fairMsg{payload: "Ah2", group: "A", high: true})
		e.promote()
		v := e.view()
		require.Equal(t, []string{"B", "A"}, v.prio)
		require.Equal(t, []string{"A", "B"}, v.ring)
		var order []string
		for range 10 {
			got, r := e.pick("c", 1)
			order = append(order, payloads(got)...)
			if !r.More {
				break
			}
		}
		require.Equal(t, []string{"Bh", "Ah1", "Ah2", "A1", "B1", "A2", "A3"}, order)
		for _, id := range e.pendingOf("c") {
			e.ack(fairGot{id: id})
		}
		e.settled()
	})
	t.Run("capped", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{cap: 1})
		e.publish(msgs("A", 2)...)
		e.promote()
		got, _ := e.pick("c", 10)
		require.Equal(t, []string{"A1"}, payloads(got))
		e.publish(&fairMsg{payload: "Ah", group: "A", high: true})
		e.promote()
		v := e.view()
		require.Empty(t, v.prio, "A's slot is taken")
		e.ack(got...)
		v = e.view()
		require.Equal(t, []string{"A"}, v.prio)
		got, _ = e.pick("c", 10)
		require.Equal(t, []string{"Ah"}, payloads(got))
		e.ack(got...)
		got, _ = e.pick("c", 10)
		require.Equal(t, []string{"A2"}, payloads(got))
		e.ack(got...)
		e.settled()
	})
	// fair_pick ends its ring loop at the first capped group it served in
	// the call ("a full lap"), but a group served from fprio was not served
	// by the ring: meeting it at the head of the ring is no full lap, and B
	// and C, free to serve, wait for the next call.
	t.Run("a capped group served first does not end the lap", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{cap: 1})
		e.publish(slices.Concat(msgs("A", 2), msgs("B", 2), msgs("C", 2))...)
		e.publish(&fairMsg{payload: "Ah", group: "A", high: true})
		e.promote()
		v := e.view()
		require.Equal(t, []string{"A", "B", "C"}, v.ring)
		require.Equal(t, []string{"A"}, v.prio)
		got, _ := e.pick("c", 10)
		require.Equal(t, []string{"Ah", "B1", "C1"}, payloads(got), "count 10, three groups free to serve")
	})
	t.Run("keep last if active ignores priority", func(t *testing.T) {
		e := newFairEnv(t, fairPolicy{})
		e.publish(&fairMsg{payload: "k1", key: "k", high: true})
		e.promote()
		v := e.view()
		require.Empty(t, v.prio)
		require.Equal(t, []string{"\x01k"}, v.ring)
		got, _ := e.pick("c", 10)
		require.Equal(t, []string{"k1"}, payloads(got))
		e.ack(got...)
		e.settled()
	})
}

// Random steps on small numbers of groups, for each combination of cap and
// rate limit, the invariants checked after each; then everything is
// settled. Every message is delivered; within a group and priority class
// the first deliveries follow the publish order; the keep-last-if-active
// groups deliver their last message.
func TestFair_RandomSteps(t *testing.T) {
	steps := 400
	if testing.Short() {
		steps = 80
	}
	for _, p := range []fairPolicy{
		{}, {cap: 1}, {cap: 3},
		{rate: "3/100"}, {cap: 1, rate: "2/60"},
	} {
		p.vis, p.max, p.backoff = 80, 4, "0,20"
		t.Run(fmt.Sprintf("cap %d rate %q", p.cap, p.rate), func(t *testing.T) {
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewSource(seed))
			e := newFairEnv(t, p)
			groups := []string{"a", "b", "c", "d", "e"}
			keys := []string{"k1", "k2"}
			consumers := []string{"c1", "c2"}

			published := map[string]*fairMsg{} // UUID -> message
			var order []*fairMsg               // publish order
			lastOfKey := map[string]string{}   // key -> UUID of the last published
			delivered := map[string]bool{}     // UUIDs delivered at least once
			acked := map[string]bool{}
			var firstDeliveries []string // UUIDs in order of first delivery
			byPayload := map[string]string{}

			note := func(got []fairGot) {
				for _, g := range got {
					id := byPayload[g.payload]
					require.NotEmpty(t, id, "unknown message %q", g.payload)
					m := published[id]
					require.Equal(t, m.fairGroup(), g.group, "message %q comes with its group", g.payload)
					if !delivered[id] {
						delivered[id] = true
						firstDeliveries = append(firstDeliveries, id)
					}
				}
			}
			held := func(consumer string) []fairGot {
				var got []fairGot
				for _, id := range e.pendingOf(consumer) {
					es, err := e.c.XRange(e.ctx, e.sh.Redelivery(e.cg), id, id).Result()
					require.NoError(t, err)
					got = append(got, e.entries([]Batch{{Stream: e.sh.Redelivery(e.cg), Entries: batches([]redis.XStream{{Messages: es}})[0].Entries}})...)
				}
				return got
			}
			n := 0
			did := map[string]int{} // steps that changed something, by kind
			for range steps {
				switch op := rng.Intn(100); {
				case op < 20:
					var batch []*fairMsg
					inCall := map[string]bool{} // a Publish call's messages never share a business key
					for range 1 + rng.Intn(3) {
						n++
						m := &fairMsg{payload: "m" + strconv.Itoa(n), high: rng.Intn(5) == 0}
						if k := keys[rng.Intn(len(keys))]; rng.Intn(8) == 0 && !inCall[k] {
							m.key = k
							inCall[k] = true
						} else {
							m.group = groups[rng.Intn(len(groups))]
						}
						batch = append(batch, m)
					}
					e.publish(batch...)
					did["publish"]++
					for _, m := range batch {
						published[m.uuid] = m
						byPayload[m.payload] = m.uuid
						order = append(order, m)
						if m.key != "" {
							lastOfKey[m.key] = m.uuid
						}
					}
				case op < 32:
					e.promote()
				case op < 47:
					got, r := e.pick(consumers[rng.Intn(2)], 1+rng.Intn(4))
					note(got)
					if len(got) > 0 {
						did["pick"]++
					}
					if !r.Wake.IsZero() {
						did["asleep"]++
					}
				case op < 55:
					r, err := e.tryRead(consumers[rng.Intn(2)], 1+rng.Intn(4))
					require.NoError(t, err)
					note(e.entries(r.Streams))
					if len(r.Streams) > 0 {
						did["read"]++
					}
				case op < 70:
					got := held(consumers[rng.Intn(2)])
					rng.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
					if len(got) > 0 {
						got = got[:1+rng.Intn(len(got))]
						e.ack(got...)
						did["ack"]++
						for _, g := range got {
							acked[byPayload[g.payload]] = true
						}
					}
				case op < 82:
					got := held(consumers[rng.Intn(2)])
					if len(got) > 0 {
						g := got[rng.Intn(len(got))]
						switch rng.Intn(3) {
						case 0:
							e.nack(g, 0, "")
							did["nack"]++
						case 1:
							e.nack(g, time.Duration(10+rng.Intn(30))*time.Millisecond, "")
							did["nack later"]++
						default:
							e.nack(g, 0, "failed")
							did["bury"]++
						}
					}
				case op < 86:
					if e.release(consumers[rng.Intn(2)], 1+rng.Intn(3)) > 0 {
						did["release"]++
					}
				case op < 90:
					if r := e.reclaim(1 + rng.Intn(4)); r.Requeued+r.Buried > 0 {
						did["reclaim"]++
					}
				case op < 94:
					if e.requeue(1+rng.Intn(3)) > 0 {
						did["requeue"]++
					}
				default:
					time.Sleep(time.Duration(5+rng.Intn(40)) * time.Millisecond)
				}
			}

			t.Logf("steps that changed something: %v", did)

			// Settle: deliver and acknowledge everything, the dead letters too.
			deadline := time.Now().Add(20 * time.Second)
			for {
				require.True(t, time.Now().Before(deadline), "not settled after 20 s")
				e.promote()
				for n := 1; n > 0; {
					n = e.requeue(100)
				}
				got, r := e.pick("c1", 50)
				note(got)
				for _, c := range consumers {
					if h := held(c); len(h) > 0 {
						e.ack(h...)
						for _, g := range h {
							acked[byPayload[g.payload]] = true
						}
					}
				}
				left, err := e.c.Exists(e.ctx, e.sh.Waiting(), e.sh.Retry(e.cg), e.sh.fairRing(e.cg), e.sh.fairPrio(e.cg), e.sh.fairWait(e.cg)).Result()
				require.NoError(t, err)
				entries, err := e.c.XLen(e.ctx, e.sh.Redelivery(e.cg)).Result()
				require.NoError(t, err)
				dead, err := e.c.XLen(e.ctx, e.sh.Dead(e.cg)).Result()
				require.NoError(t, err)
				if left == 0 && entries == 0 && dead == 0 && len(got) == 0 && !r.More {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if p.rate == "" {
				e.settled()
			} else if v := e.view(); v.exists {
				for g, s := range v.states {
					require.Zero(t, s.f+s.queued(), "group %q still holds messages", g)
				}
			}

			for _, m := range order {
				if m.key == "" || lastOfKey[m.key] == m.uuid {
					require.True(t, acked[m.uuid], "message %s (group %q) was never delivered and acknowledged", m.payload, m.fairGroup())
				}
			}
			// first deliveries in publish order within a group and class
			pos := map[string]int{}
			for i, m := range order {
				pos[m.uuid] = i
			}
			lastPos := map[string]int{}
			for _, id := range firstDeliveries {
				m := published[id]
				if m.key != "" {
					continue
				}
				class := m.group + strconv.FormatBool(m.high)
				if p, ok := lastPos[class]; ok {
					require.Greater(t, pos[id], p, "group %q: %s delivered first after a message published later", m.group, m.payload)
				}
				lastPos[class] = pos[id]
			}
		})
	}
}
