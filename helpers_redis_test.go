package redisdelay_test

// What the tests read and write in Redis directly: keys through the key
// table of internal/store, what a topic holds, reads as a crashed consumer,
// servers and users of a test's own, and the server's own figures.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// defaultKeys is the key table (internal/store) under the default prefix,
// for raw checks of what the library stores.
var defaultKeys = store.Keys{Prefix: redisdelay.DefaultKeyPrefix}

// shardOf is the key base of partition part of topic under the default
// prefix: its methods name the partition's keys (Waiting, Stream, ...).
func shardOf(topic string, part int) store.Shard { return defaultKeys.Shard(topic, part) }

// shardKey is a KEYS pattern of partition part of topic: the shard from the
// key table, then the pattern of the keys below it (see the layout in
// internal/store/scripts.go).
func shardKey(topic string, part int, suffix string) string {
	return string(shardOf(topic, part)) + ":" + suffix
}

// pendingCount is how many entries of the ready stream the group has pending.
func pendingCount(t *testing.T, client redis.UniversalClient, topic, group string) int64 {
	t.Helper()
	p, err := client.XPending(context.Background(), shardOf(topic, 0).Stream(), group).Result()
	require.NoError(t, err)
	return p.Count
}

// topicContent is what content reads of a topic.
type topicContent struct {
	waiting []string // UUIDs in due order
	bodies  int
	ready   int64
}

// content reads what partition 0 of topic holds: the waiting messages in
// due order, how many bodies (the far tier's included) and ready entries.
func content(t *testing.T, topic string) topicContent {
	t.Helper()
	ctx := context.Background()
	client := newClient(t)
	sh := shardOf(topic, 0)
	// in due order, the far tier's messages included (see internal/store/far.go)
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	require.NoError(t, err)
	ws, err := insp.Waiting(ctx, topic, 0, 10000)
	require.NoError(t, err)
	waiting := []string{}
	for _, w := range ws {
		waiting = append(waiting, w.Message.UUID)
	}
	bodies, err := client.HLen(ctx, sh.Bodies()).Result()
	require.NoError(t, err)
	far, _ := client.HGet(ctx, sh.FarMeta(), "n").Int64()
	bodies += far
	ready, err := client.XLen(ctx, sh.Stream()).Result()
	require.NoError(t, err)
	return topicContent{waiting: waiting, bodies: int(bodies), ready: ready}
}

// topicState is everything a topic holds in Redis, to show that a rejected
// call changed nothing. The far tier is moved into the waiting set first
// (keeping due times and order): a call may pull a far message into the
// waiting set to compare it there (publish.lua), which changes its tier,
// not what waits.
func topicState(t *testing.T, topic string) string {
	t.Helper()
	ctx := context.Background()
	client := newClient(t)
	_, err := redisdelay.PullFarAll(ctx, client, topic, 0)
	require.NoError(t, err)
	keys, err := client.Keys(ctx, shardKey(topic, 0, "*")).Result()
	require.NoError(t, err)
	sort.Strings(keys) // KEYS answers in no particular order
	var b strings.Builder
	for _, k := range keys {
		switch typ := client.Type(ctx, k).Val(); typ {
		case "zset":
			fmt.Fprintln(&b, k, client.ZRangeWithScores(ctx, k, 0, -1).Val())
		case "hash":
			fmt.Fprintln(&b, k, client.HGetAll(ctx, k).Val())
		case "stream":
			fmt.Fprintln(&b, k, client.XRange(ctx, k, "-", "+").Val())
		case "list":
			fmt.Fprintln(&b, k, client.LRange(ctx, k, 0, -1).Val())
		default:
			fmt.Fprintln(&b, k, typ)
		}
	}
	return b.String()
}

// businessKeyState checks that the business key hashes of partition part
// agree with each other and with the waiting set, and returns key -> UUID.
func businessKeyState(t *testing.T, topic string, part int) map[string]string {
	t.Helper()
	ctx := context.Background()
	client := newClient(t)
	keys, err := client.HGetAll(ctx, shardOf(topic, part).Bkeys()).Result()
	require.NoError(t, err)
	of, err := client.HGetAll(ctx, shardOf(topic, part).BkeyOf()).Result()
	require.NoError(t, err)
	far := 0
	for k, id := range keys {
		if uuid, ok := store.FarHolderUUID(id); ok {
			// a holder in the far tier: its key travels in its element
			_, found, err := redisdelay.FarPeek(ctx, client, topic, part, uuid)
			require.NoError(t, err)
			require.True(t, found, "the far holder %s of key %s is not in the far tier", uuid, k)
			keys[k] = uuid
			far++
			continue
		}
		require.Equal(t, k, of[id], "bkeyof of %s", id)
		_, err := client.ZScore(ctx, shardOf(topic, part).Waiting(), id).Result()
		require.NoError(t, err, "the holder %s of key %s is not waiting", id, k)
	}
	require.Len(t, of, len(keys)-far, "bkeys %v and bkeyof %v differ", keys, of)
	// holders of format 3, which the far index marks instead
	far3, err := redisdelay.FarKeyHolders(ctx, client, topic, part)
	require.NoError(t, err)
	for k, id := range far3 {
		keys[k] = id
	}
	return keys
}

// waitingScore is the score of a message waiting in partition 0 (either
// tier): its due time in ms × 1024 plus a tie-break.
func waitingScore(t *testing.T, topic, uuid string) float64 {
	t.Helper()
	s, err := newClient(t).ZScore(context.Background(), shardOf(topic, 0).Waiting(), uuid).Result()
	if err == redis.Nil {
		// in the far tier
		score, ok, err := redisdelay.FarPeek(context.Background(), newClient(t), topic, 0, uuid)
		require.NoError(t, err)
		require.True(t, ok, "%s is neither in the waiting set nor in the far tier", uuid)
		return score
	}
	require.NoError(t, err)
	return s
}

// awaitIdleSubscriptions waits until the subscriptions of the topic's first
// parts partitions wait for their bell (a read armed it: nothing left to
// read).
func awaitIdleSubscriptions(t *testing.T, client redis.UniversalClient, topic string, parts int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for p := range parts {
			if client.Exists(context.Background(), shardOf(topic, p).Bell()).Val() == 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "the subscriptions never waited for their bell")
}

// keepSchedulersBusy publishes a message due in an hour to every partition
// of the topic, so their scheduler loops run (and hold their leases) for
// the test: a loop with nothing to schedule retires, releasing its lease.
func keepSchedulersBusy(t *testing.T, client redis.UniversalClient, pub message.Publisher, tp string, parts int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		busy := 0
		for p := range parts {
			// in the waiting set or the far tier (due in an hour): either way
			// the partition has something to schedule
			if client.ZCard(ctx, shardOf(tp, p).Waiting()).Val()+client.ZCard(ctx, shardOf(tp, p).FarZ()).Val() > 0 {
				busy++
			}
		}
		if busy == parts {
			return
		}
		require.Less(t, i, 1000, "no message reached some partition")
		msg := delayed(delay.For(time.Hour), "keeps the scheduler busy")
		msg.Metadata.Set(redisdelay.PartitionKey, strconv.Itoa(i))
		require.NoError(t, pub.Publish(tp, msg))
	}
}

// ownRedis starts a redis-server of the test's own, without persistence,
// for tests that change server settings (maxmemory, its policy) the
// shared test server's other tests must not see. Stopped when the test ends.
func ownRedis(t *testing.T, args ...string) *redis.Client {
	t.Helper()
	server := redistest.ForTest(t, redistest.Options{Args: args})
	client := redis.NewClient(&redis.Options{Addr: server.Addr})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// commandsPerSecond is how many commands Redis processed per second over d.
func commandsPerSecond(t *testing.T, client *redis.Client, d time.Duration) float64 {
	t.Helper()
	count := func() int64 {
		info, err := client.Info(context.Background(), "stats").Result()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				return n
			}
		}
		t.Fatal("no total_commands_processed in INFO stats")
		return 0
	}
	start := count()
	time.Sleep(d)
	return float64(count()-start-1) / d.Seconds()
}

// recordScripts measures the script calls of client (the test's Managers and
// Subscribers must run on it) from now on, and returns a function that
// logs and returns the one of the most server CPU time since, and how many
// there were. The tests assert it stays under redistest.ScriptCPUGuard:
// CPU time, which a machine starved by other work does not inflate as it
// does SLOWLOG's wall-clock times (an own.lua call of 19 ms alone took
// 1.54 s by SLOWLOG once, under heavy load); the round trip is logged.
func recordScripts(t *testing.T, client *redis.Client) (longest func() (redistest.ScriptCall, int)) {
	t.Helper()
	rec := redistest.NewScriptCPU(client)
	t.Cleanup(func() { _ = rec.Close() })
	var calls []redistest.ScriptCall
	return func() (redistest.ScriptCall, int) {
		calls = append(calls, rec.Take()...)
		worst := redistest.Worst(calls)
		t.Logf("the longest of %d script calls: %s", len(calls), worst)
		return worst, len(calls)
	}
}

// minimalACL is the ACL of README's Operations section.
const minimalACL = "resetkeys ~<prefix>:* resetchannels &<prefix>:* nocommands +@read +@write +@scripting +@pubsub +@connection +time -@dangerous +info"

// newACLUser creates a Redis user with the given ACL rules (after "on
// >pass") and returns a client logged in as it; the user is deleted when
// the test ends.
func newACLUser(t *testing.T, rules ...string) (*redis.Client, string) {
	t.Helper()
	admin := singleClient(t, "ACL SETUSER")
	ctx := context.Background()
	name := "wk-" + watermill.NewShortUUID()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">pass"}
	for _, r := range rules {
		args = append(args, r)
	}
	require.NoError(t, admin.Do(ctx, args...).Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", name).Err() })
	c := redis.NewClient(&redis.Options{Addr: redisAddr, Username: name, Password: "pass"})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(ctx).Err())
	return c, name
}

// farKeys counts what a topic holds in the far tier: buckets, and the
// messages its counter says are there.
func farKeys(t *testing.T, topic string) (buckets int64, messages int64) {
	t.Helper()
	client := newClient(t)
	ctx := context.Background()
	buckets = client.ZCard(ctx, shardOf(topic, 0).FarZ()).Val()
	messages, _ = client.HGet(ctx, shardOf(topic, 0).FarMeta(), "n").Int64()
	return buckets, messages
}
