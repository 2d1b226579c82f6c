package redisdelay_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Idle cost of a discovering Manager with registered, empty topics
// (REDISDELAY_FIGURES=1; the defaults: CheckInterval 2s, TrimInterval 10s).
func TestFigures_IdleManager(t *testing.T) {
	if os.Getenv("REDISDELAY_FIGURES") == "" {
		t.Skip("set REDISDELAY_FIGURES=1")
	}
	for _, n := range []int{10, 1000} {
		needSingle(t, "counts the commands of the whole server")
		env := setupPrefixed(t, uniquePrefix())
		sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{KeyPrefix: env.prefix, ConsumerGroup: "g", DisableScheduler: true})
		for range n {
			if err := sub.SubscribeInitialize(topic()); err != nil {
				t.Fatal(err)
			}
		}
		mgr := runManagerWithLogger(t, env.client, redisdelay.ManagerConfig{KeyPrefix: env.prefix}, logger)
		time.Sleep(25 * time.Second)
		t.Logf("%d registered, empty topics: %.0f Redis commands/s", n, commandsPerSecond(t, env.client.(*redis.Client), 5*time.Second))
		_ = mgr.Close()
	}
}

// What a tick costs Redis, with and without the overlap policy
// (REDISDELAY_FIGURES=1): 50 schedules @every 1s of as many topics and one
// Manager, on a server of the test's own; commands as Redis counts them
// (INFO commandstats: the scripts' own calls included) per tick published.
// With a group, one Subscriber acks every tick, its reads and acks
// included.
func TestFigures_ScheduleTickCost(t *testing.T) {
	if os.Getenv("REDISDELAY_FIGURES") == "" {
		t.Skip("set REDISDELAY_FIGURES=1")
	}
	const n, window = 50, 10 * time.Second
	for _, c := range []struct {
		overlap redisdelay.Overlap
		group   bool
	}{{redisdelay.OverlapAllow, false}, {redisdelay.OverlapSkip, false}, {redisdelay.OverlapAllow, true}, {redisdelay.OverlapSkip, true}} {
		env := setupOwnServer(t)
		ctx := context.Background()
		prefix := uniquePrefix()
		pub := scPublisher(t, env.client, prefix)
		topics := newTopics(n)
		var sub *redisdelay.Subscriber
		if c.group {
			sub = newSubscriber(t, env.client, redisdelay.SubscriberConfig{KeyPrefix: prefix, ConsumerGroup: "g", DisableScheduler: true})
			for _, tp := range topics {
				ch := subscribe(t, sub, tp)
				go func() {
					for msg := range ch {
						msg.Ack()
					}
				}()
			}
		}
		for i, tp := range topics {
			require.NoError(t, pub.Schedule(ctx, redisdelay.Schedule{ID: "s" + strconv.Itoa(i), Spec: "@every 1s", Topic: tp, Overlap: c.overlap}))
		}
		mgr := runManager(t, env.client, redisdelay.ManagerConfig{KeyPrefix: prefix})
		time.Sleep(3 * time.Second)
		before := commandCalls(t, env.server)
		time.Sleep(window)
		per := float64(commandCalls(t, env.server)-before) / (n * window.Seconds())
		var skipped int64
		all, err := newInspectorPrefix(t, env.client, prefix).Schedules(ctx)
		require.NoError(t, err)
		for _, s := range all {
			skipped += s.Skipped
		}
		t.Logf("FIGURE %d schedules @every 1s, overlap %q, group %v: %.1f commands per tick (%d skipped)", n, c.overlap, c.group, per, skipped)
		_ = mgr.Close()
		if sub != nil {
			_ = sub.Close()
		}
		_ = pub.Close()
	}
}

// commandCalls is how many commands Redis ran, scripts' own calls included
// (INFO commandstats).
func commandCalls(t *testing.T, client *redis.Client) int64 {
	t.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var all int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		require.NoError(t, err)
		all += n
	}
	return all
}

func newInspectorPrefix(t *testing.T, client redis.UniversalClient, prefix string) *redisdelay.Inspector {
	t.Helper()
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client, KeyPrefix: prefix})
	require.NoError(t, err)
	return insp
}
