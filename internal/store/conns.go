package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The connection model. Whatever the number of topics, partitions,
// Subscribers and Managers, the library's own work on one Redis client in
// one process holds at most lanes + 1 connections per Redis node (one
// more on a Cluster: go-redis's own, below):
//
//   - One pub/sub connection (go-redis keeps pub/sub connections outside
//     the client's pool) carries every notification: the schedulers'
//     wake-ups, pause changes, topic registrations, and the bell that tells
//     idle subscriptions of new entries (see read.lua).
//   - Every other command goes through the client's pool in lanes: lanes
//     workers per Redis node, each sending what is queued for its node
//     when it is free in one pipeline. Subscriptions read without
//     blocking (an idle one waits for its bell, see waitBell), so none
//     holds a connection between commands, and a node that fails stalls
//     only its own lanes.
//   - A ClusterClient reloads the cluster's layout (CLUSTER SLOTS) now and
//     then from a node at random, taking a connection of that node's pool
//     while the lanes may hold theirs: go-redis's, out of the library's
//     hands.
//
// The components sharing a client share these through its hub, found by
// the client's identity and released when the last of them closes.
// Publish calls are the application's own load and go through the pool
// beside the lanes, as do the Inspector's.

// Lanes is how many pipelines the library's background work sends at once
// to a Redis node on a client.
const Lanes = 3

// maxBatch bounds the commands of one pipeline of a lane.
const maxBatch = 256

// Hub is what the components of a process share on one Redis client: the
// lanes and the notifications.
type Hub struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // the client, when it is one
	shared  bool                 // in hubs (the client is comparable)
	refs    int                  // under hubsMu

	lanesMu   sync.Mutex
	nodes     map[string]*laneSet // node address ("" for a client of one node) -> its lanes
	stop      chan struct{}       // closed by the last release
	lanesDone sync.WaitGroup
	disturbed atomic.Bool // a cluster node failed a lane's pipeline (see send)

	mu        sync.Mutex
	ps        *redis.PubSub // nil until the first listener, and once closed
	closed    bool
	listeners map[string]map[*Listener]struct{} // channel -> listeners
	done      chan struct{}                     // closed when the dispatch loop ended
	prefixes  map[string]*channelGrant          // key prefix -> whether Redis grants its channels

	// When the UNSUBSCRIBEs not yet confirmed were written, oldest first
	// (see settle); idle is closed whenever none are.
	unsubMu   sync.Mutex
	unsubSent []time.Time
	unsubIdle chan struct{}

	poolErr atomic.Pointer[poolError] // the last error of the client's pool in a lane
}

// Listener receives the notes of the channels it listens to. fn runs on
// the hub's dispatch goroutine and must not block.
type Listener struct {
	Fn func(Note)
}

// Note is a message on a channel, or the confirmation that the channel was
// (re)subscribed: messages published while it was not are lost.
type Note struct {
	Channel    string
	Payload    string
	Subscribed bool
}

var (
	hubsMu sync.Mutex
	hubs   = map[redis.UniversalClient]*Hub{}
)

// AcquireHub returns the hub of a client, creating it at the first use;
// release gives it back.
func AcquireHub(client redis.UniversalClient) *Hub {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	if !reflect.TypeOf(client).Comparable() {
		// Cannot be a map key: a hub of its own. All go-redis clients are
		// pointers; this is a wrapper of the application's.
		h := newHub(client)
		h.refs = 1
		return h
	}
	h := hubs[client]
	if h == nil {
		h = newHub(client)
		h.shared = true
		hubs[client] = h
	}
	h.refs++
	return h
}

func newHub(client redis.UniversalClient) *Hub {
	h := &Hub{
		client: client, nodes: map[string]*laneSet{}, stop: make(chan struct{}),
		listeners: map[string]map[*Listener]struct{}{}, prefixes: map[string]*channelGrant{},
	}
	h.cluster, _ = client.(*redis.ClusterClient)
	return h
}

// Release gives the hub back once Redis confirmed the component's
// UNSUBSCRIBEs; the last release stops the lanes and closes the pub/sub
// connection, and returns once both are done.
func (h *Hub) Release() {
	h.settle()
	hubsMu.Lock()
	h.refs--
	last := h.refs == 0
	if last && h.shared {
		delete(hubs, h.client)
	}
	hubsMu.Unlock()
	if !last {
		return
	}
	h.lanesMu.Lock()
	close(h.stop) // under lanesMu: no lane starts from now on
	h.lanesMu.Unlock()
	h.lanesDone.Wait()
	h.mu.Lock()
	ps, done := h.ps, h.done
	h.ps, h.closed = nil, true
	h.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
}

// Listen registers l for the notes of channel, subscribing to it unless
// another listener did, or Redis refuses the channels of its key prefix
// (see channelGrant: they are subscribed once it grants them).
func (h *Hub) Listen(channel string, l *Listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	set := h.listeners[channel]
	if set == nil {
		set = map[*Listener]struct{}{}
		h.listeners[channel] = set
	}
	set[l] = struct{}{}
	if len(set) > 1 || h.heldBack(channel) {
		return
	}
	// Under mu, so SUBSCRIBE and UNSUBSCRIBE of one channel reach Redis in
	// the order of the listener set's changes.
	h.subscribe(channel)
}

// Unlisten removes l; the last listener of a channel unsubscribes from it,
// before unlisten returns.
func (h *Hub) Unlisten(channel string, l *Listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.listeners[channel]
	if _, ok := set[l]; !ok {
		return
	}
	delete(set, l)
	if len(set) > 0 {
		return
	}
	delete(h.listeners, channel)
	if h.ps != nil && h.ps.Unsubscribe(context.Background(), channel) == nil {
		h.unsubscribing(true)
	}
}

// unsubscribing counts an UNSUBSCRIBE written (sent) or confirmed.
func (h *Hub) unsubscribing(sent bool) {
	h.unsubMu.Lock()
	defer h.unsubMu.Unlock()
	if sent {
		if len(h.unsubSent) == 0 {
			h.unsubIdle = make(chan struct{})
		}
		h.unsubSent = append(h.unsubSent, time.Now())
		return
	}
	if len(h.unsubSent) > 0 {
		h.unsubSent = h.unsubSent[1:]
	}
	h.idleIfNone()
}

// idleIfNone closes idle when no UNSUBSCRIBE waits for its confirmation.
// Called with unsubMu held.
func (h *Hub) idleIfNone() {
	if len(h.unsubSent) == 0 && h.unsubIdle != nil {
		close(h.unsubIdle)
		h.unsubIdle = nil
	}
}

// settle waits until Redis confirmed the UNSUBSCRIBEs written so far, so
// that a component's Close returns once nothing of it talks to Redis; at
// most until settleWait after the last was written. One written longer
// ago than that is forgotten: its connection broke before Redis confirmed
// it (go-redis does not send it again on the new connection), and it must
// not keep every later Close waiting.
func (h *Hub) settle() {
	h.unsubMu.Lock()
	for len(h.unsubSent) > 0 && time.Since(h.unsubSent[0]) >= settleWait {
		h.unsubSent = h.unsubSent[1:]
	}
	h.idleIfNone()
	idle := h.unsubIdle
	var wait time.Duration
	if n := len(h.unsubSent); n > 0 {
		wait = settleWait - time.Since(h.unsubSent[n-1])
	}
	h.unsubMu.Unlock()
	if idle == nil {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// settleWait bounds settle.
const settleWait = time.Second

// subscribe sends SUBSCRIBE for channels, opening the pub/sub connection
// with the first. go-redis adds them to the channels it subscribes again
// after a reconnect only once the command was written: a failed write (the
// connection was down) is sent once more, so the channels are in that
// list either way. Called with mu held.
func (h *Hub) subscribe(channels ...string) {
	if h.ps == nil {
		h.open(channels)
		return
	}
	if h.ps.Subscribe(context.Background(), channels...) != nil {
		_ = h.ps.Subscribe(context.Background(), channels...)
	}
}

// open starts the pub/sub connection with its first channels (a Ring
// refuses a subscription without one). Called with mu held.
func (h *Hub) open(channels []string) {
	h.ps = h.client.Subscribe(context.Background(), channels...)
	h.done = make(chan struct{})
	// The health check pings an idle connection (go-redis's default, 3s,
	// would cost a call per 3s for nothing) and reconnects a dead one; the
	// confirmations of the subscriptions it then sends again tell every
	// listener that what was published meanwhile is lost.
	ch := h.ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(pubsubHealthCheck))
	go func() {
		defer close(h.done)
		for m := range ch {
			switch m := m.(type) {
			case *redis.Message:
				h.dispatch(Note{Channel: m.Channel, Payload: m.Payload})
			case *redis.Subscription:
				switch m.Kind {
				case "subscribe":
					h.dispatch(Note{Channel: m.Channel, Subscribed: true})
				case "unsubscribe":
					h.unsubscribing(false)
				}
			}
		}
	}()
}

// pubsubHealthCheck is how often an idle pub/sub connection pings Redis.
const pubsubHealthCheck = 30 * time.Second

// dispatch passes a note to the listeners of its channel, outside mu: a
// listener may take locks held by code that calls listen. A listener
// removed meanwhile may get the note still.
func (h *Hub) dispatch(n Note) {
	h.mu.Lock()
	set := h.listeners[n.Channel]
	ls := make([]*Listener, 0, len(set))
	for l := range set {
		ls = append(ls, l)
	}
	h.mu.Unlock()
	for _, l := range ls {
		l.Fn(n)
	}
}

// notifyAll tells every listener that what was published on its channel
// may have been lost, as a resubscription does.
func (h *Hub) notifyAll() {
	h.mu.Lock()
	channels := make([]string, 0, len(h.listeners))
	for c := range h.listeners {
		channels = append(channels, c)
	}
	h.mu.Unlock()
	for _, c := range channels {
		h.dispatch(Note{Channel: c, Subscribed: true})
	}
}

// channelGrant is whether Redis lets the client subscribe to the channels
// of a key prefix. A SUBSCRIBE refused by an ACL is silent on a connection
// whose messages go to a channel (go-redis drops the error), and Redis
// refuses a whole SUBSCRIBE for one refused channel, as go-redis sends
// every channel again in one when it reconnects: so the grant is probed
// on a connection of its own, once when granted and while refused at most
// once per probeEvery, and the channels of a refused prefix are held back
// (not subscribed) until it is granted.
type channelGrant struct {
	mu      sync.Mutex
	granted bool
	err     error     // the refusal, while refused
	probed  time.Time // the last probe
	refused atomic.Bool
}

// ProbeEvery bounds how often a refused grant is probed again.
const ProbeEvery = time.Second

// ErrRing says why notifications cannot work on a *redis.Ring.
var ErrRing = errors.New("the client is a *redis.Ring: a script's PUBLISH reaches only the subscribers of its own shard, " +
	"so notifications are not used (use a *redis.Client, a Sentinel client or a *redis.ClusterClient)")

// ChannelsGranted reports nil when Redis lets the client subscribe to the
// channels of prefix, its refusal (isNoPerm, or errRing), or another error
// (a failed probe: tried again at the next call).
func (h *Hub) ChannelsGranted(ctx context.Context, prefix string) error {
	if _, ok := h.client.(*redis.Ring); ok {
		return ErrRing
	}
	h.mu.Lock()
	g := h.prefixes[prefix]
	if g == nil {
		g = &channelGrant{}
		h.prefixes[prefix] = g
	}
	h.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.granted {
		return nil
	}
	if g.err != nil && time.Since(g.probed) < ProbeEvery {
		return g.err
	}
	err := h.probeSubscribe(ctx, prefix+":registered")
	g.probed = time.Now()
	switch {
	case err == nil:
		g.granted, g.err = true, nil
		if g.refused.Swap(false) {
			h.subscribePrefix(prefix)
		}
	case IsNoPerm(err):
		g.err = err
		if !g.refused.Swap(true) {
			h.unsubscribePrefix(prefix)
		}
	}
	return err
}

// heldBack reports whether a channel's key prefix is refused. Called with
// mu held.
func (h *Hub) heldBack(channel string) bool {
	for prefix, g := range h.prefixes {
		if g.refused.Load() && strings.HasPrefix(channel, prefix+":") {
			return true
		}
	}
	return false
}

// channelsOf returns the listened channels of a key prefix. Called with mu
// held.
func (h *Hub) channelsOf(prefix string) []string {
	var channels []string
	for c := range h.listeners {
		if strings.HasPrefix(c, prefix+":") {
			channels = append(channels, c)
		}
	}
	return channels
}

// subscribePrefix subscribes to the listened channels of a prefix Redis
// now grants.
func (h *Hub) subscribePrefix(prefix string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if channels := h.channelsOf(prefix); len(channels) > 0 && !h.closed {
		h.subscribe(channels...)
	}
}

// unsubscribePrefix takes the channels of a refused prefix off the pub/sub
// connection, so a reconnect's SUBSCRIBE of every channel is not refused
// for them.
func (h *Hub) unsubscribePrefix(prefix string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if channels := h.channelsOf(prefix); len(channels) > 0 && h.ps != nil && h.ps.Unsubscribe(context.Background(), channels...) == nil {
		for range channels {
			h.unsubscribing(true)
		}
	}
}

// probeSubscribe subscribes to channel on a connection of its own and
// returns Redis's answer.
func (h *Hub) probeSubscribe(ctx context.Context, channel string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ps := h.client.Subscribe(ctx, channel)
	defer ps.Close()
	_, err := ps.Receive(ctx)
	return err
}

// laneSet is the lanes of one node: lanes workers taking jobs from queue.
// On a cluster, node is its master: commands without keys go to it
// directly (the cluster client would send them to a node at random).
type laneSet struct {
	queue chan *job
	node  *redis.Client
}

// job is work queued for a lane: commands to send (all for one node), or a
// function to run alone in a lane (commands a pipeline cannot carry, such
// as INFO to every master).
type job struct {
	ctx   context.Context
	cmds  []redis.Cmder
	fn    func()
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
func (h *Hub) do(ctx context.Context, cmds []redis.Cmder) error {
	if h.cluster == nil {
		return h.run(&job{ctx: ctx, cmds: cmds}, "", nil)
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
		return h.run(&job{ctx: ctx, cmds: cmds}, order[0], t.node)
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, addr := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := byNode[addr]
			errs[i] = h.run(&job{ctx: ctx, cmds: t.cmds}, addr, t.node)
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

// run queues a job on the lanes of node and waits until it is through. A
// job not yet taken when ctx ends is dropped with ctx's error; a job taken
// runs to its end.
func (h *Hub) run(j *job, addr string, node *redis.Client) error {
	ls := h.lanesOf(addr, node)
	if ls == nil {
		return errHubClosed
	}
	j.done = make(chan struct{})
	select {
	case ls.queue <- j:
	case <-h.stop:
		return errHubClosed
	case <-j.ctx.Done():
		return h.noLane(j.ctx)
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
		batch = append(batch[:0], first)
		var alone *job // a function job found while filling: run after the batch
	fill:
		for n := len(first.cmds); n < maxBatch; {
			select {
			case j := <-ls.queue:
				if j.fn != nil {
					alone = j
					break fill
				}
				batch = append(batch, j)
				n += len(j.cmds)
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
// the first (without its cancellation: the pipeline is shared), so the
// client's hooks see its values.
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
		ctx := context.WithoutCancel(sent[0].ctx)
		for _, p := range []redis.Pipeliner{pipe, direct} {
			if p != nil && p.Len() > 0 {
				h.exec(ctx, p)
			}
		}
	}
	for _, j := range sent {
		close(j.done)
	}
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
	return h.run(&job{ctx: ctx, fn: fn}, addr, node)
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

// Gated is the client as the library's background work uses it: each
// command goes through the hub's lanes. Only the commands that work needs
// are here, so a new one cannot bypass the lanes unseen. An error of the
// client's pool says what happened and what to set (see explainPool); the
// caller logs it as any error, rate-limited.
type Gated struct {
	h *Hub
}

func NewGated(h *Hub) *Gated { return &Gated{h: h} }

// Cmds is what the library's background work calls on Redis: a gated
// client, or the client itself where the application's own call does the
// work (Publisher, Inspector).
type Cmds interface {
	redis.Scripter
	XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd
	Exists(ctx context.Context, keys ...string) *redis.IntCmd
	SMembers(ctx context.Context, key string) *redis.StringSliceCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	HGet(ctx context.Context, key, field string) *redis.StringCmd
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	ZScore(ctx context.Context, key, member string) *redis.FloatCmd
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
	Time(ctx context.Context) *redis.TimeCmd
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
	Pipeline() redis.Pipeliner
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

var (
	_ Cmds = (*Gated)(nil)
	_ Cmds = redis.UniversalClient(nil)
)

// sendCmd sends one command through the lanes: build makes it (on a
// pipeline that only collects it).
func sendCmd[C redis.Cmder](g *Gated, ctx context.Context, build func(redis.Pipeliner) C) C {
	c := build(g.h.client.Pipeline())
	if err := g.h.do(ctx, []redis.Cmder{c}); err != nil {
		c.SetErr(err)
	}
	return c
}

func (g *Gated) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, script, keys, args...) })
}

func (g *Gated) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha1, keys, args...) })
}

func (g *Gated) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalRO(ctx, script, keys, args...) })
}

func (g *Gated) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalShaRO(ctx, sha1, keys, args...) })
}

// ScriptExists and ScriptLoad go to every master on a cluster (go-redis
// sends them to each): not a command a pipeline can carry there. The
// background work does not call them (redis.Script's Run loads a script
// with EVAL); they are here for redis.Scripter.
func (g *Gated) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	var c *redis.BoolSliceCmd
	if err := g.h.Exclusive(ctx, nil, func() { c = g.h.client.ScriptExists(ctx, hashes...) }); err != nil {
		c = redis.NewBoolSliceCmd(ctx)
		c.SetErr(err)
	}
	return c
}

func (g *Gated) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	var c *redis.StringCmd
	if err := g.h.Exclusive(ctx, nil, func() { c = g.h.client.ScriptLoad(ctx, script) }); err != nil {
		c = redis.NewStringCmd(ctx)
		c.SetErr(err)
	}
	return c
}

func (g *Gated) XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.XStreamSliceCmd { return p.XReadGroup(ctx, a) })
}

func (g *Gated) Exists(ctx context.Context, keys ...string) *redis.IntCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.IntCmd { return p.Exists(ctx, keys...) })
}

func (g *Gated) SMembers(ctx context.Context, key string) *redis.StringSliceCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.StringSliceCmd { return p.SMembers(ctx, key) })
}

func (g *Gated) Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.StatusCmd { return p.Set(ctx, key, value, expiration) })
}

func (g *Gated) HGet(ctx context.Context, key, field string) *redis.StringCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.StringCmd { return p.HGet(ctx, key, field) })
}

func (g *Gated) HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.SliceCmd { return p.HMGet(ctx, key, fields...) })
}

func (g *Gated) ZScore(ctx context.Context, key, member string) *redis.FloatCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.FloatCmd { return p.ZScore(ctx, key, member) })
}

func (g *Gated) ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.IntCmd { return p.ZRem(ctx, key, members...) })
}

func (g *Gated) Time(ctx context.Context) *redis.TimeCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.TimeCmd { return p.Time(ctx) })
}

func (g *Gated) Publish(ctx context.Context, channel string, message any) *redis.IntCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.IntCmd { return p.Publish(ctx, channel, message) })
}

// Pipeline returns a pipeline whose commands go through the lanes
// together (per node, on a cluster).
func (g *Gated) Pipeline() redis.Pipeliner {
	return &gatedPipe{Pipeliner: g.h.client.Pipeline(), g: g}
}

func (g *Gated) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	p := g.Pipeline()
	if err := fn(p); err != nil {
		return nil, err
	}
	return p.Exec(ctx)
}

type gatedPipe struct {
	redis.Pipeliner
	g *Gated
}

// Exec sends the queued commands through the lanes, with other commands
// queued there, and returns the first error among them, as go-redis does.
func (p *gatedPipe) Exec(ctx context.Context) ([]redis.Cmder, error) {
	cmds := p.Pipeliner.Cmds()
	p.Pipeliner.Discard()
	if len(cmds) == 0 {
		return nil, nil
	}
	if err := p.g.h.do(ctx, cmds); err != nil {
		for _, c := range cmds {
			if c.Err() == nil {
				c.SetErr(err)
			}
		}
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return cmds, err
		}
	}
	return cmds, nil
}

// explain is explainPool for a command sent in a lane, noting the error
// for the commands that wait for a lane meanwhile.
func (h *Hub) explain(err error) error {
	err = ExplainPool(h.client, err)
	if p, ok := err.(*poolError); ok {
		h.poolErr.Store(&poolError{err: p.err, hint: p.hint, at: time.Now()})
	}
	return err
}

// ExplainPool returns err, when the client's pool gave no connection, with
// what happened and what to set; any other error (or nil) as it is.
func ExplainPool(client redis.UniversalClient, err error) error {
	if err == nil {
		return nil // and no allocation: it runs after every call
	}
	exhausted := errors.Is(err, redis.ErrPoolExhausted)
	var explained *poolError
	if !errors.Is(err, redis.ErrPoolTimeout) && !exhausted || errors.As(err, &explained) {
		return err
	}
	size, timeout := "", ""
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		size, timeout = fmt.Sprint(o.PoolSize), o.PoolTimeout.String()
		if exhausted {
			size = fmt.Sprintf("%d (MaxActiveConns)", o.MaxActiveConns)
		}
	case *redis.ClusterClient:
		o := c.Options()
		size, timeout = fmt.Sprintf("%d per node", o.PoolSize), o.PoolTimeout.String()
		if exhausted {
			size = fmt.Sprintf("%d per node (MaxActiveConns)", o.MaxActiveConns)
		}
	}
	what := "all connections of the Redis client's pool"
	if size != "" {
		what = fmt.Sprintf("all %s connections of the Redis client's pool", size)
	}
	wait := ""
	if timeout != "" && !exhausted {
		wait = " for PoolTimeout (" + timeout + ")"
	}
	return &poolError{err: err, hint: fmt.Sprintf("%s were in use%s, by the application's own commands (redisdelay's background work uses at most %d per node at a time, "+
		"see docs/operations.md#connections); raise the client's PoolSize (redis.Options.PoolSize, by default 10 per GOMAXPROCS), "+
		"or give long blocking commands a client of their own", what, wait, Lanes)}
}

// poolError is an error of the client's pool with what to do about it.
type poolError struct {
	err  error
	hint string
	at   time.Time // when it happened (hub.poolErr)
}

func (e *poolError) Error() string { return e.err.Error() + ": " + e.hint }
func (e *poolError) Unwrap() error { return e.err }

// HubShared reports whether the process holds a hub of the client: some
// component acquired it and has not released it yet.
func HubShared(client redis.UniversalClient) bool {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	return hubs[client] != nil
}
