package redisdelay

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// A bulk action's cursor reads back as the position it was written at. One
// of SearchWaiting's form, which bulk actions wrote before, is taken: the
// run goes on from the start of its partition, far tier first, or from the
// far position it names. Others are refused, saying what to pass.
func TestSearch_BulkScanCursor(t *testing.T) {
	k := store.Keys{Prefix: "p"}
	shards := []store.Shard{k.Shard("t", 0), k.Shard("t", 1), k.Shard("t", 2)}
	from := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := Filter{From: from}
	first := f.firstFarBucket()
	require.Positive(t, first)
	for _, c := range []struct{ in, want string }{
		{"", "bulk:0:far:" + itoa(first) + ":0"},
		{"bulk:1:far:7:3", "bulk:1:far:7:3"},
		{"bulk:2:near:0", "bulk:2:near:0"},
		{"bulk:2:near:18446744073709551615", "bulk:2:near:18446744073709551615"},
		{"1:n:1.7e+18:some-uuid", "bulk:1:far:" + itoa(first) + ":0"},
		{"1:n:-Inf:", "bulk:1:far:" + itoa(first) + ":0"},
		{"2:f:99:12", "bulk:2:far:99:12"},
	} {
		s, err := newBulkScan(nil, shards, f, "t", c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, s.cursor(), c.in)
	}
	for _, c := range []struct{ in, err string }{
		{"bulk:", `cursor "bulk:" is not one a search or bulk action returned`},
		{"bulk:1:near", `cursor "bulk:1:near" is not one`},
		{"bulk:1:near:-1", `cursor "bulk:1:near:-1" is not one`},
		{"bulk:1:far:7", `cursor "bulk:1:far:7" is not one`},
		{"bulk:1:far:7:-3", `cursor "bulk:1:far:7:-3" is not one`},
		{"bulk:-1:far:7:3", `cursor "bulk:-1:far:7:3" is not one`},
		{"bulk:1:x:7:3", `cursor "bulk:1:x:7:3" is not one`},
		{"bulk:3:near:0", `cursor "bulk:3:near:0" names partition 3, but topic "t" has 3`},
		{"3:f:1:2", `cursor "3:f:1:2" names partition 3, but topic "t" has 3`},
		{"0:x:1:2", `cursor "0:x:1:2" is not one`},
	} {
		_, err := newBulkScan(nil, shards, f, "t", c.in)
		assert.ErrorContains(t, err, c.err, c.in)
	}
}

func itoa(n int64) string { return fmt.Sprint(n) }
