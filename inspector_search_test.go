package redisdelay_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// searchAll pages through SearchWaiting with limit and returns the UUIDs
// found, failing on a UUID found twice.
func searchAll(t *testing.T, insp *redisdelay.Inspector, tp string, f redisdelay.Filter, limit int) (ids []string, calls int) {
	t.Helper()
	cursor := ""
	for {
		page, next, err := insp.SearchWaiting(context.Background(), tp, f, cursor, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), limit)
		calls++
		for _, w := range page {
			require.NotContains(t, ids, w.Message.UUID, "found twice")
			ids = append(ids, w.Message.UUID)
		}
		if next == "" {
			return ids, calls
		}
		cursor = next
		require.Less(t, calls, 1000, "the cursor does not advance")
	}
}

// searchFixture publishes, to a topic no scheduler serves (so nothing
// moves), messages of tenants a and b, near and in the far tier, some
// with business keys. It returns the UUIDs of each tenant and of the far
// ones.
func searchFixture(t *testing.T, pub *redisdelay.Publisher, tp string) (byTenant map[string][]string, far []string) {
	t.Helper()
	byTenant = map[string][]string{}
	var msgs []*message.Message
	for i := range 40 {
		d := time.Second // near
		if i%2 == 1 {
			d = time.Hour + time.Duration(i)*time.Second // far, over several buckets
		}
		msg := delayed(delay.For(d), "p"+strconv.Itoa(i))
		tenant := []string{"a", "b"}[i%4/2]
		msg.Metadata.Set("tenant", tenant)
		if i%5 == 0 {
			msg.Metadata.Set(redisdelay.BusinessKey, "order:"+tenant+":"+strconv.Itoa(i))
		}
		if i%2 == 1 {
			far = append(far, msg.UUID) // keyed or not (issue 37)
		}
		byTenant[tenant] = append(byTenant[tenant], msg.UUID)
		msgs = append(msgs, msg)
	}
	require.NoError(t, pub.Publish(tp, msgs...))
	return byTenant, far
}

func TestSearchWaiting_Filters(t *testing.T) {
	t.Parallel()
	env := setup(t)
	start := time.Now()
	byTenant, far := searchFixture(t, env.pub, env.topic)
	buckets, inFar := farKeys(t, env.topic)
	require.Positive(t, buckets)
	require.EqualValues(t, len(far), inFar, "the fixture's far messages are in the far tier")

	all, _ := searchAll(t, env.insp, env.topic, redisdelay.Filter{}, 100)
	assert.Len(t, all, 40, "the zero filter finds every message, both tiers")

	for _, limit := range []int{1, 3, 100} {
		got, _ := searchAll(t, env.insp, env.topic, redisdelay.Filter{Metadata: map[string]string{"tenant": "a"}}, limit)
		assert.ElementsMatch(t, byTenant["a"], got, "tenant a, %d per page", limit)
	}
	got, _ := searchAll(t, env.insp, env.topic, redisdelay.Filter{Metadata: map[string]string{"tenant": "a", "other": "x"}}, 100)
	assert.Empty(t, got, "every metadata criterion must hold")

	got, _ = searchAll(t, env.insp, env.topic, redisdelay.Filter{BusinessKeyPrefix: "order:b:"}, 100)
	assert.Len(t, got, 4, "business keys order:b:10, 15, 30, 35")
	got, _ = searchAll(t, env.insp, env.topic, redisdelay.Filter{BusinessKeyPrefix: "order:"}, 100)
	assert.Len(t, got, 8)

	// Due ranges: the near ones are due within seconds, the far ones in an hour.
	got, _ = searchAll(t, env.insp, env.topic, redisdelay.Filter{To: start.Add(time.Minute)}, 100)
	assert.Len(t, got, 20, "due within a minute: the near half")
	got, _ = searchAll(t, env.insp, env.topic, redisdelay.Filter{From: start.Add(time.Minute)}, 100)
	assert.Len(t, got, 20, "due later: the far half (and the keyed ones kept near)")
	got, _ = searchAll(t, env.insp, env.topic, redisdelay.Filter{From: start.Add(time.Hour + 10*time.Second), To: start.Add(time.Hour + 20*time.Second),
		Metadata: map[string]string{"tenant": "b"}}, 100)
	for _, id := range got {
		w, ok, err := env.insp.FindWaiting(context.Background(), env.topic, id)
		require.NoError(t, err)
		require.True(t, ok)
		assert.False(t, w.Due.Before(start.Add(time.Hour+10*time.Second)))
		assert.True(t, w.Due.Before(start.Add(time.Hour+21*time.Second)))
		assert.Equal(t, "b", w.Message.Metadata.Get("tenant"))
	}
	assert.Len(t, got, 3, "i = 11, 15 (keyed, near) and 19: tenant b, due an hour and 10-20 s ahead")
}

// A call reads at most 10,000 stored messages: a filter matching one
// message at the end of 25,000 takes three calls, the first two empty.
func TestSearchWaiting_BoundedPerCall(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const n = 25000
	publishN(t, env.pub, env.topic, n, func(i int) *message.Message {
		msg := delayed(delay.For(time.Hour+time.Duration(i)*time.Millisecond), "x")
		if i == n-1 {
			msg.Metadata.Set("needle", "1")
		}
		return msg
	})
	f := redisdelay.Filter{Metadata: map[string]string{"needle": "1"}}
	var pages []int
	cursor := ""
	for {
		page, next, err := env.insp.SearchWaiting(context.Background(), env.topic, f, cursor, 10)
		require.NoError(t, err)
		pages = append(pages, len(page))
		if next == "" {
			break
		}
		cursor = next
	}
	assert.Equal(t, []int{0, 0, 1}, pages, "10,000 read per call")
}

// A topic of several partitions is searched partition by partition.
func TestSearchWaiting_Partitions(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, 3)
	byTenant, _ := searchFixture(t, pub, env.topic)
	got, calls := searchAll(t, env.insp, env.topic, redisdelay.Filter{Metadata: map[string]string{"tenant": "b"}}, 2)
	assert.ElementsMatch(t, byTenant["b"], got)
	assert.GreaterOrEqual(t, calls, 10)
}

func TestSearch_BadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	require.NoError(t, env.pub.Publish(env.topic, delayed(delay.For(time.Hour), "x")))
	now := time.Now()
	for _, c := range []struct {
		name   string
		f      redisdelay.Filter
		cursor string
		limit  int
		want   string
	}{
		{"limit", redisdelay.Filter{}, "", 0, "limit is 0: use 1 to 10000"},
		{"range", redisdelay.Filter{From: now, To: now}, "", 10, "Filter.To (" + now.Format(time.RFC3339Nano) + ") is not after Filter.From"},
		{"key", redisdelay.Filter{Metadata: map[string]string{"": "x"}}, "", 10, "Filter.Metadata has an empty key"},
		{"cursor", redisdelay.Filter{}, "nonsense", 10, `cursor "nonsense" is not one a search or bulk action returned`},
		{"cursor kind", redisdelay.Filter{}, "0:x:1:2", 10, `cursor "0:x:1:2" is not one`},
		{"cursor score", redisdelay.Filter{}, "0:n:NaN:x", 10, `cursor "0:n:NaN:x" is not one`},
		{"cursor partition", redisdelay.Filter{}, "3:f:1:2", 10, `cursor "3:f:1:2" names partition 3, but topic "` + env.topic + `" has 1`},
		{"bulk cursor", redisdelay.Filter{}, "bulk:0:near:12", 10, `cursor "bulk:0:near:12" is a bulk action's (BulkOptions.Cursor), not a search's`},
	} {
		_, _, err := env.insp.SearchWaiting(ctx, env.topic, c.f, c.cursor, c.limit)
		if assert.Error(t, err, c.name) {
			assert.Contains(t, err.Error(), c.want, c.name)
		}
	}
	_, _, err := env.insp.SearchWaiting(ctx, "", redisdelay.Filter{}, "", 10)
	assert.ErrorIs(t, err, redisdelay.ErrInvalidTopic)
	_, _, err = env.insp.SearchDeadLetters(ctx, env.topic, "", redisdelay.Filter{}, "", 10)
	assert.ErrorIs(t, err, redisdelay.ErrInvalidName)
	_, _, err = env.insp.SearchDeadLetters(ctx, env.topic, "g", redisdelay.Filter{}, "5/1-1", 10)
	assert.ErrorContains(t, err, `cursor "5/1-1" is not one`)

	// Bulk actions refuse the zero filter unless All is set.
	_, err = env.insp.CancelWhere(ctx, env.topic, redisdelay.Filter{}, redisdelay.BulkOptions{})
	assert.ErrorIs(t, err, redisdelay.ErrEmptyFilter)
	_, err = env.insp.RescheduleWhere(ctx, env.topic, redisdelay.Filter{}, now, redisdelay.BulkOptions{DryRun: true})
	assert.ErrorIs(t, err, redisdelay.ErrEmptyFilter, "even in a dry run")
	_, err = env.insp.RequeueDeadLettersWhere(ctx, env.topic, "g", redisdelay.Filter{}, redisdelay.BulkOptions{})
	assert.ErrorIs(t, err, redisdelay.ErrEmptyFilter)
	_, err = env.insp.DeleteDeadLettersWhere(ctx, env.topic, "g", redisdelay.Filter{}, redisdelay.BulkOptions{})
	assert.ErrorIs(t, err, redisdelay.ErrEmptyFilter)
	_, err = env.insp.RescheduleWhere(ctx, env.topic, redisdelay.Filter{BusinessKeyPrefix: "k"}, time.Time{}, redisdelay.BulkOptions{})
	assert.ErrorIs(t, err, redisdelay.ErrInvalidDelay)
	assert.ErrorContains(t, err, "the due time is the zero time.Time")
	_, err = env.insp.RescheduleWhere(ctx, env.topic, redisdelay.Filter{BusinessKeyPrefix: "k"}, now.Add(101*365*24*time.Hour), redisdelay.BulkOptions{})
	assert.ErrorContains(t, err, "beyond the limit of 100 years")
	st := topicStats(t, env.insp, env.topic)
	assert.EqualValues(t, 1, st.Waiting, "nothing was touched")
}

func TestSearch_CancelWhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	byTenant, _ := searchFixture(t, env.pub, env.topic)
	a := redisdelay.Filter{Metadata: map[string]string{"tenant": "a"}}

	p, err := env.insp.CancelWhere(ctx, env.topic, a, redisdelay.BulkOptions{DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, redisdelay.BulkProgress{Scanned: 40, Matched: 20}, p, "a dry run counts")
	assert.EqualValues(t, 40, topicStats(t, env.insp, env.topic).Waiting, "and changes nothing")

	var reports []redisdelay.BulkProgress
	p, err = env.insp.CancelWhere(ctx, env.topic, a, redisdelay.BulkOptions{Progress: func(p redisdelay.BulkProgress) { reports = append(reports, p) }})
	require.NoError(t, err)
	assert.Equal(t, redisdelay.BulkProgress{Scanned: 40, Matched: 20, Done: 20}, p)
	require.NotEmpty(t, reports)
	assert.Equal(t, p, reports[len(reports)-1])
	left, _ := searchAll(t, env.insp, env.topic, redisdelay.Filter{}, 100)
	assert.ElementsMatch(t, byTenant["b"], left, "only tenant b waits, near and far")
	for _, id := range byTenant["a"] {
		_, ok, err := env.insp.FindWaiting(ctx, env.topic, id)
		require.NoError(t, err)
		assert.False(t, ok)
	}
	_, inFar := farKeys(t, env.topic)
	assert.EqualValues(t, 10, inFar, "the far counter follows")

	p, err = env.insp.CancelWhere(ctx, env.topic, redisdelay.Filter{}, redisdelay.BulkOptions{All: true})
	require.NoError(t, err)
	assert.EqualValues(t, 20, p.Done, "All cancels the rest")
	assert.Zero(t, topicStats(t, env.insp, env.topic).Waiting)
}

// A run stopped (here by its context, after the first batch) resumes from
// the cursor of its last report, and nothing is acted on twice.
func TestSearch_CancelWhereResumes(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const n = 3500
	publishN(t, env.pub, env.topic, n, func(i int) *message.Message {
		msg := delayed(delay.For(time.Hour+time.Duration(i)*10*time.Millisecond), "x")
		msg.Metadata.Set("even", strconv.FormatBool(i%2 == 0))
		return msg
	})
	f := redisdelay.Filter{Metadata: map[string]string{"even": "true"}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, err := env.insp.CancelWhere(ctx, env.topic, f, redisdelay.BulkOptions{Cursor: "0:f:0:0"})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "0:f:0:0", p.Cursor, "failed before reading: the cursor it was given")
	ctx, cancel = context.WithCancel(context.Background())
	var last redisdelay.BulkProgress
	p, err = env.insp.CancelWhere(ctx, env.topic, f, redisdelay.BulkOptions{Progress: func(p redisdelay.BulkProgress) {
		last = p
		cancel()
	}})
	require.ErrorIs(t, err, context.Canceled)
	require.NotEmpty(t, p.Cursor)
	assert.Equal(t, last, p)
	assert.EqualValues(t, 1000, p.Scanned, "one batch")
	// Which 1,000 the batch read depends on the tiers: a message the
	// publisher placed by a clock Redis's passed by more than the tests'
	// far slack (250 ms; under -race on 2 busy cores) waits in the waiting
	// set, read after the far tier. So not exactly half of them are even.
	assert.Equal(t, p.Matched, p.Done)
	assert.Greater(t, p.Done, int64(0))

	q, err := env.insp.CancelWhere(context.Background(), env.topic, f, redisdelay.BulkOptions{Cursor: p.Cursor})
	require.NoError(t, err)
	assert.EqualValues(t, n/2-p.Done, q.Done, "the rest")
	assert.Equal(t, q.Matched, q.Done)
	assert.EqualValues(t, n/2, topicStats(t, env.insp, env.topic).Waiting)
	left, _ := searchAll(t, env.insp, env.topic, f, 100)
	assert.Empty(t, left)
}

func TestSearch_RescheduleWhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	byTenant, _ := searchFixture(t, env.pub, env.topic)
	due := time.Now().Add(30 * time.Minute).Truncate(time.Millisecond)
	b := redisdelay.Filter{Metadata: map[string]string{"tenant": "b"}}
	p, err := env.insp.RescheduleWhere(ctx, env.topic, b, due, redisdelay.BulkOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 20, p.Done)
	assert.Equal(t, p.Matched, p.Done, "each once, though moved ahead of the run")
	for _, id := range byTenant["b"] {
		w, ok, err := env.insp.FindWaiting(ctx, env.topic, id)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, due.UnixMilli(), w.Due.UnixMilli())
	}
	for _, id := range byTenant["a"] {
		w, ok, err := env.insp.FindWaiting(ctx, env.topic, id)
		require.NoError(t, err)
		require.True(t, ok)
		assert.NotEqual(t, due.UnixMilli(), w.Due.UnixMilli(), "tenant a untouched")
	}
	p, err = env.insp.RescheduleWhere(ctx, env.topic, b, due, redisdelay.BulkOptions{})
	require.NoError(t, err)
	assert.Zero(t, p.Matched, "already due then")
}

// Dead letters: searched by metadata and time of death, requeued and
// deleted by filter.
func TestSearch_DeadLettersWhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 1})
	ch := subscribe(t, sub, env.topic)
	var msgs []*message.Message
	for i := range 12 {
		msg := newMessage(strconv.Itoa(i))
		msg.Metadata.Set("tenant", []string{"a", "b", "c"}[i%3])
		msgs = append(msgs, msg)
	}
	require.NoError(t, env.pub.Publish(env.topic, msgs...))
	for range msgs {
		receive(t, ch, 5*time.Second).Nack()
	}
	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 12, 5*time.Second)

	search := func(f redisdelay.Filter) (ids []string) {
		cursor := ""
		for {
			page, next, err := env.insp.SearchDeadLetters(ctx, env.topic, "g", f, cursor, 2)
			require.NoError(t, err)
			for _, d := range page {
				ids = append(ids, d.Message.UUID)
			}
			if next == "" {
				return ids
			}
			cursor = next
		}
	}
	tenant := func(name string) redisdelay.Filter {
		return redisdelay.Filter{Metadata: map[string]string{"tenant": name}}
	}
	assert.Equal(t, []string{msgs[0].UUID, msgs[3].UUID, msgs[6].UUID, msgs[9].UUID}, search(tenant("a")), "oldest first")
	assert.Len(t, search(redisdelay.Filter{}), 12)
	assert.Len(t, search(redisdelay.Filter{From: dead[0].Time, To: dead[11].Time.Add(time.Millisecond)}), 12, "died in the range")
	assert.Empty(t, search(redisdelay.Filter{From: dead[11].Time.Add(time.Millisecond)}), "none died later")

	p, err := env.insp.DeleteDeadLettersWhere(ctx, env.topic, "g", tenant("c"), redisdelay.BulkOptions{DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, redisdelay.BulkProgress{Scanned: 12, Matched: 4}, p)
	p, err = env.insp.DeleteDeadLettersWhere(ctx, env.topic, "g", tenant("c"), redisdelay.BulkOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 4, p.Done)
	assert.Empty(t, search(tenant("c")))

	p, err = env.insp.RequeueDeadLettersWhere(ctx, env.topic, "g", tenant("b"), redisdelay.BulkOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 4, p.Done)
	var again []string
	for range 4 {
		msg := receive(t, ch, 5*time.Second)
		again = append(again, msg.UUID)
		assert.Equal(t, "b", msg.Metadata.Get("tenant"))
		msg.Ack()
	}
	assert.ElementsMatch(t, []string{msgs[1].UUID, msgs[4].UUID, msgs[7].UUID, msgs[10].UUID}, again)
	assert.Equal(t, search(tenant("a")), search(redisdelay.Filter{}), "tenant a is left")
}

// Dead letters of a topic of two partitions: the search and the bulk
// actions read both.
func TestSearch_DeadLettersWherePartitionsAndErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	pub := newPartitionedPublisher(t, env.client, 2)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 1, Partitions: 2})
	ch := subscribe(t, sub, env.topic)
	for i := range 10 {
		msg := newMessage(strconv.Itoa(i))
		msg.Metadata.Set("n", fmt.Sprint(i%2))
		require.NoError(t, pub.Publish(env.topic, msg))
	}
	for range 10 {
		receive(t, ch, 5*time.Second).Nack()
	}
	awaitDeadLetters(t, env.insp, env.topic, "g", 10, 5*time.Second)
	var found []redisdelay.DeadLetter
	cursor := ""
	for {
		page, next, err := env.insp.SearchDeadLetters(ctx, env.topic, "g", redisdelay.Filter{Metadata: map[string]string{"n": "1"}}, cursor, 1)
		require.NoError(t, err)
		found = append(found, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Len(t, found, 5)
	ids := make([]string, len(found))
	for k, d := range found {
		ids[k] = d.ID
	}
	assert.Len(t, slices.Compact(slices.Clone(ids)), 5)
	p, err := env.insp.DeleteDeadLettersWhere(ctx, env.topic, "g", redisdelay.Filter{}, redisdelay.BulkOptions{All: true})
	require.NoError(t, err)
	assert.EqualValues(t, 10, p.Done, "both partitions")
	_, err = env.insp.DeleteDeadLettersWhere(ctx, env.topic, "g", redisdelay.Filter{Metadata: map[string]string{"n": "1"}}, redisdelay.BulkOptions{Cursor: "bad"})
	assert.ErrorContains(t, err, `cursor "bad" is not one`)
}

// The cost of a search: stored messages read per second in a full pass
// over 100,000 waiting messages (100-byte payloads, a metadata key each),
// near (the waiting set) and far (due in a day: the far tier), and of a
// CancelWhere of half of them.
//
//	go test -run '^$' -bench 'BenchmarkSearchWaiting|BenchmarkCancelWhere' -benchtime 3x .
func BenchmarkSearchWaiting(b *testing.B) {
	for _, tier := range []struct {
		name string
		d    time.Duration
	}{{"near", time.Second}, {"far", 24 * time.Hour}} {
		b.Run(tier.name, func(b *testing.B) {
			client := newClient(b)
			tp := topic()
			insp := newInspector(b, client)
			n := searchBacklog(b, newPublisher(b, client), tp, tier.d)
			f := redisdelay.Filter{Metadata: map[string]string{"tenant": "none"}}
			b.ResetTimer()
			for range b.N {
				calls, cursor := 0, ""
				for {
					_, next, err := insp.SearchWaiting(context.Background(), tp, f, cursor, 100)
					require.NoError(b, err)
					calls++
					if cursor = next; cursor == "" {
						break
					}
				}
				require.Equal(b, n/10000+1, calls)
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

func BenchmarkCancelWhere(b *testing.B) {
	for _, tier := range []struct {
		name string
		d    time.Duration
	}{{"near", time.Second}, {"far", 24 * time.Hour}} {
		b.Run(tier.name, func(b *testing.B) {
			client := newClient(b)
			insp := newInspector(b, client)
			var cancelled int64
			for range b.N {
				b.StopTimer()
				tp := topic()
				searchBacklog(b, newPublisher(b, client), tp, tier.d)
				b.StartTimer()
				p, err := insp.CancelWhere(context.Background(), tp, redisdelay.Filter{Metadata: map[string]string{"tenant": "a"}}, redisdelay.BulkOptions{})
				require.NoError(b, err)
				cancelled += p.Done
			}
			b.ReportMetric(float64(cancelled)/b.Elapsed().Seconds(), "cancels/s")
		})
	}
}

// searchBacklog publishes 100,000 messages due in about d, tenants a and b
// alternating, and returns how many: a second apart is near (the test
// binary's far tier starts about 2.5 s ahead), a day far.
func searchBacklog(b *testing.B, pub *redisdelay.Publisher, tp string, d time.Duration) int {
	b.Helper()
	const n = 100000
	payload := make([]byte, 100)
	publishN(b, pub, tp, n, func(i int) *message.Message {
		msg := message.NewMessage(watermill.NewUUID(), payload)
		msg.Metadata.Set("tenant", []string{"a", "b"}[i%2])
		delay.Message(msg, delay.For(d+time.Duration(i)*5*time.Microsecond))
		return msg
	})
	return n
}

// A To bound inside a millisecond keeps what is due (or died) in that
// millisecond before it: due times are whole milliseconds.
func TestSearch_ToWithinAMillisecond(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	msg := delayed(delay.For(time.Second), "near")
	require.NoError(t, env.pub.Publish(env.topic, msg))
	w, ok, err := env.insp.FindWaiting(ctx, env.topic, msg.UUID)
	require.NoError(t, err)
	require.True(t, ok)
	got, _ := searchAll(t, env.insp, env.topic, redisdelay.Filter{To: w.Due.Add(500 * time.Microsecond)}, 10)
	assert.Equal(t, []string{msg.UUID}, got)
	got, _ = searchAll(t, env.insp, env.topic, redisdelay.Filter{To: w.Due}, 10)
	assert.Empty(t, got, "To is exclusive")

	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 1})
	ch := subscribe(t, sub, env.topic)
	require.NoError(t, env.pub.Publish(env.topic, newMessage("dies")))
	receive(t, ch, 5*time.Second).Nack()
	dead := awaitDeadLetters(t, env.insp, env.topic, "g", 1, 5*time.Second)
	page, _, err := env.insp.SearchDeadLetters(ctx, env.topic, "g", redisdelay.Filter{To: dead[0].Time.Add(500 * time.Microsecond)}, "", 10)
	require.NoError(t, err)
	assert.Len(t, page, 1)
}

// A bulk action on dead letters acts on those that died before it
// started: one requeued and dead again during the run is not met again.
func TestSearch_DeadLettersWhereOnlyThoseDeadAtTheStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", MaxAttempts: 1})
	ch := subscribe(t, sub, env.topic)
	nackAll := func(n int) {
		for range n {
			receive(t, ch, 5*time.Second).Nack()
		}
	}
	const n = 1200 // two batches
	publishN(t, env.pub, env.topic, n, func(int) *message.Message { return newMessage("x") })
	nackAll(n)
	require.Eventually(t, func() bool { return groupStats(t, env.insp, env.topic, "g").Dead == n }, 20*time.Second, 20*time.Millisecond)
	late := newMessage("late")
	p, err := env.insp.DeleteDeadLettersWhere(ctx, env.topic, "g", redisdelay.Filter{}, redisdelay.BulkOptions{All: true, Progress: func(p redisdelay.BulkProgress) {
		if p.Cursor != "" && p.Done == 1000 {
			// between the batches: a letter dies after the run started
			require.NoError(t, env.pub.Publish(env.topic, late))
			nackAll(1)
			require.Eventually(t, func() bool { return groupStats(t, env.insp, env.topic, "g").Dead == n-1000+1 }, 5*time.Second, 10*time.Millisecond)
		}
	}})
	require.NoError(t, err)
	assert.EqualValues(t, n, p.Done)
	left, _, err := env.insp.SearchDeadLetters(ctx, env.topic, "g", redisdelay.Filter{}, "", 10)
	require.NoError(t, err)
	require.Len(t, left, 1)
	assert.Equal(t, late.UUID, left[0].Message.UUID)
}
