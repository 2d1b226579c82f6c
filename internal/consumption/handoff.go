// The hand-off of a scheduler's tick to a subscription of its own process.
//
// Without it a message falling due costs two round trips and a note: the
// scheduler's promote.lua call, the bell's note to the subscriptions
// waiting for it, and their read. When the Subscriber's own scheduler
// holds the partition's lease and one of its subscriptions of that
// partition waits for its bell, the scheduler hands the call to that
// subscription instead (Subscriber.Promote): the subscription runs it in
// the pipeline of its next read, which so finds what it moved. The ring
// still reaches every other listener, in this process or another, of any
// release; it carries the subscription's name as its note, by which the
// subscription knows its own ring and is not woken by it (see listen).

package consumption

import (
	"context"
	"time"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// handoff is a scheduler's tick handed to a subscription: the promote.lua
// call to run before its next read, and where to send what it did.
type handoff struct {
	args  store.PromoteArgs
	reply chan handoffReply // capacity 1: the subscription never waits on it
}

// handoffReply is what became of a hand-off: ran, the call's reply or
// error; not ran, the subscription did not read (paused, a history read,
// its end) and the scheduler makes the call itself.
type handoffReply struct {
	r   store.PromoteReply
	ran bool
	err error
}

// Promote hands the tick a (of a scheduler of this process) of the
// partition sh to a subscription that waits for that partition's bell,
// and returns what the call did. ran is false when no subscription could
// take it (none waits, or each is busy, ordered or rate limited: their
// reads go through steps of their own), or the one that took it did not
// read: the caller then makes the call itself.
func (s *Subscriber) Promote(ctx context.Context, sh store.Shard, a store.PromoteArgs) (r store.PromoteReply, ran bool, err error) {
	h := &handoff{args: a, reply: make(chan handoffReply, 1)}
	if !s.handOff(sh, h) {
		return r, false, nil
	}
	select {
	case rep := <-h.reply:
		if !rep.ran {
			return r, false, nil
		}
		return rep.r, true, rep.err
	case <-ctx.Done():
		return r, false, ctx.Err()
	}
}

// handOff gives h to a subscription of sh waiting for its bell, and
// reports whether one took it.
func (s *Subscriber) handOff(sh store.Shard, h *handoff) bool {
	s.idleMu.Lock()
	defer s.idleMu.Unlock()
	for _, sub := range s.idleOf[sh] {
		if sub.order != nil || s.config.rateLimit(sub.topic).Messages > 0 {
			continue
		}
		h.args.Note = sub.note()
		select {
		case sub.reads.handoff <- h: // it waits in waitBell's select
			return true
		default:
		}
	}
	return false
}

// note is what the bell is rung with by a promote.lua call this
// subscription's read runs (store.PromoteArgs.Note): its consumer name,
// unique among the listeners of its partition's bell.
func (sub *subscription) note() string { return sub.consumer }

// takeHandoff returns the hand-off the subscription took, if any, for its
// next read to run; the caller replies to it.
func (r *reads) takeHandoff() *handoff {
	h := r.promote
	r.promote = nil
	return h
}

// declineHandoff tells the scheduler whose hand-off the subscription took
// that it did not read (it makes the call itself).
func (r *reads) declineHandoff() {
	if h := r.takeHandoff(); h != nil {
		h.reply <- handoffReply{}
	}
}

// waiting records that sub waits for its bell (waitBell), for the sweep
// and for hand-offs; waited that it no longer does.
func (s *Subscriber) waiting(sub *subscription) {
	s.idleMu.Lock()
	defer s.idleMu.Unlock()
	s.idle[sub] = time.Now()
	s.idleOf[sub.shard] = append(s.idleOf[sub.shard], sub)
}

func (s *Subscriber) waited(sub *subscription) {
	s.idleMu.Lock()
	defer s.idleMu.Unlock()
	delete(s.idle, sub)
	subs := s.idleOf[sub.shard]
	for i, o := range subs {
		if o == sub {
			subs[i] = subs[len(subs)-1]
			subs = subs[:len(subs)-1]
			break
		}
	}
	if len(subs) == 0 {
		delete(s.idleOf, sub.shard)
	} else {
		s.idleOf[sub.shard] = subs
	}
}
