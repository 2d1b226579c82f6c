package consumption

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// sweep peeks, once per BlockTime, at each subscription waiting for its
// bell (peek.lua, many per pipeline, through the lanes), and rings
// the bell of those that have something to read: entries a writer added
// without ringing (an older version of this library). It runs until ctx
// ends: the Subscriber's subscriptions all ended (see activate).
func (s *Subscriber) sweep(ctx context.Context) {
	every := min(max(s.config.BlockTime/10, 10*time.Millisecond), 5*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		denied := s.bellsDenied.Load()
		var due []*subscription
		s.idleMu.Lock()
		for sub, last := range s.idle {
			if denied || now.Sub(last) >= s.config.BlockTime {
				due = append(due, sub)
				s.idle[sub] = now
			}
		}
		s.idleMu.Unlock()
		if denied {
			// They wait without a poll: wake them to poll (watchGrant did,
			// unless they started waiting as it found the refusal).
			for _, sub := range due {
				sub.reads.ring()
			}
			continue
		}
		for len(due) > 0 {
			n := min(len(due), sweepBatch)
			s.peek(ctx, due[:n])
			due = due[n:]
		}
	}
}

// wakeIdle wakes every subscription waiting for its bell.
func (s *Subscriber) wakeIdle() {
	s.idleMu.Lock()
	defer s.idleMu.Unlock()
	for sub := range s.idle {
		sub.reads.ring()
	}
}

// sweepBatch is how many subscriptions one pipeline of peeks covers.
const sweepBatch = 1000

// peek peeks at subs in one pipeline and rings those with something to
// do, or whose peek failed (their read finds out why).
func (s *Subscriber) peek(ctx context.Context, subs []*subscription) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	shards := make([]store.Shard, len(subs))
	consumers := make([]string, len(subs))
	for i, sub := range subs {
		shards[i], consumers[i] = sub.shard, sub.consumer
	}
	for i, p := range store.Peek(ctx, s.redis, shards, s.config.ConsumerGroup, consumers) {
		sub := subs[i]
		if p.Groups {
			sub.reads.serveGroups()
		}
		if p.Pending {
			// It holds nothing: a read whose reply was lost (go-redis
			// retried it) took them. Its next read reads them first.
			sub.mu.Lock()
			sub.recheck = true
			sub.mu.Unlock()
		}
		if p.Read || p.Groups || p.Pending {
			sub.reads.ring()
		}
	}
}

// watchGrant checks, while subscriptions run (see activate), that Redis
// lets the client subscribe to the channels of the key prefix (see
// channelGrant), probing until it knows or ctx ends. While it refuses,
// subscriptions poll (see pollEvery; the sweep wakes those already
// waiting) and the refusal is logged once and checked again every second.
func (s *Subscriber) watchGrant(ctx context.Context) {
	t := time.NewTicker(store.ProbeEvery)
	defer t.Stop()
	for {
		err := s.hub.ChannelsGranted(ctx, s.config.Keys.Prefix)
		refused := store.IsNoPerm(err) || errors.Is(err, store.ErrRing)
		switch {
		case err == nil && s.bellsDenied.Swap(false):
			s.logger.Info("redisdelay: Redis now grants the Subscriber the notification channels", watermill.LogFields{"key_prefix": s.config.Keys.Prefix})
			return
		case err == nil:
			return
		case refused && !s.bellsDenied.Swap(true):
			s.wakeIdle() // to poll from now on
			what := "grant its Redis user the channels: ACL SETUSER <user> &" + s.config.Keys.Prefix + ":*"
			if errors.Is(err, store.ErrRing) {
				what = "or use another kind of client"
			}
			s.logger.Error("redisdelay: the Subscriber cannot be told of new messages: idle subscriptions read every "+deniedPoll.String()+
				" instead; "+what, err, nil)
		}
		if errors.Is(err, store.ErrRing) {
			return // for good
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
