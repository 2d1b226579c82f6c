// Package redisdelaytest lets tests of code built on watermill-redisdelay
// move a topic's clock forward against a real Redis, so that what would
// happen later happens now: "the order closes after 30 minutes" is tested
// in milliseconds, with the real Publisher, Subscriber, Router and
// schedulers, no mock and no change to the code under test.
//
//	// published with delay.For(30*time.Minute)
//	_, err := redisdelaytest.Advance(ctx, redisdelaytest.Config{Client: rdb}, 30*time.Minute, "orders.close-unpaid")
//	// the running Subscriber receives it now
//
// Advance rewrites what the library stored: waiting messages and retries
// are moved d earlier (due ones then go to the consumer groups at once, as
// they would at their due time), and the recurring schedules of the
// topics publish the ticks that fall within the next d. It is for tests
// only: it changes due times for good and sends no signal of it, so never
// point it at a Redis whose messages matter. Nothing in the library calls
// it, and a program that does not import this package cannot.
//
// What it does not move: the delay metadata of the messages (a message
// run early still says when it was meant for), expiry deadlines
// (SetExpiresAt), visibility timeouts of messages held by consumers, rate
// limits, and the clocks of Redis and of the processes: a message
// published after Advance is due relative to the real clock.
package redisdelaytest

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/advance"
)

// Config says which Redis and key prefix Advance works on.
type Config struct {
	// Client is the Redis connection of the code under test. Required.
	// Never closed.
	Client redis.UniversalClient
	// KeyPrefix is the Publishers' and Subscribers' (default
	// redisdelay.DefaultKeyPrefix).
	KeyPrefix string
}

// Advanced counts what Advance moved.
type Advanced struct {
	// Waiting counts waiting messages moved earlier, and Far those of them
	// first moved out of the far tier (messages due more than about two
	// minutes ahead, kept compactly; they stay in the waiting set after).
	Waiting, Far int64
	// Retrying counts messages of consumer groups waiting for a retry
	// delay, moved earlier.
	Retrying int64
	// Ticks counts the schedule ticks published; SkippedTicks those left
	// out as older than their schedule's catch-up window (overdue when
	// Advance was called: no scheduler ran), as a tick loop would.
	Ticks, SkippedTicks int64
}

// Advance moves the clock of the topics given, or of every topic of the
// key prefix when none is given (their schedules included), forward by d
// (at most 100 years):
//
//   - each waiting message is due d earlier: one due within d is due now,
//     and the scheduler (a running Subscriber's, or a Manager's) moves it
//     to the consumer groups at once, woken by Advance; one due later
//     waits d less;
//   - each message of a consumer group waiting for its retry delay (after
//     a Nack, a handler timeout) is due d earlier;
//   - each recurring schedule of the topics publishes the ticks due by
//     now + d, oldest first, with the instants they have (ScheduleTickKey),
//     as its tick loop would over that time, except ticks older than its
//     catch-up window now (missed while no scheduler ran), which a tick
//     loop would skip too; its next tick is the first after now + d. A
//     tick loop racing with Advance publishes each tick once all the same.
//     The overlap policy is not applied to the ticks Advance publishes,
//     and at most 10,000 are published per schedule (more is an error:
//     advance by less at a time).
//
// It returns when Redis holds the new due times, not when the messages are
// delivered: await them as any test would. A topic or schedule changed
// meanwhile by another process may be moved in part. It costs a few calls
// per thousand messages, and reads every far bucket of the topics.
func Advance(ctx context.Context, config Config, d time.Duration, topics ...string) (Advanced, error) {
	if config.Client == nil {
		return Advanced{}, errors.New("redisdelaytest: Config.Client is nil: pass the Redis client of the code under test")
	}
	prefix := config.KeyPrefix
	if prefix == "" {
		prefix = redisdelay.DefaultKeyPrefix
	}
	r, err := advance.Func(ctx, config.Client, prefix, d, topics)
	return Advanced{Waiting: r.Waiting, Far: r.Far, Retrying: r.Retrying, Ticks: r.Ticks, SkippedTicks: r.SkippedTicks}, err
}
