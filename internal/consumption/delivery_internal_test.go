package consumption

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A message context first asked for after its delivery ended reports what
// context.WithCancel made at delivery would have: Canceled when the
// delivery ended first, even if the subscription's context ended later
// with another cause; the subscription's error and cause when it ended
// first. Values and the deadline are the subscription's either way.
func TestMsgContext_FirstUseAfterTheEnd(t *testing.T) {
	type key struct{}
	deadline := time.Now().Add(time.Hour)
	for _, parentFirst := range []bool{false, true} {
		base, stop := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), deadline)
		parent, cancel := context.WithCancelCause(base)
		cause := errors.New("subscription closed")
		c := newMsgContext(parent)
		if parentFirst {
			cancel(cause)
			c.end()
		} else {
			c.end()
			cancel(cause)
		}
		if parentFirst {
			require.ErrorIs(t, context.Cause(c), cause)
		} else {
			require.ErrorIs(t, context.Cause(c), context.Canceled)
			require.NotErrorIs(t, context.Cause(c), cause)
		}
		require.ErrorIs(t, c.Err(), context.Canceled)
		require.Equal(t, "v", c.Value(key{}))
		got, ok := c.Deadline()
		require.True(t, ok)
		require.Equal(t, deadline, got)
		select {
		case <-c.Done():
		default:
			t.Fatal("Done not closed")
		}
		stop()
	}
}
