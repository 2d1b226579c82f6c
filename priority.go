package redisdelay

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

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
