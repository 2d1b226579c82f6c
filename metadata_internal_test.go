package redisdelay

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// The codec drops the attempt key when it stores a message, by its own
// name of it: the two must be one key.
func TestAttemptKeyIsTheCodecs(t *testing.T) {
	require.Equal(t, AttemptKey, store.AttemptMeta)
}
