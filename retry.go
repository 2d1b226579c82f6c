package redisdelay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// The retry policy: when a delivery fails, whether the message comes back,
// and after how long. It is applied on two paths, and decided here for
// both:
//
//   - Nack (and a handler timeout, which counts as a failed attempt): the
//     subscription decides (nack): the delay is the one the handler set in
//     the message's delay metadata after delivery (middleware.DelayOnError),
//     else SubscriberConfig.RetryDelay for the attempt (DefaultRetryDelay by
//     default); past MaxAttempts, or a delay beyond the 100-year limit, the
//     message goes to the dead letters. nack.lua carries it out: the
//     group's retry set (lib.lua's retry_later) or its redelivery stream,
//     or the dead letters. An ordered subscription retries in place instead
//     (retriesInPlace), before any later message of its partition.
//   - Reclaim: a message held past the visibility timeout by a consumer
//     that stopped renewing it is retried by a scheduler, which may run in
//     a process that never saw this config: so the policy is stored in
//     Redis with the group (groupPolicy, written by init.lua into the
//     group's meta hash) and reclaim.lua applies it, with the delays of
//     RetryDelay evaluated here for the first attempts.
//
// A snoozed message (Snooze) comes back after its snooze without spending
// an attempt. The pause after the library's own failures (a Redis error) is
// not this policy: see internal/pause.

// groupPolicy is what schedulers need to reclaim the group's messages on
// their own (they may run in a Manager that never saw this config): the
// limits and the retry delays per attempt, with RetryDelay evaluated for
// the first attempts (the last value repeats).
func groupPolicy(c SubscriberConfig) store.GroupPolicy {
	p := store.GroupPolicy{
		MaxAttempts: c.MaxAttempts, Visibility: c.VisibilityTimeout, MaxDead: c.MaxDeadLetters,
		IdleTimeout: c.ConsumerIdleTimeout, Concurrency: c.GroupConcurrency,
		RateMessages: c.GroupRateLimit.Messages, RatePer: c.GroupRateLimit.Per,
	}
	if c.RetryDelay != nil {
		n := 64
		if c.MaxAttempts > 0 {
			n = min(c.MaxAttempts, n)
		}
		for attempt := 1; attempt <= n; attempt++ {
			p.RetryDelays = append(p.RetryDelays, meta.RoundUpMs(c.RetryDelay(attempt)))
		}
	}
	return p
}

func (sub *subscription) nack(ctx context.Context, e entry, msg *message.Message, attempt int, deliveredUntil string) error {
	s := sub.s
	if d, snoozed := takeSnooze(msg.Metadata); snoozed {
		return sub.settleNack(ctx, e, attempt, d, store.EncodeAt(msg, sub.lvl.Level()), "", nackSnoozed)
	}
	d, err := nackDelay(msg.Metadata, deliveredUntil, attempt, s.now(), s.config.RetryDelay)
	reason := ""
	switch {
	case errors.Is(err, errDelayTooFar):
		reason = err.Error()
	case err != nil:
		s.logger.Error("redisdelay: nacked message has invalid delay metadata; using RetryDelay", err,
			sub.fields().Add(watermill.LogFields{"message_uuid": msg.UUID}))
	}
	if max := s.config.MaxAttempts; reason == "" && max > 0 && attempt >= max {
		reason = msg.Metadata.Get(ErrorKey)
		if reason == "" {
			reason = fmt.Sprintf("nacked on attempt %d of %d (set metadata %s, e.g. with the RecordError middleware, to record why)",
				attempt, max, ErrorKey)
		}
	}
	return sub.settleNack(ctx, e, attempt, d, store.EncodeAt(msg, sub.lvl.Level()), reason, nackFailed)
}

// retriesInPlace reports whether a nacked message is retried by the
// subscription itself: in ordered subscriptions, unless it was the last
// attempt.
func (sub *subscription) retriesInPlace(attempt int) bool {
	max := sub.s.config.MaxAttempts
	return sub.order != nil && (max <= 0 || attempt < max)
}

// errDelayTooFar marks a Nack whose delay metadata asks for more than
// maxDelayLimit: such a message goes to the dead letters, with the error as
// the reason, rather than waiting for centuries (or, once the delay
// overflowed, coming back at once).
var errDelayTooFar = errors.New("redisdelay: nack delay too far")

// nackDelay picks the redelivery delay of a nacked message: the delay its
// metadata asks for when the handler (e.g. middleware.DelayOnError) set one
// after delivery, otherwise the configured backoff for the failed attempt.
// When the new delay metadata does not parse, the backoff is used and the
// parse error returned for logging: the message is requeued either way.
// When it asks for more than maxDelayLimit, the error wraps errDelayTooFar
// and the message is to be dead-lettered.
func nackDelay(md message.Metadata, deliveredUntil string, attempt int, now time.Time, backoff func(int) time.Duration) (time.Duration, error) {
	var err error
	if until := md.Get(delay.DelayedUntilKey); until != "" && until != deliveredUntil {
		var d time.Duration
		if d, err = meta.Delay(md, now); err == nil {
			if d > maxDelayLimit {
				return 0, fmt.Errorf("%w: the handler asked for a redelivery delay of %s (metadata %s=%q, %s=%q), beyond the limit of 100 years: set a shorter delay (e.g. DelayOnError's MaxInterval), then requeue the dead letter",
					errDelayTooFar, meta.DescribeDelay(d), delay.DelayedUntilKey, until, delay.DelayedForKey, md.Get(delay.DelayedForKey))
			}
			return d, nil
		}
	}
	if backoff == nil {
		return 0, err
	}
	return meta.RoundUpMs(backoff(attempt)), err
}

// Retry backoff defaults; see DefaultRetryDelay.
const (
	retryDelayBase   = time.Second
	retryDelayCap    = 10 * time.Minute
	retryDelayJitter = 0.2
)

// DefaultRetryDelay is the SubscriberConfig.RetryDelay used when none is
// set: 1s before the second attempt, doubling with each attempt up to 10
// minutes, each value varied at random by up to ±20%.
//
// A handler that fails because something it needs is down then retries
// within a second of a blip, yet does not burn the default 16 attempts in
// seconds: they span about 67 minutes (1s+2s+...+512s, then 600s five
// times) before the message goes to the dead letters, so an outage of up to
// an hour is ridden out. The cap bounds how late a message comes back after
// the outage ends. The jitter spreads messages that failed together, so
// they do not all come back in the same instant and fail again together.
func DefaultRetryDelay(attempt int) time.Duration {
	d := retryDelayCap
	if attempt >= 1 && attempt <= 20 { // 2^19 s is far past the cap
		d = min(retryDelayBase<<(attempt-1), retryDelayCap)
	} else if attempt < 1 {
		d = retryDelayBase
	}
	return time.Duration(float64(d) * (1 + retryDelayJitter*(2*rand.Float64()-1)))
}
