package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lanes is how many pipelines the library's background work sends at once
// to a Redis node on a client.
const Lanes = 3

// maxBatch bounds the commands of one pipeline of a lane.
const maxBatch = 256

// laneSet is the lanes of one node: lanes workers taking jobs from queue.
// On a cluster, node is its master: commands without keys go to it
// directly (the cluster client would send them to a node at random).
type laneSet struct {
	queue chan *job
	node  *redis.Client

	gatherMu sync.Mutex
	gathered []*job // jobs sent with gather, waiting for gatherWindow to end
}

// job is work queued for a lane: commands to send (all for one node), or a
// function to run alone in a lane (commands a pipeline cannot carry, such
// as INFO to every master).
type job struct {
	ctx   context.Context
	cmds  []redis.Cmder
	fn    func()
	batch []*job        // gathered jobs, handed to a lane as one (see gather)
	taken atomic.Bool   // a lane took it: the caller waits for done
	done  chan struct{} // closed when the lane is through with it
}

// errHubClosed fails the commands of a component used after every
// component of its client closed.
var errHubClosed = errors.New("redisdelay: used after Close")

// lanesOf returns the lanes of a node (of its address; "" for a client of
// one node), starting them at its first job; nil once the hub is released.
func (h *Hub) lanesOf(node string, client *redis.Client) *laneSet {
	h.lanesMu.Lock()
	defer h.lanesMu.Unlock()
	select {
	case <-h.stop:
		return nil
	default:
	}
	ls := h.nodes[node]
	if ls == nil {
		ls = &laneSet{queue: make(chan *job), node: client}
		h.nodes[node] = ls
		h.lanesDone.Add(Lanes)
		for range Lanes {
			go h.lane(ls)
		}
	}
	return ls
}

// do sends cmds through the lanes of their nodes and waits until they
// were sent, or until ctx ends first for those not yet taken by a lane
// (they fail with its error, unsent). On a cluster the commands of one
// call may go to several nodes, in a job per node.
func (h *Hub) do(ctx context.Context, cmds []redis.Cmder, gather bool) error {
	if h.cluster == nil {
		return h.run(&job{ctx: ctx, cmds: cmds}, "", nil, gather)
	}
	type target struct {
		node *redis.Client
		cmds []redis.Cmder
	}
	byNode := map[string]*target{}
	var order []string
	for _, c := range cmds {
		node := h.nodeOf(ctx, c)
		addr := ""
		if node != nil {
			addr = node.Options().Addr
		}
		if byNode[addr] == nil {
			byNode[addr] = &target{node: node}
			order = append(order, addr)
		}
		byNode[addr].cmds = append(byNode[addr].cmds, c)
	}
	if len(order) == 1 {
		t := byNode[order[0]]
		return h.run(&job{ctx: ctx, cmds: cmds}, order[0], t.node, gather)
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, addr := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := byNode[addr]
			errs[i] = h.run(&job{ctx: ctx, cmds: t.cmds}, addr, t.node, gather)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// keylessKey places the commands without keys of a cluster: on the master
// serving it, in that node's lanes.
const keylessKey = "redisdelay"

// nodeOf is the master serving a command's first key on a cluster (that
// of keylessKey for a command without keys); nil while the cluster's
// state is unknown (the lanes of "" send it wherever go-redis routes it).
func (h *Hub) nodeOf(ctx context.Context, c redis.Cmder) *redis.Client {
	key := firstKey(c.Args())
	if key == "" {
		key = keylessKey
	}
	node, err := h.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil
	}
	return node
}

// firstKey returns the first key of the commands the library's background
// work sends (see cmds), "" for one without keys.
func firstKey(args []any) string {
	if len(args) < 2 {
		return ""
	}
	name, _ := args[0].(string)
	switch strings.ToLower(name) {
	case "evalsha", "eval", "evalsha_ro", "eval_ro":
		if n, _ := args[2].(int); n > 0 && len(args) > 3 {
			key, _ := args[3].(string)
			return key
		}
		return ""
	case "xreadgroup":
		for i, a := range args {
			if s, _ := a.(string); strings.EqualFold(s, "streams") && i+1 < len(args) {
				key, _ := args[i+1].(string)
				return key
			}
		}
		return ""
	case "time", "publish", "ping":
		return ""
	}
	key, _ := args[1].(string)
	return key
}

// run queues a job on the lanes of node (with gather, after the
// gatherWindow it opened or joined) and waits until it is through. A job
// not yet taken when ctx ends is dropped with ctx's error; a job taken
// runs to its end.
func (h *Hub) run(j *job, addr string, node *redis.Client, gather bool) error {
	ls := h.lanesOf(addr, node)
	if ls == nil {
		return errHubClosed
	}
	j.done = make(chan struct{})
	if gather {
		h.gather(ls, j)
	} else {
		select {
		case ls.queue <- j:
		case <-h.stop:
			return errHubClosed
		case <-j.ctx.Done():
			return h.noLane(j.ctx)
		}
	}
	select {
	case <-j.done:
		return nil
	case <-j.ctx.Done():
		if j.taken.CompareAndSwap(false, true) {
			return h.noLane(j.ctx) // still in a lane's batch: dropped
		}
		<-j.done
		return nil
	}
}

// gatherWindow is how long a job sent with gather waits for others before
// the lanes take them all in one pipeline. Such jobs are writes nothing
// waits for (acknowledgements), made by many goroutines at the same
// instants (see consumption's ackEvery): they reach the hub within a few
// hundred microseconds of each other, and the idle lanes would otherwise
// each take one and send it alone, a round trip each.
const gatherWindow = time.Millisecond

// gather adds j to the jobs the lanes of ls take together at the end of
// the current gathering window, opening one if none is open.
func (h *Hub) gather(ls *laneSet, j *job) {
	ls.gatherMu.Lock()
	ls.gathered = append(ls.gathered, j)
	open := len(ls.gathered) == 1
	ls.gatherMu.Unlock()
	if open {
		time.AfterFunc(h.gatherWindow, func() { h.hand(ls) })
	}
}

// hand gives the lanes of ls the jobs gathered, in batches of at most
// maxBatch commands; once the hub is released it fails them instead.
func (h *Hub) hand(ls *laneSet) {
	ls.gatherMu.Lock()
	jobs := ls.gathered
	ls.gathered = nil
	ls.gatherMu.Unlock()
	for len(jobs) > 0 {
		n, cmds := 1, len(jobs[0].cmds)
		for n < len(jobs) && cmds+len(jobs[n].cmds) <= maxBatch {
			cmds += len(jobs[n].cmds)
			n++
		}
		select {
		case ls.queue <- &job{batch: jobs[:n:n]}:
		case <-h.stop:
			for _, j := range jobs {
				if j.taken.CompareAndSwap(false, true) {
					for _, c := range j.cmds {
						c.SetErr(errHubClosed)
					}
				}
				close(j.done)
			}
			return
		}
		jobs = jobs[n:]
	}
}

// lane runs the jobs of a node until the hub is released: a job, and the
// command jobs queued behind it, in one pipeline.
func (h *Hub) lane(ls *laneSet) {
	defer h.lanesDone.Done()
	batch := make([]*job, 0, maxBatch)
	for {
		var first *job
		select {
		case first = <-ls.queue:
		case <-h.stop:
			return
		}
		if first.fn != nil {
			runAlone(first)
			continue
		}
		batch = first.appendTo(batch[:0])
		var alone *job // a function job found while filling: run after the batch
	fill:
		for n := cmdCount(batch); n < maxBatch; {
			select {
			case j := <-ls.queue:
				if j.fn != nil {
					alone = j
					break fill
				}
				k := len(batch)
				batch = j.appendTo(batch)
				n += cmdCount(batch[k:])
			default:
				break fill
			}
		}
		h.send(ls, batch)
		if alone != nil {
			runAlone(alone)
		}
	}
}

// appendTo appends to batch the command jobs j stands for: itself, or
// those it gathered.
func (j *job) appendTo(batch []*job) []*job {
	if j.batch != nil {
		return append(batch, j.batch...)
	}
	return append(batch, j)
}

// cmdCount is how many commands the jobs carry.
func cmdCount(jobs []*job) int {
	n := 0
	for _, j := range jobs {
		n += len(j.cmds)
	}
	return n
}

// runAlone runs a function job, unless its caller gave up.
func runAlone(j *job) {
	if j.taken.CompareAndSwap(false, true) {
		j.fn()
	}
	close(j.done)
}

// send sends the commands of the batch's jobs that are still wanted in
// one pipeline (two on a cluster node with commands without keys, one
// after the other), and closes their done. It runs with the context of
// the first (see pipelineContext), so the client's hooks see its values.
func (h *Hub) send(ls *laneSet, batch []*job) {
	pipe := h.client.Pipeline()
	var direct redis.Pipeliner // keyless commands, straight to a cluster node
	var sent []*job
	for _, j := range batch {
		if !j.taken.CompareAndSwap(false, true) {
			close(j.done) // its caller gave up
			continue
		}
		for _, c := range j.cmds {
			if ls.node != nil && firstKey(c.Args()) == "" {
				if direct == nil {
					direct = ls.node.Pipeline()
				}
				_ = direct.Process(j.ctx, c)
				continue
			}
			_ = pipe.Process(j.ctx, c)
		}
		sent = append(sent, j)
	}
	if len(sent) > 0 {
		ctx, done := pipelineContext(sent)
		for _, p := range []redis.Pipeliner{pipe, direct} {
			if p != nil && p.Len() > 0 {
				h.exec(ctx, p)
			}
		}
		done()
	}
	for _, j := range sent {
		close(j.done)
	}
}

// pipelineContext is the context a batch's pipeline runs with: the first
// job's values without its cancellation (the pipeline is shared), ending
// at the latest of the jobs' deadlines. go-redis reads a reply until its
// ReadTimeout whatever the context (unless ContextTimeoutEnabled), but
// stops retrying once the context ends: on a silent Redis, the jobs'
// callers (a Close handing messages back, say) wait one or two read
// timeouts past their deadline, not the four attempts of MaxRetries. A
// job without a deadline keeps every attempt.
func pipelineContext(sent []*job) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(sent[0].ctx)
	var last time.Time
	for _, j := range sent {
		d, ok := j.ctx.Deadline()
		if !ok {
			return base, func() {}
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(base, last)
}

// exec runs a pipeline of a lane and gives its commands their errors.
func (h *Hub) exec(ctx context.Context, p redis.Pipeliner) {
	cmds, err := p.Exec(ctx)
	pipeFailed(cmds, err)
	// A pipeline under way when the application closed the client fails
	// reading from a connection the pool closed: say what happened, so
	// components stop rather than retry.
	closed := IsClientClosed(err) || errors.Is(err, net.ErrClosed) && IsClientClosed(h.client.Ping(ctx).Err())
	for _, c := range cmds {
		switch err := c.Err(); {
		case err == nil:
		case closed:
			c.SetErr(redis.ErrClosed)
		default:
			c.SetErr(h.explain(err))
		}
	}
	h.watchCluster(err)
}

// watchCluster notes a cluster node that failed a pipeline (unreachable,
// or failing over) and, at the next pipeline that went through, tells
// every listener: keys that a failover lost may include an armed bell or
// a dormant mark, which nothing would ring or clear, and the hub's pub/sub
// connection, on another node, saw nothing. On one node (and Sentinel)
// the pub/sub connection fails with the node and its resubscription tells
// them.
func (h *Hub) watchCluster(err error) {
	if h.cluster == nil {
		return
	}
	var reply redis.Error
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		if h.disturbed.Swap(false) {
			go h.notifyAll()
		}
	case redis.IsClusterDownError(err) || redis.IsTryAgainError(err):
		h.disturbed.Store(true)
	case errors.As(err, &reply) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted):
		// Redis's answer to a command, or the pool: no node failed.
	default:
		h.disturbed.Store(true) // no answer from a node
	}
}

// Exclusive runs fn alone in a lane, or fails when ctx ends first: of
// node on a cluster (fn sends its commands to that node only), else of
// the client.
func (h *Hub) Exclusive(ctx context.Context, node *redis.Client, fn func()) error {
	addr := ""
	if node != nil && h.cluster != nil {
		addr = node.Options().Addr
	}
	return h.run(&job{ctx: ctx, fn: fn}, addr, node, false)
}

// noLane is the error of a command dropped unsent when ctx ended: with a
// recent error of the client's pool, the lanes waited for the pool.
func (h *Hub) noLane(ctx context.Context) error {
	err := fmt.Errorf("no lane free for the command (the library sends %d pipelines at a time to a node, see docs/operations.md#connections): %w", Lanes, ctx.Err())
	if p := h.poolErr.Load(); p != nil && time.Since(p.at) < 10*time.Second {
		return &poolError{err: err, hint: "the lanes waited for the client's pool: " + p.hint}
	}
	return err
}
