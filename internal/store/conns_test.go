package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// The lanes of a cluster group commands by the node of their first key:
// firstKey finds it for every command the background work sends.
func TestFirstKey(t *testing.T) {
	ctx := context.Background()
	p := redis.NewClient(&redis.Options{}).Pipeline()
	cases := []struct {
		cmd  redis.Cmder
		want string
	}{
		{p.EvalSha(ctx, "sha", []string{"k1", "k2"}, "a"), "k1"},
		{p.Eval(ctx, "return 1", nil), ""},
		{p.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Count: 5, Block: -1, Streams: []string{"s1", "s2", ">", ">"}}), "s1"},
		{p.Exists(ctx, "k"), "k"},
		{p.Set(ctx, "k", "v", time.Second), "k"},
		{p.HMGet(ctx, "h", "f"), "h"},
		{p.Time(ctx), ""},
		{p.Publish(ctx, "ch", "m"), ""},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, firstKey(c.cmd.Args()), "%v", c.cmd.Args())
	}
}
