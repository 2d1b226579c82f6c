// Package balance shares the partitions of a topic evenly among its
// members: the ordered subscriptions of a consumer group
// (internal/consumption), or the schedulers of the topic
// (internal/scheduling).
package balance

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Balance shares the partitions of a topic evenly among its members. One
// is shared by the partition subscriptions of one ordered
// Subscribe call, or by the partition loops of one scheduler; owned counts
// the partitions (or scheduling leases) they hold, and live and fewest come
// from the member list (members.lua).
type Balance struct {
	parts  int
	owned  atomic.Int32 // partitions owned
	live   atomic.Int32 // members alive, as last read
	fewest atomic.Int32 // the fewest partitions another member owns, as last read; -1: no other

	// A partition was given up as stuck (see Bench): until benchedUntil
	// (unix ns) the member is out of the member list and takes none, so the
	// others share them all. stalls counts the give-ups since a message
	// was last handed out; each doubles the time out.
	benchedUntil atomic.Int64
	stalls       atomic.Int32
}

// New returns the Balance of a topic of parts partitions.
func New(parts int) *Balance {
	b := &Balance{parts: parts}
	b.fewest.Store(-1)
	return b
}

// Share is how many partitions one member may own.
func (o *Balance) Share() int32 {
	n := max(o.live.Load(), 1)
	return (int32(o.parts) + n - 1) / n
}

// Surplus reports whether a member owning owned partitions should
// give one up: it owns more than its share, or two more than another.
func (o *Balance) Surplus(owned int32) bool {
	f := o.fewest.Load()
	return owned > o.Share() || (f >= 0 && owned >= f+2)
}

// MayTake reports whether a member owning owned partitions may take a
// free one: below its share, and owning no more than the others, so free
// partitions go to the members owning fewest first. A partition left free
// for a round (overdue: the member declined it last time) goes to any
// member below its share, so stale counts never leave one unowned.
func (o *Balance) MayTake(owned int32, overdue bool) bool {
	f := o.fewest.Load()
	return owned < o.Share() && (overdue || f < 0 || owned <= f)
}

// Beat renews a member's heartbeat in a member list (members.lua) for ttl,
// or with ttl 0 removes it, and reads the list's state into o.
func (o *Balance) Beat(ctx context.Context, client redis.Scripter, l store.MemberList, member string, ttl time.Duration) error {
	r, err := store.Members(ctx, client, l, member, ttl, o.owned.Load())
	if err != nil {
		return err
	}
	o.live.Store(int32(r.Live))
	o.fewest.Store(int32(r.Fewest))
	return nil
}

// Bench takes the member out of the member list after a partition was
// given up as stuck: for a lease, doubling with each give-up in a row (up
// to 32 leases), so an application that stopped receiving leaves its
// partitions to the group's other members.
func (o *Balance) Bench(lease time.Duration) {
	n := o.stalls.Add(1)
	o.benchedUntil.Store(time.Now().Add(lease << min(n-1, 5)).UnixNano())
}

// Benched reports whether the member is out of the member list (see
// Bench).
func (o *Balance) Benched() bool {
	return time.Now().UnixNano() < o.benchedUntil.Load()
}

// Parts is the topic's partition count.
func (o *Balance) Parts() int { return o.parts }

// Owned counts the partitions (or leases) the member holds.
func (o *Balance) Owned() *atomic.Int32 { return &o.owned }

// Handed records a message handed out: a give-up as stuck that follows
// is the first in a row again (see Bench).
func (o *Balance) Handed() {
	if o.stalls.Load() != 0 {
		o.stalls.Store(0)
	}
}
