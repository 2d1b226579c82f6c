package redisdelay

import "github.com/ThreeDotsLabs/watermill/message"

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
