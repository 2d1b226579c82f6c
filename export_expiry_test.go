package redisdelay

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// EncodeForTest is a message as stored, for tests that write entries
// around Publish.
func EncodeForTest(msg *message.Message) []byte { return store.Encode(msg) }
