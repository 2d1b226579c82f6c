package balance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Each give-up in a row doubles the time out of the member list; a
// message handed out starts the row again.
func TestBalance_BenchDoubles(t *testing.T) {
	o := New(1)
	require.False(t, o.Benched())
	o.Bench(time.Hour)
	require.True(t, o.Benched())
	o.Bench(time.Hour)
	require.InDelta(t, float64(time.Now().Add(2*time.Hour).UnixNano()), float64(o.benchedUntil.Load()), float64(time.Second))
	o.Handed()
	o.Bench(time.Hour)
	require.InDelta(t, float64(time.Now().Add(time.Hour).UnixNano()), float64(o.benchedUntil.Load()), float64(time.Second))
}
