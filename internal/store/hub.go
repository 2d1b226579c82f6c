package store

import (
	"reflect"
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
//     idle subscriptions of new entries (see ReadNew). notify.go.
//   - Every other command goes through the client's pool in lanes: lanes
//     workers per Redis node, each sending what is queued for its node
//     when it is free in one pipeline. Subscriptions read without
//     blocking (an idle one waits for its bell, see waitBell), so none
//     holds a connection between commands, and a node that fails stalls
//     only its own lanes. lanes.go; the background work calls Redis
//     through them as a Gated client (gated.go), whose pool errors say
//     what happened and what to set (poolerr.go).
//   - A ClusterClient reloads the cluster's layout (CLUSTER SLOTS) now and
//     then from a node at random, taking a connection of that node's pool
//     while the lanes may hold theirs: go-redis's, out of the library's
//     hands.
//
// The components sharing a client share these through its hub, found by
// the client's identity and released when the last of them closes.
// Publish calls are the application's own load and go through the pool
// beside the lanes, as do the Inspector's.

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

	gatherWindow time.Duration // see gather; the tests lengthen it
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
		gatherWindow: gatherWindow,
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

// HubShared reports whether the process holds a hub of the client: some
// component acquired it and has not released it yet.
func HubShared(client redis.UniversalClient) bool {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	return hubs[client] != nil
}
