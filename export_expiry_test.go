package redisdelay

import "github.com/ThreeDotsLabs/watermill/message"

// EncodeForTest is a message as stored, for tests that write entries
// around Publish.
func EncodeForTest(msg *message.Message) []byte { return encodeMessage(msg) }
