package redisdelay

import (
	"fmt"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

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

// maxGroupLen bounds a group's name: it is stored with each queued message.
const maxGroupLen = 256

// SetGroup puts a message in the group (see GroupKey); an empty group
// removes it.
func SetGroup(msg *message.Message, group string) {
	setOrDelete(msg, GroupKey, group)
}

// messageGroup is the group publish.lua queues a message in: its GroupKey,
// or for the KeepLastIfActive policy "\x01" and its business key; "" for
// none. keyArg is the business key argument (see businessKeyArg).
func messageGroup(md message.Metadata, keyArg string) (string, error) {
	g := md.Get(GroupKey)
	keepLast := len(keyArg) > 0 && keyArg[0] == 'l'
	if g == "" {
		if keepLast {
			return "\x01" + keyArg[1:], nil
		}
		return "", nil
	}
	if keepLast {
		return "", fmt.Errorf("metadata %s=%q with business key policy %q: that policy makes the business key the message's group; drop one of them",
			GroupKey, g, KeepLastIfActive)
	}
	if p := groupProblem(g); p != "" {
		return "", fmt.Errorf("metadata %s=%q %s", GroupKey, g, p)
	}
	return g, nil
}

// groupProblem says what is wrong with a group's name, "" when nothing is.
func groupProblem(g string) string {
	if len(g) > maxGroupLen {
		return fmt.Sprintf("is %d bytes: use at most %d (a tenant or entity ID, not a payload)", len(g), maxGroupLen)
	}
	if !utf8.ValidString(g) {
		return "is not valid UTF-8"
	}
	for _, r := range g {
		if r < 0x20 || r == 0x7f {
			return fmt.Sprintf("holds the control character %U: use printable characters", r)
		}
	}
	return ""
}
