package redisdelay

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// balance shares the partitions of a topic evenly among its members: the
// ordered subscriptions of a consumer group, or the schedulers of the
// topic. One is shared by the partition subscriptions of one ordered
// Subscribe call, or by the partition loops of one scheduler; owned counts
// the partitions (or scheduling leases) they hold, and live and fewest come
// from the member list (members.lua).
type balance struct {
	parts  int
	owned  atomic.Int32 // partitions owned
	live   atomic.Int32 // members alive, as last read
	fewest atomic.Int32 // the fewest partitions another member owns, as last read; -1: no other

	// A partition was given up as stuck (see abandon): until benchedUntil
	// (unix ns) the member is out of the member list and takes none, so the
	// others share them all. stalls counts the give-ups since a message
	// was last handed out; each doubles the time out.
	benchedUntil atomic.Int64
	stalls       atomic.Int32
}

func newBalance(parts int) *balance {
	b := &balance{parts: parts}
	b.fewest.Store(-1)
	return b
}

// share is how many partitions one member may own.
func (o *balance) share() int32 {
	n := max(o.live.Load(), 1)
	return (int32(o.parts) + n - 1) / n
}

// surplus reports whether a member owning owned partitions should
// give one up: it owns more than its share, or two more than another.
func (o *balance) surplus(owned int32) bool {
	f := o.fewest.Load()
	return owned > o.share() || (f >= 0 && owned >= f+2)
}

// mayTake reports whether a member owning owned partitions may take a
// free one: below its share, and owning no more than the others, so free
// partitions go to the members owning fewest first. A partition left free
// for a round (overdue: the member declined it last time) goes to any
// member below its share, so stale counts never leave one unowned.
func (o *balance) mayTake(owned int32, overdue bool) bool {
	f := o.fewest.Load()
	return owned < o.share() && (overdue || f < 0 || owned <= f)
}

// beat renews a member's heartbeat in a member list (members.lua) for ttl,
// or with ttl 0 removes it, and reads the list's state into o.
func (o *balance) beat(ctx context.Context, client redis.Scripter, l store.MemberList, member string, ttl time.Duration) error {
	r, err := store.Members(ctx, client, l, member, ttl, o.owned.Load())
	if err != nil {
		return err
	}
	o.live.Store(int32(r.Live))
	o.fewest.Store(int32(r.Fewest))
	return nil
}

// bench takes the member out of the member list after a partition was
// given up as stuck: for a lease, doubling with each give-up in a row (up
// to 32 leases), so an application that stopped receiving leaves its
// partitions to the group's other members.
func (o *balance) bench(lease time.Duration) {
	n := o.stalls.Add(1)
	o.benchedUntil.Store(time.Now().Add(lease << min(n-1, 5)).UnixNano())
}

func (o *balance) benched() bool {
	return time.Now().UnixNano() < o.benchedUntil.Load()
}

// The scheduling service's view of a balance (scheduling.Balance): the
// leases of a topic's partitions shared among its schedulers.

func (o *balance) Parts() int           { return o.parts }
func (o *balance) Owned() *atomic.Int32 { return &o.owned }
func (o *balance) Beat(ctx context.Context, client redis.Scripter, l store.MemberList, member string, ttl time.Duration) error {
	return o.beat(ctx, client, l, member, ttl)
}
func (o *balance) Surplus(owned int32) bool               { return o.surplus(owned) }
func (o *balance) MayTake(owned int32, overdue bool) bool { return o.mayTake(owned, overdue) }
