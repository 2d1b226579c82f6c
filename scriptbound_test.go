package redisdelay_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// A high-priority message due in a topic of 1,000 consumer groups goes to
// each group's redelivery stream: a whole batch of them is 256,000
// stream entries, which one promote call used to write at once (about
// 1 s, blocking Redis). Each call now writes a bounded number, and every
// message still reaches every group exactly once.
func TestScriptBound_PriorityFanOutToManyGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a topic of 1,000 consumer groups")
	}
	needSingle(t, "measures the server's CPU time (INFO cpu)")
	env := setup(t)
	ctx := context.Background()
	const groups, msgs = 1000, 256
	pipe := env.client.Pipeline()
	for g := range groups {
		pipe.SAdd(ctx, shardOf(env.topic, 0).Groups(), "g"+strconv.Itoa(g))
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	for i := range msgs {
		require.NoError(t, env.pub.Publish(env.topic, high(newMessage(strconv.Itoa(i)))))
	}
	longest := recordScripts(t, env.client.(*redis.Client))

	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}, CheckInterval: 100 * time.Millisecond})
	counts := func() (total int64, wrong []string) {
		pipe := env.client.Pipeline()
		lens := make([]*redis.IntCmd, groups)
		for g := range groups {
			lens[g] = pipe.XLen(ctx, shardOf(env.topic, 0).Redelivery("g"+strconv.Itoa(g)))
		}
		_, _ = pipe.Exec(ctx)
		for g, l := range lens {
			total += l.Val()
			if l.Val() != msgs {
				wrong = append(wrong, fmt.Sprintf("g%d: %d", g, l.Val()))
			}
		}
		return total, wrong
	}
	require.Eventually(t, func() bool { n, _ := counts(); return n >= groups*msgs }, 40*time.Second, 100*time.Millisecond,
		"every message reaches every group")
	time.Sleep(200 * time.Millisecond) // nothing more arrives
	_, wrong := counts()
	require.Empty(t, wrong, "each group has each message once")
	require.Zero(t, env.client.ZCard(ctx, shardOf(env.topic, 0).Waiting()).Val())
	require.Zero(t, env.client.Exists(ctx, shardOf(env.topic, 0).Fanout(), shardOf(env.topic, 0).Prio(), shardOf(env.topic, 0).Bodies()).Val())
	worst, _ := longest()
	require.Less(t, worst.CPU, redistest.ScriptCPUGuard, "a promote call blocked Redis too long: %s", worst)
}

// An ordered subscription taking a partition over claims every entry
// still pending for the previous owner: 300,000 of them used to be claimed
// in one own.lua call (over 1 s). Claims now go a bounded number per call.
func TestScriptBound_OrderedTakeoverOfLongPendingList(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a pending list of 300,000 entries")
	}
	needSingle(t, "measures the server's CPU time (INFO cpu)")
	env := setup(t)
	ctx := context.Background()
	const pending = 300_000
	init := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Ordered: true})
	require.NoError(t, init.SubscribeInitialize(env.topic))
	require.NoError(t, env.pub.Publish(env.topic, newMessage("0")))
	stream := shardOf(env.topic, 0).Stream()
	// A dead owner that read the entries and still holds them.
	build := redis.NewScript(`
local e = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '*', unpack(e[2])) end
redis.call('XREADGROUP', 'GROUP', 'g', 'dead', 'COUNT', ARGV[1] + 1, 'STREAMS', KEYS[1], '>')
return 0`)
	for added := 0; added < pending; added += 10_000 {
		require.NoError(t, build.Run(ctx, env.client, []string{stream}, 10_000).Err())
	}
	require.NoError(t, env.client.Set(ctx, shardOf(env.topic, 0).Owner("g"), "dead", 100*time.Millisecond).Err())
	deadPending := func() int64 {
		p, err := env.client.XPending(ctx, stream, "g").Result()
		require.NoError(t, err)
		return p.Consumers["dead"]
	}
	require.EqualValues(t, pending+1, deadPending())
	longest := recordScripts(t, env.client.(*redis.Client))

	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g", Ordered: true, BlockTime: 50 * time.Millisecond})
	ch := subscribe(t, sub, env.topic)
	require.Eventually(t, func() bool { return deadPending() == 0 }, 30*time.Second, 50*time.Millisecond,
		"the new owner claims every entry the dead one held")
	msg := receive(t, ch, 10*time.Second)
	require.Equal(t, "0", string(msg.Payload), "the oldest pending entry comes first")
	worst, _ := longest()
	require.Less(t, worst.CPU, redistest.ScriptCPUGuard, "an own.lua call blocked Redis too long: %s", worst)
}

// With more groups than a promote call may add entries (BatchSize), each
// high-priority message is fanned out over several calls, one message
// after the other: every group gets every message once, in order, and
// normal messages behind them still reach the ready stream.
func TestScriptBound_FanOutOverSeveralCallsKeepsOrder(t *testing.T) {
	env := setup(t)
	ctx := context.Background()
	const groups, msgs = 10, 6
	for g := range groups {
		require.NoError(t, env.client.SAdd(ctx, shardOf(env.topic, 0).Groups(), "g"+strconv.Itoa(g)).Err())
	}
	var want []string
	for i := range msgs {
		msg := high(newMessage(strconv.Itoa(i)))
		want = append(want, msg.UUID)
		require.NoError(t, env.pub.Publish(env.topic, msg))
	}
	require.NoError(t, env.pub.Publish(env.topic, delayedNow(newMessage("normal"))))
	runManager(t, env.client, redisdelay.ManagerConfig{Topics: []string{env.topic}, BatchSize: 3, CheckInterval: 100 * time.Millisecond})
	for g := range groups {
		key := shardOf(env.topic, 0).Redelivery("g" + strconv.Itoa(g))
		require.Eventually(t, func() bool { return env.client.XLen(ctx, key).Val() >= msgs }, 5*time.Second, 10*time.Millisecond)
		entries, err := env.client.XRange(ctx, key, "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, entries, msgs, "group g%d", g)
		for i, e := range entries {
			msg, err := redisdelay.DecodeMessage([]byte(e.Values["m"].(string)))
			require.NoError(t, err)
			require.Equal(t, want[i], msg.UUID, "group g%d, message %d", g, i)
		}
	}
	require.Eventually(t, func() bool { return env.client.XLen(ctx, shardOf(env.topic, 0).Stream()).Val() == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, env.client.Exists(ctx, shardOf(env.topic, 0).Fanout()).Val())
}

// delayedNow makes a message go through the waiting set, due at once.
func delayedNow(msg *message.Message) *message.Message {
	delay.Message(msg, delay.For(time.Millisecond))
	return msg
}
