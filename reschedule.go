package redisdelay

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// In its own declaration, not in scripts.go's table, so branches adding
// scripts there do not realign each other's lines.
var rescheduleScript = loadScript("reschedule")

// Reschedule moves a message that is still waiting to a new due time, in
// place: it keeps its UUID, body, business key and priority, and no copy
// of it is ever delivered at the old time. It reports whether the message
// was waiting; false means it is unknown, cancelled, or already due and on
// its way to subscribers (nothing is changed then).
//
// due is read by this host's clock, as delay.Until is by Publish: the time
// left until it, rounded up to whole milliseconds, is measured by Redis's
// clock from the moment Redis moves the message, so the message is never
// early by either clock. A due time already passed makes the message due
// at once. A due time further than PublisherConfig.MaxDelay (or 100 years)
// fails with ErrInvalidDelay. Moving a message earlier than any other wakes
// the schedulers, as publishing it would.
//
// In a topic of several partitions it looks in the partition the UUID
// hashes to first, then in the others, as Cancel does.
func (p *Publisher) Reschedule(ctx context.Context, topic, messageUUID string, due time.Time) (bool, error) {
	return p.reschedule(ctx, topic, "uuid", messageUUID, due)
}

// RescheduleKey is Reschedule for the waiting message holding businessKey
// (see BusinessKey), found as CancelKey finds it.
func (p *Publisher) RescheduleKey(ctx context.Context, topic, businessKey string, due time.Time) (bool, error) {
	return p.reschedule(ctx, topic, "key", businessKey, due)
}

func (p *Publisher) reschedule(ctx context.Context, topic, by, value string, due time.Time) (bool, error) {
	if p.closed.Load() {
		return false, ErrClosed
	}
	d, err := rescheduleDelay(topic, by, value, due, p.now(), p.config.MaxDelay, "PublisherConfig.MaxDelay")
	if err != nil {
		return false, err
	}
	parts := partitionCount(p.config.Partitions, p.config.TopicPartitions, topic)
	return reschedule(ctx, p.config.Client, p.keys, topic, parts, by, value, d)
}

// Reschedule is Publisher.Reschedule, for the partition count stored in
// Redis. It knows no PublisherConfig.MaxDelay: only the 100-year limit
// applies.
func (i *Inspector) Reschedule(ctx context.Context, topic, messageUUID string, due time.Time) (bool, error) {
	return i.reschedule(ctx, topic, "uuid", messageUUID, due)
}

// RescheduleKey is Publisher.RescheduleKey, for the partition count stored
// in Redis. Only the 100-year limit applies.
func (i *Inspector) RescheduleKey(ctx context.Context, topic, businessKey string, due time.Time) (bool, error) {
	return i.reschedule(ctx, topic, "key", businessKey, due)
}

func (i *Inspector) reschedule(ctx context.Context, topic, by, value string, due time.Time) (bool, error) {
	d, err := rescheduleDelay(topic, by, value, due, time.Now(), maxDelayLimit, "")
	if err != nil {
		return false, err
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	if err != nil {
		return false, wrap(err, "reschedule %s in topic %q", recallWhat(by, value), topic)
	}
	return reschedule(ctx, i.client, i.keys, topic, parts[0], by, value, d)
}

// rescheduleDelay checks a reschedule's arguments and returns the delay
// from now to due, rounded up to whole milliseconds (0 when due has
// passed). limitName names the setting maxDelay comes from; "" for the
// 100-year limit alone.
func rescheduleDelay(topic, by, value string, due, now time.Time, maxDelay time.Duration, limitName string) (time.Duration, error) {
	if err := validateTopic(topic); err != nil {
		return 0, err
	}
	if value == "" {
		what := map[string]string{"uuid": "message UUID", "key": "business key"}[by]
		return 0, fmt.Errorf("%w: reschedule in topic %q: the %s is empty", ErrInvalidMessage, topic, what)
	}
	if due.IsZero() {
		return 0, fmt.Errorf("%w: reschedule %s in topic %q: the due time is the zero time.Time: give the instant it is to be delivered (time.Now().Add(d) to delay it by d)",
			ErrInvalidDelay, recallWhat(by, value), topic)
	}
	d := roundUpMs(due.Sub(now))
	switch {
	case d > maxDelayLimit:
		return 0, fmt.Errorf("%w: reschedule %s in topic %q: due in %s, beyond the limit of 100 years: use a nearer due time",
			ErrInvalidDelay, recallWhat(by, value), topic, describeDelay(d))
	case limitName != "" && d > maxDelay:
		return 0, fmt.Errorf("%w: reschedule %s in topic %q: due in %s, beyond %s (%s): use a nearer due time, or raise %[5]s if that is intended",
			ErrInvalidDelay, recallWhat(by, value), topic, d, limitName, maxDelay)
	}
	return d, nil
}

// reschedule moves the waiting message of topic found by its UUID (by
// "uuid") or business key (by "key") to be due d after Redis's now,
// looking first in the partition the value hashes to, then in the others.
// Each partition's try is atomic, and a message waits in one partition
// only, so it is moved at most once.
func reschedule(ctx context.Context, client redis.UniversalClient, k keys, topic string, parts int, by, value string, d time.Duration) (bool, error) {
	home := partitionOf(value, parts)
	for n := range parts {
		moved, err := callReschedule(ctx, client, k.shard(topic, (home+n)%parts), by, value, d.Milliseconds())
		if err != nil {
			return false, wrap(err, "reschedule %s in topic %q", recallWhat(by, value), topic)
		}
		if moved {
			return true, nil
		}
	}
	return false, nil
}
