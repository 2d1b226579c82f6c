package meta

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The partition of a key is stable (other languages can compute it: FNV-1a
// 32 of the key, modulo the count) and spreads keys evenly.
func TestPartition_OfIsStableAndEven(t *testing.T) {
	require.Equal(t, 0, PartitionOf("anything", 1))
	require.Equal(t, int(0x811c9dc5%8), PartitionOf("", 8)) // FNV-1a offset basis
	counts := make([]int, 8)
	for i := range 8000 {
		counts[PartitionOf("key-"+string(rune('a'+i%26))+string(rune(i)), 8)]++
	}
	for p, n := range counts {
		require.InDelta(t, 1000, n, 200, "partition %d", p)
	}
}
