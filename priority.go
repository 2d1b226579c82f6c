package redisdelay

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

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

// messagePriority is the publish script's priority flag of a message: "1"
// for high, "0" for normal.
func messagePriority(md message.Metadata) (string, error) {
	switch v := md.Get(PriorityKey); v {
	case "", "normal":
		return "0", nil
	case PriorityHigh:
		return "1", nil
	default:
		return "", fmt.Errorf("metadata %s is %q: use %q, or leave it empty (or \"normal\") for normal priority", PriorityKey, v, PriorityHigh)
	}
}
