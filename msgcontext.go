package redisdelay

import (
	"context"
	"sync"
)

// msgContext is a delivered message's context: the subscription's,
// cancelled as well when the delivery ends (the message is settled or
// handed back). context.WithCancel for each message cost about 4% of a
// consumer's CPU in a spike of due messages (its allocation, and the
// parent's lock and map of children on the way in and out), while few
// handlers ever wait on the context: the cancellable context is made only
// when Done, Err or Value is first called, then serves every call. Value
// goes through it too, so context.Cause and context.AfterFunc see the
// cancellation.
type msgContext struct {
	context.Context // the subscription's

	mu     sync.Mutex
	ctx    context.Context // nil until first needed
	cancel context.CancelFunc
	ended  bool
	// detach: the delivery ended while the subscription's context was
	// live, so a context made after that ended with the delivery
	// (context.Canceled), whatever its parent did later.
	detach bool
}

func newMsgContext(parent context.Context) *msgContext {
	return &msgContext{Context: parent}
}

func (c *msgContext) inner() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		parent := c.Context
		if c.detach {
			parent = context.WithoutCancel(parent)
		}
		c.ctx, c.cancel = context.WithCancel(parent)
		if c.ended {
			c.cancel()
		}
	}
	return c.ctx
}

func (c *msgContext) Done() <-chan struct{} { return c.inner().Done() }
func (c *msgContext) Err() error            { return c.inner().Err() }
func (c *msgContext) Value(key any) any     { return c.inner().Value(key) }

// end cancels the context: the delivery ended.
func (c *msgContext) end() {
	parentLive := c.Context.Err() == nil
	c.mu.Lock()
	c.ended = true
	c.detach = parentLive
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
