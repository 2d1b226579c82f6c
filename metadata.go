package redisdelay

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// The metadata keys this package reads and writes, and typed setters for
// those a publisher sets, so callers need not spell raw keys. Watermill's
// delay.Message sets the delay; SetDueAt sets an exact due time.

// BusinessKey is the metadata key that gives a delayed message a business
// key (an order number, say): among the messages of a topic still waiting
// for their due time, no two hold the same key. What Publish does with a
// message whose key another waiting message holds is the
// BusinessKeyPolicy. A message releases its key when it becomes due (moves
// to the ready stream) or is cancelled; immediate messages hold one only
// under ReplaceKeepDue and KeepLastIfActive, which make them wait. Without a
// PartitionKey or GroupKey a message goes to the partition of its business
// key, so the check is within one partition; a business key used with one
// of those must always come with the same one. A received
// message published again (it carries AttemptKey) does not hold its key.
const BusinessKey = "_redisdelay_business_key"

// BusinessKeyPolicyKey is the metadata key that sets the BusinessKeyPolicy
// of one message ("reject", "keep-first", "replace", "replace-keep-due" or
// "keep-last-if-active"), overriding
// PublisherConfig.BusinessKeyPolicy and TopicBusinessKeyPolicy.
const BusinessKeyPolicyKey = "_redisdelay_business_key_policy"

// PartitionKey is the metadata key that places a message in a partition of
// its topic: messages with the same value go to the same partition (FNV-1a
// hash of the value, modulo the partition count), so an ordered
// subscription (SubscriberConfig.Ordered) handles them one at a time, in
// due order. Without it a message with a GroupKey goes to the partition of
// its group, one with a BusinessKey to the partition of its business key,
// and any other to the partition of its call: that
// of the first message's UUID, so a Publish call (the usual single message,
// or a batch) stays in one partition and atomic, and a retried call lands
// where the first try did. It has no effect on a topic of one partition.
const PartitionKey = "_redisdelay_partition_key"

// PriorityKey is the metadata key that makes a message high-priority:
// value PriorityHigh ("high"); "" or "normal" is the default. When due, a
// high-priority message is handed to each consumer group's redelivery
// stream, which subscriptions read before the ready stream, so it overtakes
// normal messages waiting there.
//
// The policy: every fetch of a subscription takes up to BatchSize
// messages from the redelivery stream (retries and high-priority messages)
// and up to BatchSize from the ready stream, and hands them out in that
// order. High-priority messages therefore wait at most for the fetch in
// progress, and normal messages get at least half of the deliveries while
// both kinds queue: they are never starved. A high-priority message goes
// to the consumer groups that exist when it is due (the ready stream keeps
// messages for groups created later; with no group at all, it goes there),
// and even an immediate one passes through the scheduler (normally one
// wake-up, about a millisecond). In ordered subscriptions it overtakes the
// normal messages of its partition.
const PriorityKey = "_redisdelay_priority"

// PriorityHigh is the PriorityKey value of a high-priority message.
const PriorityHigh = "high"

// AttemptKey is the metadata key that tells a handler which delivery attempt
// of the message it is handling: "1" the first time, "2" after one Nack or
// reclaim, and so on. Messages handed back unacknowledged when a subscriber
// closes keep their attempt number. Publish drops the key, so a received
// message published again (forwarded, or sent to a poison queue) starts
// over at attempt 1. A message that carries the key is such a copy:
// Publish keeps its BusinessKey metadata but does not let it hold the key,
// so it cannot refuse the next message with that key. Delete the key from
// the metadata to publish the message as a new one that holds its key.
const AttemptKey = "_redisdelay_attempt"

// ErrorKey is the metadata key whose value, when a handler nacks a message
// on its last attempt, becomes the dead letter's reason. The RecordError
// middleware sets it from the handler's error. Like all metadata it travels
// with retries, so it holds the latest failure.
const ErrorKey = "_redisdelay_error"

// ExpiresAtKey is the metadata key that gives a message a deadline: "deliver
// not later than" this instant, an RFC 3339 time (SetExpiresAt writes it
// in UTC with milliseconds). A subscription checks it, by its host's
// clock, each time it is about to hand the message to a handler, first
// delivery and retries alike: past the deadline the handler never sees the
// message, which goes to the group's dead letters with a reason starting
// "expired" or is dropped, as SubscriberConfig.ExpiredMessages says.
// Publish refuses a value that does not parse (ErrInvalidMessage) but
// accepts a deadline already passed, or earlier than the due time: such a
// message is dead-lettered (or dropped) when it comes due, where it can be
// seen and counted, instead of failing a publisher that forwards messages
// late (an outbox, a requeue). A received message published again keeps
// its deadline.
const ExpiresAtKey = "_redisdelay_expires_at"

// ExpiredPolicy is what a subscription does with a message whose deadline
// (ExpiresAtKey) has passed; see SubscriberConfig.ExpiredMessages.
type ExpiredPolicy string

const (
	// DeadLetterExpired (the default) moves an expired message to the
	// group's dead letters, with a reason starting "expired", without
	// handling it: it is not retried. The dead letter's Attempts counts
	// the deliveries it had before it expired.
	DeadLetterExpired ExpiredPolicy = "dead-letter"
	// DropExpired acknowledges an expired message without handling it,
	// logging it at Info level: nothing is kept.
	DropExpired ExpiredPolicy = "drop"
)

// SetExpiresAt gives a message the deadline t (see ExpiresAtKey); a zero t
// removes it.
func SetExpiresAt(msg *message.Message, t time.Time) {
	if t.IsZero() {
		delete(msg.Metadata, ExpiresAtKey)
		return
	}
	msg.Metadata.Set(ExpiresAtKey, t.UTC().Format(meta.UntilLayout))
}

// SetDueAt makes a message due at t, to the millisecond (rounded up, so
// never before t): it sets Watermill's _watermill_delayed_until to t, with
// milliseconds, and removes _watermill_delayed_for, which Publish would
// otherwise prefer. Use it instead of delay.Message(msg, delay.Until(t))
// when the instant matters: delay.Until also writes a delay counted from
// its own call, which Redis counts from the moment it stores the message,
// so that message is due late by the time between the two (its until key
// keeps whole seconds only). Like any until instant, t is read by the
// publishing host's clock when Publish turns it into a delay: the message
// is due at t, late only by Publish's own latency (a round trip, or the
// wait for a script run in flight), early by as much as that host's clock
// is ahead of Redis's. A zero t removes both keys: the message is due at
// once.
func SetDueAt(msg *message.Message, t time.Time) {
	delete(msg.Metadata, delay.DelayedForKey)
	if t.IsZero() {
		delete(msg.Metadata, delay.DelayedUntilKey)
		return
	}
	msg.Metadata.Set(delay.DelayedUntilKey, meta.FormatUntilMs(time.UnixMilli(store.CeilMs(t))))
}

// HandlerTimeoutKey is the metadata key that gives a message its own
// handler deadline, overriding SubscriberConfig.HandlerTimeout for each of
// its deliveries: a Go duration such as "90s" (SetHandlerTimeout writes
// it), or "none" for no bound. Publish refuses any other value
// (ErrInvalidMessage). Like all metadata it travels with retries and with
// a received message published again.
const HandlerTimeoutKey = "_redisdelay_handler_timeout"

// SetHandlerTimeout gives a message its own handler deadline (see
// HandlerTimeoutKey): d > 0 bounds each delivery's handler to d, a
// negative d lifts the bound, 0 removes the override.
func SetHandlerTimeout(msg *message.Message, d time.Duration) {
	switch {
	case d > 0:
		msg.Metadata.Set(HandlerTimeoutKey, d.String())
	case d < 0:
		msg.Metadata.Set(HandlerTimeoutKey, "none")
	default:
		delete(msg.Metadata, HandlerTimeoutKey)
	}
}

// GroupKey is the metadata key that puts a message in a group: a tenant,
// a customer, an entity, any key whose messages must not starve the
// others' (SetGroup writes it). Each consumer group takes the due grouped
// messages of a partition round-robin across their groups, one group per
// turn, so a group with a million messages due and a group with ten both
// make progress; within a group, in due order. SubscriberConfig's
// GroupConcurrency and GroupRateLimit bound each group, across every
// process. Without a PartitionKey a grouped message goes to its group's
// partition, so a group's bounds hold exactly. See docs/lifecycle.md,
// "Groups".
//
// A group is 1 to 256 bytes of UTF-8 with no control characters; Publish
// refuses any other value (ErrInvalidMessage), and a message that also has
// the KeepLastIfActive business key policy, which makes its business key
// its group.
const GroupKey = "_redisdelay_group"

// SetGroup puts a message in the group (see GroupKey); an empty group
// removes it.
func SetGroup(msg *message.Message, group string) {
	setOrDelete(msg, GroupKey, group)
}

// SetBusinessKey gives a message the business key key (see BusinessKey);
// an empty key removes it.
func SetBusinessKey(msg *message.Message, key string) {
	setOrDelete(msg, BusinessKey, key)
}

// SetBusinessKeyPolicy sets what Publish does when the message's business
// key is held by another waiting message (see BusinessKeyPolicyKey),
// overriding the Publisher's policy; an empty policy removes the override.
// Publish rejects a policy other than RejectDuplicateKey, KeepFirst,
// ReplaceWaiting, ReplaceKeepDue and KeepLastIfActive.
func SetBusinessKeyPolicy(msg *message.Message, policy BusinessKeyPolicy) {
	setOrDelete(msg, BusinessKeyPolicyKey, string(policy))
}

// SetPartitionKey places a message in the partition of key (see
// PartitionKey); an empty key removes it.
func SetPartitionKey(msg *message.Message, key string) {
	setOrDelete(msg, PartitionKey, key)
}

// SetHighPriority makes a message high-priority (see PriorityKey).
func SetHighPriority(msg *message.Message) {
	msg.Metadata.Set(PriorityKey, PriorityHigh)
}

func setOrDelete(msg *message.Message, key, value string) {
	if value == "" {
		delete(msg.Metadata, key)
		return
	}
	msg.Metadata.Set(key, value)
}

// RecordError is a Router middleware that stores a failing handler's error
// text in the message's ErrorKey metadata, so retries and dead letters say
// why the message failed. Add it first, so it wraps the other middleware and
// sees the error the Router nacks for.
func RecordError(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		msgs, err := h(msg)
		if err != nil {
			msg.Metadata.Set(ErrorKey, err.Error())
		}
		return msgs, err
	}
}
