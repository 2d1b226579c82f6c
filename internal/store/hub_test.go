package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The lanes of a cluster group commands by the node of their first key:
// firstKey finds it for every command the background work sends.
func TestLanes_FirstKey(t *testing.T) {
	ctx := context.Background()
	p := redis.NewClient(&redis.Options{}).Pipeline()
	cases := []struct {
		cmd  redis.Cmder
		want string
	}{
		{p.EvalSha(ctx, "sha", []string{"k1", "k2"}, "a"), "k1"},
		{p.Eval(ctx, "return 1", nil), ""},
		{p.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Count: 5, Block: -1, Streams: []string{"s1", "s2", ">", ">"}}), "s1"},
		{p.Exists(ctx, "k"), "k"},
		{p.Set(ctx, "k", "v", time.Second), "k"},
		{p.HMGet(ctx, "h", "f"), "h"},
		{p.Time(ctx), ""},
		{p.Publish(ctx, "ch", "m"), ""},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, firstKey(c.cmd.Args()), "%v", c.cmd.Args())
	}
}

// An UNSUBSCRIBE whose connection broke before Redis confirmed it is never
// confirmed (go-redis does not send it again): it holds up the Close that
// wrote it for settleWait at most, and no later one.
func TestNotify_SettleForgetsAnUnconfirmedUnsubscribe(t *testing.T) {
	h := &Hub{}
	h.unsubscribing(true) // written; the connection broke before the reply
	start := time.Now()
	h.settle()
	require.GreaterOrEqual(t, time.Since(start), settleWait/2, "waits for the confirmation a while")
	start = time.Now()
	h.settle()
	require.Less(t, time.Since(start), settleWait/2, "a later Close does not wait for it again")

	h.unsubscribing(true)
	h.unsubscribing(false) // confirmed
	start = time.Now()
	h.settle()
	require.Less(t, time.Since(start), settleWait/2)
}

// A batch's pipeline runs until the last of its jobs' deadlines (go-redis
// then stops retrying it); a job without one keeps it running.
func TestLanes_PipelineContextEndsWithItsCallers(t *testing.T) {
	type k struct{}
	first, endFirst := context.WithTimeout(context.WithValue(context.Background(), k{}, "v"), 20*time.Millisecond)
	defer endFirst()
	second, endSecond := context.WithTimeout(context.Background(), 2*time.Second)
	defer endSecond()
	ctx, done := pipelineContext([]*job{{ctx: first}, {ctx: second}})
	defer done()
	assert.Equal(t, "v", ctx.Value(k{}), "the first job's values, for the client's hooks")
	<-first.Done()
	assert.NoError(t, ctx.Err(), "a caller still waits")
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still running past every caller's deadline")
	}

	forever, doneForever := pipelineContext([]*job{{ctx: context.Background()}, {ctx: first}})
	defer doneForever()
	select {
	case <-forever.Done():
		t.Fatal("ended though a caller waits for good")
	case <-time.After(50 * time.Millisecond):
	}
}
