package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

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

// ListenMarked listens to channel as Listen does, and to its LevelMark
// (before it, so that PUBSUB NUMSUB never counts this process on the
// channel without its mark); the returned func undoes both, the mark last.
func (h *Hub) ListenMarked(channel string, l *Listener) (unlisten func()) {
	mark := &Listener{Fn: func(Note) {}} // its own: a listener set counts it once
	h.Listen(LevelMark(channel), mark)
	h.Listen(channel, l)
	return func() {
		h.Unlisten(channel, l)
		h.Unlisten(LevelMark(channel), mark)
	}
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
