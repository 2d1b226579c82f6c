package redisdelay

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Every partition's keys carry a hash tag of their own, partition 0 keeps
// the layout of an unpartitioned topic, and a wake channel names its
// partition unambiguously, even for topics whose names look like partitions.
func TestPartition_ShardKeysAndWakeChannels(t *testing.T) {
	k := store.Keys{Prefix: "rd"}
	require.Equal(t, "rd:{orders}:waiting", k.Shard("orders", 0).Waiting())
	require.Equal(t, "rd:{orders~3}:p3:waiting", k.Shard("orders", 3).Waiting())
	require.Equal(t, "rd:{orders~3}:p3:g:billing:retry", k.Shard("orders", 3).Retry("billing"))
	require.NotEqual(t, k.Shard("orders~3", 0).Waiting(), k.Shard("orders", 3).Waiting())

	for _, c := range []struct {
		topic string
		part  int
	}{{"orders", 0}, {"orders", 1}, {"orders", 17}, {"a~1", 0}, {"a~1", 1}, {"x:p1", 2}, {"t}", 0}} {
		if c.topic == "t}" {
			continue // not a valid topic name
		}
		topic, part, ok := k.PartitionOfWake(k.Shard(c.topic, c.part).Wake())
		require.True(t, ok, "%+v", c)
		require.Equal(t, c.topic, topic)
		require.Equal(t, c.part, part)
	}
	for _, bad := range []string{"rd:orders:wake", "other:{orders}:wake", "rd:{orders~3}:p4:wake", "rd:{orders~03}:p03:wake",
		"rd:{orders}:p1:wake", "rd:{orders~0}:p0:wake", "rd:{orders}:waiting"} {
		_, _, ok := k.PartitionOfWake(bad)
		require.False(t, ok, bad)
	}
}
