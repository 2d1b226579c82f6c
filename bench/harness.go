package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// publishers is the number of publishing goroutines, as in watermill-benchmark.
const publishers = 64

// stallTimeout is how long a run may go without progress before it fails.
const stallTimeout = 30 * time.Second

// runPublishers calls publish from 64 goroutines until n items are
// published, count items per call (the last call may get fewer), and
// returns how long that took. first is the index of the call's first item.
// The first error stops the run.
func runPublishers(n, count int, publish func(first, count int) error) (time.Duration, error) {
	return runPublishersN(publishers, n, count, publish)
}

// runPublishersN is runPublishers from the given number of goroutines.
func runPublishersN(goroutines, n, count int, publish func(first, count int) error) (time.Duration, error) {
	var (
		next    atomic.Int64
		failed  atomic.Bool
		errOnce sync.Once
		err     error
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				first := int(next.Add(int64(count))) - count
				if first >= n {
					return
				}
				if e := publish(first, min(count, n-first)); e != nil {
					errOnce.Do(func() { err = e })
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), err
}

// consume runs a Router with one ack-only handler per subscriber (subscriber
// i reads topics[i%len(topics)]) and returns the time from starting the
// Router until n messages were handled. mark, if not nil, is called then,
// before the Router closes.
func consume(b *bench, subs []message.Subscriber, topics []string, n int, mark func()) (time.Duration, error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, b.logger)
	if err != nil {
		return 0, err
	}
	var handled atomic.Int64
	done := make(chan struct{})
	for i, sub := range subs {
		router.AddConsumerHandler(fmt.Sprintf("ack-%d", i), topics[i%len(topics)], sub, func(*message.Message) error {
			if handled.Add(1) == int64(n) {
				close(done)
			}
			return nil
		})
	}
	start := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(b.ctx) }()
	err = waitFor(done, handled.Load, n)
	elapsed := time.Since(start)
	if mark != nil {
		mark()
	}
	err = errors.Join(err, router.Close(), <-runErr)
	return elapsed, err
}

// waitFor waits until done is closed, failing when progress() has not moved
// for stallTimeout.
func waitFor(done <-chan struct{}, progress func() int64, total int) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastMove := progress(), time.Now()
	for {
		select {
		case <-done:
			return nil
		case <-tick.C:
			if p := progress(); p != last {
				last, lastMove = p, time.Now()
			} else if time.Since(lastMove) > stallTimeout {
				return fmt.Errorf("stalled: %d of %d after no progress for %s", p, total, stallTimeout)
			}
		}
	}
}

// randomPayload returns size random bytes (one payload shared by all the
// messages of a run, as in watermill-benchmark).
func randomPayload(size int) []byte {
	p := make([]byte, size)
	_, _ = rand.Read(p)
	return p
}
