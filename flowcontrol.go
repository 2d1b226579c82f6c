package redisdelay

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// RateLimit is a number of messages per interval: see
// SubscriberConfig.RateLimit.
type RateLimit struct {
	Messages int
	Per      time.Duration
}

func (l RateLimit) validate(what string) error {
	if l.Messages < 1 || l.Messages > 1_000_000 {
		return fmt.Errorf("redisdelay: %s.Messages is %d: use 1 to 1,000,000 messages per %s "+
			"(leave the whole RateLimit zero for no limit)", what, l.Messages, l.Per)
	}
	if l.Per < time.Millisecond || l.Per%time.Millisecond != 0 || l.Per > 24*time.Hour {
		return fmt.Errorf("redisdelay: %s.Per is %s: use whole milliseconds from 1ms to 24h (e.g. time.Second)", what, l.Per)
	}
	return nil
}

// rateLimit is the limit of a topic (zero: none).
func (c SubscriberConfig) rateLimit(topic string) RateLimit {
	if l, ok := c.TopicRateLimits[topic]; ok {
		return l
	}
	return c.RateLimit
}

// Pause stops the consumer group's subscribers, in every process, from
// fetching new messages of the topic, until Resume. Messages keep
// becoming due and accumulate (Ready in Stats grows); messages already
// fetched are still delivered, and so may be one batch of a read that
// was waiting for messages when Pause ran (within the subscriber's
// BlockTime). Retries and reclaims go on. The pause is stored in Redis:
// it outlasts subscriber restarts, and a group may be paused before it
// exists. Pausing a paused group is a no-op.
func (i *Inspector) Pause(ctx context.Context, topic, group string) error {
	if err := i.validateGroup(topic, group); err != nil {
		return err
	}
	sh := i.keys.shard(topic, 0)
	err := i.client.SetNX(ctx, sh.paused(group), strconv.FormatInt(time.Now().UnixMilli(), 10), 0).Err()
	return wrapErr(err, "pause group %q of topic %q", group, topic)
}

// Resume lets a paused consumer group fetch messages of the topic again:
// its subscribers fetch within their BlockTime (they check while paused
// once per BlockTime). It reports whether the group was paused.
func (i *Inspector) Resume(ctx context.Context, topic, group string) (bool, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return false, err
	}
	n, err := i.client.Del(ctx, i.keys.shard(topic, 0).paused(group)).Result()
	return n == 1, wrapErr(err, "resume group %q of topic %q", group, topic)
}

// Paused reports whether the consumer group is paused on the topic.
func (i *Inspector) Paused(ctx context.Context, topic, group string) (bool, error) {
	if err := i.validateGroup(topic, group); err != nil {
		return false, err
	}
	n, err := i.client.Exists(ctx, i.keys.shard(topic, 0).paused(group)).Result()
	return n == 1, wrapErr(err, "check whether group %q of topic %q is paused", group, topic)
}

// gate asks Redis, before a read of new messages, whether the group is
// paused and what its rate limit allows (gate.lua), and waits what it
// says. It returns how many messages to read (0: paused, or ctx ended:
// read nothing now); an error is handled as a failed read.
func (sub *subscription) gate(ctx context.Context) (count int, err error) {
	s := sub.s
	limit := s.config.rateLimit(sub.topic)
	want := s.config.BatchSize
	if limit.Messages > 0 {
		want = min(want, limit.Messages)
	}
	r, err := callGate(ctx, s.config.Client, s.keys.shard(sub.topic, 0), s.config.ConsumerGroup, limit, want, sub.unused)
	if err != nil {
		return 0, fmt.Errorf("check whether the group is paused or rate limited: %w", err)
	}
	if r.paused != sub.paused {
		sub.paused = r.paused
		what := "redisdelay: consumer group resumed; fetching messages again"
		if r.paused {
			what = "redisdelay: consumer group paused (Inspector.Pause); fetching no messages until it is resumed"
		}
		s.logger.Info(what, sub.fields())
	}
	if r.paused {
		// Checked again once per BlockTime, the pace of an idle read.
		sleep(ctx, s.config.BlockTime)
		return 0, nil
	}
	sub.unused = 0
	if limit.Messages > 0 {
		// Given back by the next call unless the read fetches them all.
		sub.unused = r.count
	}
	if r.wait > 0 {
		sleep(ctx, r.wait)
	}
	if ctx.Err() != nil {
		return 0, nil
	}
	return r.count, nil
}
