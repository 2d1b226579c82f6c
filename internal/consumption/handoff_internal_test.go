package consumption

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// The hand-off's ways: no subscription waits, or the one waiting is
// another partition's, ordered or rate limited (the scheduler calls
// itself); one takes it and declines (paused, a history read, its end);
// one runs it, with the tick's reply or error; the scheduler's end while
// it waits.
func TestHandoff_Ways(t *testing.T) {
	ctx := context.Background()
	a := store.PromoteArgs{Owner: "o"}
	keys := store.Keys{Prefix: "p"}
	sh := keys.Shard("t", 0)
	newSubscriber := func(limited bool) *Subscriber {
		c := Config{Keys: keys}
		if limited {
			c.TopicRateLimits = map[string]Rate{"t": {Messages: 1, Per: time.Second}}
		}
		return New(context.Background(), c, nil, store.NewGated(nil), nil)
	}
	// waiting registers a subscription as waiting for its bell and
	// answers the first hand-off it takes with answer (nil: it only
	// waits, and the caller looks at what it was sent). Its channel has
	// room for one: it stands for a subscription already in waitBell's
	// select, so a hand-off it may not take would be sent, and seen.
	waiting := func(s *Subscriber, shard store.Shard, ordered bool, answer func(r *reads)) (handoffs chan *handoff) {
		sub := &subscription{s: s, topic: "t", shard: shard, consumer: "c1", reads: reads{handoff: make(chan *handoff, 1)}}
		if ordered {
			sub.order = &ordering{}
		}
		s.waiting(sub)
		if answer == nil {
			return sub.reads.handoff
		}
		go func() {
			h := <-sub.reads.handoff
			if h.args.Note != "c1" {
				t.Errorf("the ring's note is %q, not the subscription's name", h.args.Note)
			}
			sub.reads.promote = h
			answer(&sub.reads)
		}()
		return sub.reads.handoff
	}

	t.Run("none waits", func(t *testing.T) {
		_, ran, err := newSubscriber(false).Promote(ctx, sh, a)
		require.NoError(t, err)
		require.False(t, ran)
	})
	t.Run("not one that may take it", func(t *testing.T) {
		// bounded: a hand-off sent where it may not go is never answered
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s := newSubscriber(false)
		others := []chan *handoff{
			waiting(s, keys.Shard("t", 1), false, nil), // another partition
			waiting(s, sh, true, nil),                  // ordered
		}
		_, ran, err := s.Promote(ctx, sh, a)
		require.NoError(t, err)
		require.False(t, ran)
		limited := newSubscriber(true)
		others = append(others, waiting(limited, sh, false, nil))
		_, ran, err = limited.Promote(ctx, sh, a)
		require.NoError(t, err)
		require.False(t, ran)
		for k, ch := range others {
			require.Empty(t, ch, "subscription %d took a hand-off it may not", k)
		}
	})
	t.Run("declined", func(t *testing.T) {
		s := newSubscriber(false)
		waiting(s, sh, false, func(r *reads) { r.declineHandoff() })
		_, ran, err := s.Promote(ctx, sh, a)
		require.NoError(t, err)
		require.False(t, ran)
	})
	t.Run("ran", func(t *testing.T) {
		for _, want := range []error{nil, errors.New("ERR tick failed")} {
			s := newSubscriber(false)
			waiting(s, sh, false, func(r *reads) {
				h := r.takeHandoff()
				h.reply <- handoffReply{r: store.PromoteReply{Moved: 3, Held: true}, ran: true, err: want}
				r.declineHandoff() // taken: nothing more to answer
			})
			rep, ran, err := s.Promote(ctx, sh, a)
			require.True(t, ran)
			require.Equal(t, want, err)
			require.Equal(t, int64(3), rep.Moved)
		}
	})
	t.Run("the scheduler ends while it waits", func(t *testing.T) {
		s := newSubscriber(false)
		ended, cancel := context.WithCancel(ctx)
		waiting(s, sh, false, func(*reads) { cancel() }) // takes it, answers never
		_, ran, err := s.Promote(ended, sh, a)
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, ran)
	})
}

// A subscription that took a hand-off and then finds its group paused
// declines it before it waits (up to BlockTime) for the resume: the
// scheduler runs the tick at once, for the other groups.
func TestHandoff_DeclinedBeforeThePauseWait(t *testing.T) {
	srv := redistest.ForTest(t, redistest.Options{})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	hub := store.AcquireHub(client)
	defer hub.Release()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := store.Keys{Prefix: "p"}
	s := New(ctx, Config{Keys: keys, ConsumerGroup: "g", BlockTime: time.Hour}, hub, store.NewGated(hub), watermill.NopLogger{})
	sh := keys.Shard("t", 0)
	err, _ := store.Pause(ctx, client, sh, "g")
	require.NoError(t, err)

	sub := &subscription{s: s, topic: "t", shard: sh, consumer: "c1",
		reads: reads{handoff: make(chan *handoff)}, flow: flow{wake: make(chan struct{}, 1)}}
	sub.flow.notified.Store(true) // a pause change was announced: the gate asks Redis
	h := &handoff{reply: make(chan handoffReply, 1)}
	sub.reads.promote = h
	done := make(chan struct{})
	go func() {
		defer close(done)
		count, err := sub.gate(ctx)
		assert.NoError(t, err)
		assert.Zero(t, count, "paused: nothing to read")
	}()
	select {
	case rep := <-h.reply:
		require.False(t, rep.ran)
	case <-time.After(5 * time.Second):
		t.Fatal("the hand-off was not declined before the pause's wait")
	}
	cancel()
	<-done
}

// A failed read declines a hand-off before its pause (up to 2 s).
func TestHandoff_DeclinedBeforeTheRetryPause(t *testing.T) {
	s := New(context.Background(), Config{Keys: store.Keys{Prefix: "p"}}, nil, store.NewGated(nil), watermill.NopLogger{})
	sub := &subscription{s: s, topic: "t", shard: s.config.Keys.Shard("t", 0), consumer: "c1", reads: reads{handoff: make(chan *handoff)}}
	h := &handoff{reply: make(chan handoffReply, 1)}
	sub.reads.promote = h
	pos := readPos{failures: 19} // the next pause is the longest
	go sub.readFailed(context.Background(), errors.New("read failed"), &pos)
	select {
	case rep := <-h.reply:
		require.False(t, rep.ran)
	case <-time.After(time.Second):
		t.Fatal("the hand-off was not declined before the pause after a failed read")
	}
}

// A subscription that stops waiting for its bell is handed no more ticks,
// and a partition none waits for leaves nothing behind in the index the
// hand-off looks in.
func TestHandoff_OnlyToSubscriptionsStillWaiting(t *testing.T) {
	keys := store.Keys{Prefix: "p"}
	s := New(context.Background(), Config{Keys: keys}, nil, store.NewGated(nil), nil)
	sh := keys.Shard("t", 0)
	sub := func() *subscription {
		return &subscription{s: s, topic: "t", shard: sh, consumer: "c1", reads: reads{handoff: make(chan *handoff, 1)}}
	}
	a, b := sub(), sub()
	s.waiting(a)
	s.waiting(b)
	s.waited(a)
	require.True(t, s.handOff(sh, &handoff{}))
	require.Empty(t, a.reads.handoff, "a stopped waiting")
	require.Len(t, b.reads.handoff, 1)
	s.waited(b)
	require.Empty(t, s.idle)
	require.Empty(t, s.idleOf)
	require.False(t, s.handOff(sh, &handoff{}))
}
