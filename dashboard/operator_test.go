package dashboard_test

// Operator asks (issue): far due times in days.

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/dashboard"
)

// TestFarDueInDays: a message due in 1500 days reads "in 1500d13h55m", not
// "in 36013h55m0s", in the list and on its page.
func TestFarDueInDays(t *testing.T) {
	e := newEnv(t, dashboard.Options{SampleEvery: -1})
	msg := later(time.Hour, "far")
	e.publish("orders", msg)
	due := time.Now().Add(1500*24*time.Hour + 13*time.Hour + 55*time.Minute + 30*time.Second)
	moved, err := e.insp.Reschedule(context.Background(), "orders", msg.UUID, due)
	require.NoError(t, err)
	require.True(t, moved)

	days := regexp.MustCompile(`in 1500d13h5[56]m<`)
	_, body := e.get("/topic?t=orders")
	assert.Regexp(t, days, body)
	assert.NotContains(t, body, "36013h")
	_, body = e.get("/message?t=orders&q=" + msg.UUID)
	assert.Regexp(t, `\(in 1500d13h5[56]m\)`, body)
	assert.NotContains(t, body, "36013h")
}
