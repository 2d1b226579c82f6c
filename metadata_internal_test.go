package redisdelay

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// The codec drops the attempt key when it stores a message, by its own
// name of it: the two must be one key.
func TestDelay_AttemptKeyIsTheCodecs(t *testing.T) {
	require.Equal(t, AttemptKey, store.AttemptMeta)
}

// The codec stores the package's own metadata keys by code, from its own
// list of their names: a key renamed here without a new code there would
// come back under its old name.
func TestDelay_CodecNamedKeysAreThePackages(t *testing.T) {
	require.Subset(t, store.NamedKeys(), []string{BusinessKey, BusinessKeyPolicyKey, PartitionKey, PriorityKey, GroupKey,
		ErrorKey, ExpiresAtKey, HandlerTimeoutKey, ScheduleIDKey, ScheduleTickKey, middleware.CorrelationIDMetadataKey})
}

// The metadata keys meta reads are the ones the package documents.
func TestMeta_KeysMatchRoot(t *testing.T) {
	require.Equal(t, []string{BusinessKey, BusinessKeyPolicyKey, PartitionKey, PriorityKey, PriorityHigh, AttemptKey, ErrorKey,
		ExpiresAtKey, HandlerTimeoutKey, GroupKey, string(KeepLastIfActive)},
		[]string{meta.BusinessKey, meta.BusinessKeyPolicyKey, meta.PartitionKey, meta.PriorityKey, meta.PriorityHigh, meta.AttemptKey, meta.ErrorKey,
			meta.ExpiresAtKey, meta.HandlerTimeoutKey, meta.GroupKey, meta.KeepLastIfActive})
}
