package meta

import (
	"fmt"
	"hash/fnv"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Expiry is a message's deadline (zero without one); a value that
// does not parse is an error naming the key and how to set it.
func Expiry(md message.Metadata) (time.Time, error) {
	v := md.Get(ExpiresAtKey)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("metadata %s=%q is not an RFC 3339 time such as \"2006-01-02T15:04:05.000Z\" (set it with redisdelay.SetExpiresAt)",
			ExpiresAtKey, v)
	}
	return t, nil
}

// ExpiredReason is the dead-letter reason of a message whose deadline
// passed before now, or "" when it may be delivered. A deadline that does
// not parse (Publish refuses it: another tool wrote the message) does not
// expire it, since nobody can tell when it would; the error is returned
// for logging.
func ExpiredReason(md message.Metadata, now time.Time) (string, error) {
	t, err := Expiry(md)
	if err != nil || t.IsZero() || !now.After(t) {
		return "", err
	}
	return fmt.Sprintf("expired: its deadline %s (metadata %s) passed %s before it could be delivered",
		md.Get(ExpiresAtKey), ExpiresAtKey, now.Sub(t).Round(time.Millisecond)), nil
}

// HandlerTimeout is a message's own handler deadline: 0 without
// one, negative for "none"; a value that is neither is an error naming the
// key and how to set it.
func HandlerTimeout(md message.Metadata) (time.Duration, error) {
	v := md.Get(HandlerTimeoutKey)
	switch v {
	case "":
		return 0, nil
	case "none":
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Millisecond {
		return 0, fmt.Errorf("metadata %s=%q is not a duration of at least 1ms such as \"90s\", nor \"none\" (set it with redisdelay.SetHandlerTimeout)",
			HandlerTimeoutKey, v)
	}
	return d, nil
}

// Priority is the publish script's priority flag of a message: "1"
// for high, "0" for normal.
func Priority(md message.Metadata) (string, error) {
	switch v := md.Get(PriorityKey); v {
	case "", "normal":
		return "0", nil
	case PriorityHigh:
		return "1", nil
	default:
		return "", fmt.Errorf("metadata %s is %q: use %q, or leave it empty (or \"normal\") for normal priority", PriorityKey, v, PriorityHigh)
	}
}

// MaxGroupLen bounds a group's name: it is stored with each queued message.
const MaxGroupLen = 256

// Group is the group publish.lua queues a message in: its GroupKey,
// or for the KeepLastIfActive policy "\x01" and its business key; "" for
// none. keyArg is the business key argument publish.lua takes (the policy
// letter, then the key).
func Group(md message.Metadata, keyArg string) (string, error) {
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
	if p := GroupProblem(g); p != "" {
		return "", fmt.Errorf("metadata %s=%q %s", GroupKey, g, p)
	}
	return g, nil
}

// GroupProblem says what is wrong with a group's name, "" when nothing is.
func GroupProblem(g string) string {
	if len(g) > MaxGroupLen {
		return fmt.Sprintf("is %d bytes: use at most %d (a tenant or entity ID, not a payload)", len(g), MaxGroupLen)
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

// PartitionOf returns the partition (0 to n-1) a partition key or UUID
// hashes to.
func PartitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// Partition is the partition of a message published in a call whose
// first message has the UUID first: that of its PartitionKey, else of its
// GroupKey, else of its BusinessKey, else of first.
func Partition(msg *message.Message, first string, n int) int {
	if k := msg.Metadata.Get(PartitionKey); k != "" {
		return PartitionOf(k, n)
	}
	if k := msg.Metadata.Get(GroupKey); k != "" {
		return PartitionOf(k, n)
	}
	if k := msg.Metadata.Get(BusinessKey); k != "" {
		return PartitionOf(k, n)
	}
	return PartitionOf(first, n)
}
