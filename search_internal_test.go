package redisdelay

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// A run whose action failed between pulling far messages into the waiting
// set and acting on them resumes from the start of that partition's
// waiting set (the earliest such partition), where they now are; any
// other failure from where the batch began.
func TestWaitingScanResume(t *testing.T) {
	k := store.Keys{Prefix: "p"}
	s := &waitingScan{shards: []store.Shard{k.Shard("t", 0), k.Shard("t", 1), k.Shard("t", 2)}, rewound: -1}
	assert.Equal(t, "1:f:7:3", s.resume("1:f:7:3"))
	s.rewind(k.Shard("t", 2))
	s.rewind(k.Shard("t", 1))
	s.rewind(k.Shard("t", 2))
	assert.Equal(t, "1:n:-Inf:", s.resume("1:f:7:3"))
	fresh := &waitingScan{shards: s.shards, part: 1, score: math.Inf(-1)}
	assert.Equal(t, fresh.cursor(), s.resume("1:f:7:3"), "the cursor of partition 1 not yet read")
}
