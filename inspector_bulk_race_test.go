package redisdelay_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// The bulk actions on waiting messages against what moves messages while
// they run: the scheduler unpacking far buckets into the waiting set, far
// pulls and reschedules by others, promotions and cancels. Every race is
// forced at a chosen moment (between two batches, or between a cursor and
// its resume) through export_test.go's hooks, so each run meets it.

// bulkAction is CancelWhere or RescheduleWhere, with how to tell that it
// acted on a message.
type bulkAction struct {
	name string
	run  func(ctx context.Context, insp *redisdelay.Inspector, tp string, f redisdelay.Filter, o redisdelay.BulkOptions) (redisdelay.BulkProgress, error)
	// done reports whether the action was done on the waiting message
	// uuid; gone whether it waits no more.
	done func(t *testing.T, insp *redisdelay.Inspector, tp, uuid string) (done, gone bool)
}

// bulkTarget is RescheduleWhere's due time in these tests.
var bulkTarget = time.Now().Add(3 * time.Hour).Truncate(time.Millisecond)

var bulkActions = []bulkAction{
	{
		name: "cancel",
		run: func(ctx context.Context, insp *redisdelay.Inspector, tp string, f redisdelay.Filter, o redisdelay.BulkOptions) (redisdelay.BulkProgress, error) {
			return insp.CancelWhere(ctx, tp, f, o)
		},
		done: func(t *testing.T, insp *redisdelay.Inspector, tp, uuid string) (bool, bool) {
			_, ok, err := insp.FindWaiting(context.Background(), tp, uuid)
			require.NoError(t, err)
			return !ok, !ok
		},
	},
	{
		name: "reschedule",
		run: func(ctx context.Context, insp *redisdelay.Inspector, tp string, f redisdelay.Filter, o redisdelay.BulkOptions) (redisdelay.BulkProgress, error) {
			return insp.RescheduleWhere(ctx, tp, f, bulkTarget, o)
		},
		done: func(t *testing.T, insp *redisdelay.Inspector, tp, uuid string) (bool, bool) {
			w, ok, err := insp.FindWaiting(context.Background(), tp, uuid)
			require.NoError(t, err)
			return ok && w.Due.UnixMilli() == bulkTarget.UnixMilli(), !ok
		},
	},
}

// bulkRaceFixture publishes n messages to tp, tenants a and b alternating,
// due from an hour ahead 10 ms apart: all in the far tier (no scheduler
// serves the topic, so nothing moves but what a test moves). With keyed,
// each has a business key, which keeps it in the waiting set. It returns
// the UUIDs of tenant a and of tenant b.
func bulkRaceFixture(t *testing.T, pub *redisdelay.Publisher, tp string, n int, keyed bool) (a, b []string) {
	t.Helper()
	publishN(t, pub, tp, n, func(i int) *message.Message {
		msg := delayed(delay.For(time.Hour+time.Duration(i)*10*time.Millisecond), "x")
		tenant := []string{"a", "b"}[i%2]
		msg.Metadata.Set("tenant", tenant)
		if keyed {
			msg.Metadata.Set(redisdelay.BusinessKey, "k"+strconv.Itoa(i))
		}
		if tenant == "a" {
			a = append(a, msg.UUID)
		} else {
			b = append(b, msg.UUID)
		}
		return msg
	})
	return a, b
}

// bulkEnv is what the bulk race tests start with: an env whose topic has
// parts partitions and holds bulkRaceFixture's messages, match (tenant a,
// what the runs select) and other (tenant b).
type bulkEnv struct {
	*env
	match, other []string
}

// setupBulkRace returns a test's bulkEnv: bulkRaceFixture's messages,
// 1,000 more than partitions × 1,000 (so each partition takes more than a
// batch), published by its pub, a Publisher of parts partitions.
func setupBulkRace(t *testing.T, parts int, keyed bool) *bulkEnv {
	t.Helper()
	e := setup(t)
	e.pub = newPartitionedPublisher(t, e.client, parts)
	match, other := bulkRaceFixture(t, e.pub, e.topic, 1000*(parts+1), keyed)
	return &bulkEnv{env: e, match: match, other: other}
}

var tenantA = redisdelay.Filter{Metadata: map[string]string{"tenant": "a"}}

// unpackAll unpacks the far tier of every partition of tp into its
// waiting set, as the scheduler does a minute before the messages are due.
func unpackAll(t *testing.T, client redis.UniversalClient, tp string, parts int) {
	t.Helper()
	var moved int64
	for part := range parts {
		n, err := redisdelay.UnpackFarNow(context.Background(), client, tp, part)
		require.NoError(t, err)
		moved += n
	}
	require.Positive(t, moved, "the race happened: far messages moved into the waiting set")
}

// checkBulkDone checks that the action was done on each of want and on
// none of others.
func checkBulkDone(t *testing.T, a bulkAction, insp *redisdelay.Inspector, tp string, want, others []string) {
	t.Helper()
	missed := 0
	for _, id := range want {
		if done, _ := a.done(t, insp, tp, id); !done {
			missed++
		}
	}
	assert.Zero(t, missed, "matches left undone (of %d)", len(want))
	for _, id := range others {
		w, ok, err := insp.FindWaiting(context.Background(), tp, id)
		require.NoError(t, err)
		if assert.True(t, ok, "a message the filter does not select was cancelled") {
			assert.NotEqual(t, bulkTarget.UnixMilli(), w.Due.UnixMilli(), "a message the filter does not select was rescheduled")
		}
	}
}

// The scheduler unpacks far buckets into the waiting set while a run is
// between two batches (a slow Progress callback, here the unpack itself):
// the run still acts on every match, in one partition or several.
func TestBulk_FarUnpackedDuringRun(t *testing.T) {
	eachBulkCase(t, func(t *testing.T, a bulkAction, parts int) {
		env := setupBulkRace(t, parts, false)
		var once sync.Once
		p, err := a.run(context.Background(), env.insp, env.topic, tenantA, redisdelay.BulkOptions{Progress: func(p redisdelay.BulkProgress) {
			once.Do(func() {
				require.NotEmpty(t, p.Cursor, "more batches to come")
				unpackAll(t, env.client, env.topic, parts)
			})
		}})
		require.NoError(t, err)
		assert.Empty(t, p.Cursor)
		assert.EqualValues(t, len(env.match), p.Done)
		assert.Equal(t, p.Matched, p.Done)
		checkBulkDone(t, a, env.insp, env.topic, env.match, env.other)
	})
}

// eachBulkCase runs test in parallel for each action, on a topic of one
// partition and of three.
func eachBulkCase(t *testing.T, test func(t *testing.T, a bulkAction, parts int)) {
	t.Parallel()
	for _, parts := range []int{1, 3} {
		for _, a := range bulkActions {
			t.Run(fmt.Sprintf("%s/%d partitions", a.name, parts), func(t *testing.T) {
				t.Parallel()
				test(t, a, parts)
			})
		}
	}
}

// A run interrupted after its first batch and resumed from its cursor
// after the scheduler unpacked the far tier meanwhile (the CLI's --resume,
// the dashboard's stepped runs) acts on every match.
func TestBulk_ResumedAfterUnpack(t *testing.T) {
	eachBulkCase(t, func(t *testing.T, a bulkAction, parts int) {
		env := setupBulkRace(t, parts, false)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p, err := a.run(ctx, env.insp, env.topic, tenantA, redisdelay.BulkOptions{Progress: func(redisdelay.BulkProgress) { cancel() }})
		require.ErrorIs(t, err, context.Canceled)
		require.NotEmpty(t, p.Cursor)
		require.Less(t, p.Done, int64(len(env.match)), "stopped part way")

		unpackAll(t, env.client, env.topic, parts)
		q, err := a.run(context.Background(), env.insp, env.topic, tenantA, redisdelay.BulkOptions{Cursor: p.Cursor})
		require.NoError(t, err)
		assert.Empty(t, q.Cursor)
		assert.EqualValues(t, len(env.match), p.Done+q.Done, "each match once, across the two runs")
		checkBulkDone(t, a, env.insp, env.topic, env.match, env.other)
	})
}

// Between two batches, others move the matches the run has not reached,
// here far ones: each is pulled into the waiting set and moved earlier
// than every message read so far (Reschedule), or cancelled, or made due
// and promoted to the ready stream. The run acts on every match still
// waiting at its end, and counts the others as matched at most.
func TestBulk_MovedDuringRun(t *testing.T) { movedDuringRun(t, false) }

// The same with the messages in the waiting set (they have business keys,
// which keeps them out of the far tier): moved behind any read position
// by due time.
func TestBulk_MovedInWaitingSetDuringRun(t *testing.T) { movedDuringRun(t, true) }

func movedDuringRun(t *testing.T, keyed bool) {
	eachBulkCase(t, func(t *testing.T, a bulkAction, parts int) {
		ctx := context.Background()
		env := setupBulkRace(t, parts, keyed)
		gone := map[string]bool{}
		var once sync.Once
		p, err := a.run(ctx, env.insp, env.topic, tenantA, redisdelay.BulkOptions{Progress: func(redisdelay.BulkProgress) {
			once.Do(func() {
				var left []string
				for _, id := range env.match {
					if done, _ := a.done(t, env.insp, env.topic, id); !done {
						left = append(left, id)
					}
				}
				require.Greater(t, len(left), 100, "the run has matches to come")
				for k, id := range left {
					var ok bool
					var err error
					switch {
					case k < 20: // cancelled by someone else
						ok, err = env.insp.Cancel(ctx, env.topic, id)
						gone[id] = true
					case k < 40: // due now, then promoted
						ok, err = env.insp.Reschedule(ctx, env.topic, id, time.Now().Add(-time.Second))
						gone[id] = true
					default: // earlier than every message read so far
						ok, err = env.insp.Reschedule(ctx, env.topic, id, time.Now().Add(30*time.Minute+time.Duration(k)*time.Millisecond))
					}
					require.NoError(t, err)
					require.True(t, ok)
				}
				var promoted int64
				for part := range parts {
					n, err := redisdelay.PromoteNow(ctx, env.client, env.topic, part)
					require.NoError(t, err)
					promoted += n
				}
				require.EqualValues(t, 20, promoted)
			})
		}})
		require.NoError(t, err)
		assert.Empty(t, p.Cursor)
		var still []string
		for _, id := range env.match {
			if !gone[id] {
				still = append(still, id)
			}
		}
		assert.EqualValues(t, len(still), p.Done, "every match still waiting, once")
		checkBulkDone(t, a, env.insp, env.topic, still, env.other)
		for id := range gone {
			_, ok, err := env.insp.FindWaiting(ctx, env.topic, id)
			require.NoError(t, err)
			assert.False(t, ok)
		}
	})
}
