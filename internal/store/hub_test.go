package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
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

// pipelineCounter counts the pipelines of SETs a client sends and their
// commands (go-redis's own, opening a connection, aside).
type pipelineCounter struct {
	mu    sync.Mutex
	sizes []int
}

func (p *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "set" {
			p.mu.Lock()
			p.sizes = append(p.sizes, len(cmds))
			p.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func (p *pipelineCounter) pipelines() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sizes)
}

// Commands sent through a gathering client at about the same time go in
// one pipeline, where the idle lanes would each have taken one.
func TestLanes_GatheringSharesAPipeline(t *testing.T) {
	c := freshClient(t)
	pc := &pipelineCounter{}
	c.AddHook(pc)
	h := AcquireHub(c)
	defer h.Release()
	// Long enough that every goroutine below joins the window, however
	// busy the machine: the test counts pipelines, not time.
	h.gatherWindow = time.Second
	g := NewGated(h).Gathering()
	ctx := context.Background()
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, []int{n}, pc.pipelines(), "one pipeline of every command")
	for i := range n {
		assert.Equal(t, strconv.Itoa(i), c.Get(ctx, fmt.Sprintf("k%d", i)).Val())
	}

	// Without gathering, each is a job of its own, sent at once.
	start := time.Now()
	require.NoError(t, NewGated(h).Set(ctx, "alone", 1, 0).Err())
	assert.Less(t, time.Since(start), h.gatherWindow/2)
}

// A gathered command whose caller gives up is not sent; one gathered when
// the last component releases the hub fails with the hub's error.
func TestLanes_GatheredCommandsEnd(t *testing.T) {
	c := freshClient(t)
	h := AcquireHub(c)
	h.gatherWindow = 300 * time.Millisecond
	g := NewGated(h).Gathering()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := g.Set(ctx, "given-up", 1, 0).Err()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, g.Set(context.Background(), "sent", 1, 0).Err(), "sent in the same window")
	assert.Zero(t, c.Exists(context.Background(), "given-up").Val(), "not sent")

	done := make(chan error, 1)
	go func() { done <- g.Set(context.Background(), "released", 1, 0).Err() }()
	require.Eventually(t, func() bool {
		h.lanesMu.Lock()
		defer h.lanesMu.Unlock()
		ls := h.nodes[""]
		ls.gatherMu.Lock()
		defer ls.gatherMu.Unlock()
		return len(ls.gathered) == 1
	}, 5*time.Second, time.Millisecond)
	h.Release()
	select {
	case err := <-done:
		require.ErrorIs(t, err, errHubClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("a gathered command's caller still waits after the release")
	}
	assert.Zero(t, c.Exists(context.Background(), "released").Val())
}
