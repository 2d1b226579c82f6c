// Package meta is what redisdelay reads from a message's metadata, and
// writes to it: the keys, and the rules that read them (delay, deadline,
// handler timeout, priority, group, partition). It imports no other part
// of the module but the store's time parsing, so the Publisher, the
// consumption and the scheduling can all use it.
package meta

import "time"

// The metadata keys, as the root package documents them for users (its
// constants of the same names; TestMeta_KeysMatchRoot holds them equal).
const (
	BusinessKey          = "_redisdelay_business_key"
	BusinessKeyPolicyKey = "_redisdelay_business_key_policy"
	PartitionKey         = "_redisdelay_partition_key"
	PriorityKey          = "_redisdelay_priority"
	PriorityHigh         = "high"
	AttemptKey           = "_redisdelay_attempt"
	ErrorKey             = "_redisdelay_error"
	ExpiresAtKey         = "_redisdelay_expires_at"
	HandlerTimeoutKey    = "_redisdelay_handler_timeout"
	GroupKey             = "_redisdelay_group"

	// KeepLastIfActive is the business key policy that makes the business
	// key a message's group (root: BusinessKeyPolicy KeepLastIfActive).
	KeepLastIfActive = "keep-last-if-active"
)

// SnoozeKey carries, from Snooze to the subscription settling the Nack,
// how long the message is put back for (a Go duration). The subscription
// removes it before delivering and before requeuing, so it never outlives
// the Nack it was set for.
const SnoozeKey = "_redisdelay_snooze"

// MaxDelay is the longest delay accepted anywhere, 100 years: it keeps
// due scores (ms × 1024) exact in Redis's doubles.
const MaxDelay = 100 * 365 * 24 * time.Hour
