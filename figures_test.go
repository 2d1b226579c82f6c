package redisdelay_test

import (
	"os"
	"testing"
	"time"

	"github.com/redisdelay/watermill-redisdelay"
)

// Idle cost of a discovering Manager with registered, empty topics
// (REDISDELAY_FIGURES=1; the defaults: CheckInterval 2s, TrimInterval 10s).
func TestFiguresIdleManager(t *testing.T) {
	if os.Getenv("REDISDELAY_FIGURES") == "" {
		t.Skip("set REDISDELAY_FIGURES=1")
	}
	for _, n := range []int{10, 1000} {
		client := singleClient(t, "counts the commands of the whole server")
		prefix := uniquePrefix()
		sub := newSubscriber(t, client, redisdelay.SubscriberConfig{KeyPrefix: prefix, ConsumerGroup: "g", DisableScheduler: true})
		for range n {
			if err := sub.SubscribeInitialize(topic()); err != nil {
				t.Fatal(err)
			}
		}
		mgr := runManagerWithLogger(t, client, redisdelay.ManagerConfig{KeyPrefix: prefix}, logger)
		time.Sleep(25 * time.Second)
		t.Logf("%d registered, empty topics: %.0f Redis commands/s", n, commandsPerSecond(t, client, 5*time.Second))
		_ = mgr.Close()
	}
}
