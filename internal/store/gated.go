package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Gated is the client as the library's background work uses it: each
// command goes through the hub's lanes. Only the commands that work needs
// are here, so a new one cannot bypass the lanes unseen. An error of the
// client's pool says what happened and what to set (see explainPool); the
// caller logs it as any error, rate-limited.
type Gated struct {
	h      *Hub
	gather bool // see Gathering
}

func NewGated(h *Hub) *Gated { return &Gated{h: h} }

// Gathering returns a client of the same lanes whose commands wait a
// moment (about a millisecond) for others sent the same way, then go
// together in one pipeline: for writes that many goroutines make at the
// same instants and nothing waits for, such as the acknowledgements of
// the subscriptions of a process. One round trip instead of one each.
func (g *Gated) Gathering() *Gated { return &Gated{h: g.h, gather: true} }

// Cmds is what the library's background work calls on Redis: a gated
// client, or the client itself where the application's own call does the
// work (Publisher, Inspector).
type Cmds interface {
	redis.Scripter
	XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd
	Exists(ctx context.Context, keys ...string) *redis.IntCmd
	SMembers(ctx context.Context, key string) *redis.StringSliceCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	HGet(ctx context.Context, key, field string) *redis.StringCmd
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	ZScore(ctx context.Context, key, member string) *redis.FloatCmd
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
	Time(ctx context.Context) *redis.TimeCmd
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
	Pipeline() redis.Pipeliner
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

var (
	_ Cmds = (*Gated)(nil)
	_ Cmds = redis.UniversalClient(nil)
)

// sendCmd sends one command through the lanes: build makes it (on a
// pipeline that only collects it).
func sendCmd[C redis.Cmder](g *Gated, ctx context.Context, build func(redis.Pipeliner) C) C {
	c := build(g.h.client.Pipeline())
	if err := g.h.do(ctx, []redis.Cmder{c}, g.gather); err != nil {
		c.SetErr(err)
	}
	return c
}

func (g *Gated) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, script, keys, args...) })
}

func (g *Gated) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha1, keys, args...) })
}

func (g *Gated) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalRO(ctx, script, keys, args...) })
}

func (g *Gated) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalShaRO(ctx, sha1, keys, args...) })
}

// ScriptExists and ScriptLoad go to every master on a cluster (go-redis
// sends them to each): not a command a pipeline can carry there. The
// background work does not call them (redis.Script's Run loads a script
// with EVAL); they are here for redis.Scripter.
func (g *Gated) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	var c *redis.BoolSliceCmd
	if err := g.h.Exclusive(ctx, nil, func() { c = g.h.client.ScriptExists(ctx, hashes...) }); err != nil {
		c = redis.NewBoolSliceCmd(ctx)
		c.SetErr(err)
	}
	return c
}

func (g *Gated) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	var c *redis.StringCmd
	if err := g.h.Exclusive(ctx, nil, func() { c = g.h.client.ScriptLoad(ctx, script) }); err != nil {
		c = redis.NewStringCmd(ctx)
		c.SetErr(err)
	}
	return c
}

func (g *Gated) XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.XStreamSliceCmd { return p.XReadGroup(ctx, a) })
}

func (g *Gated) Exists(ctx context.Context, keys ...string) *redis.IntCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.IntCmd { return p.Exists(ctx, keys...) })
}

func (g *Gated) SMembers(ctx context.Context, key string) *redis.StringSliceCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.StringSliceCmd { return p.SMembers(ctx, key) })
}

func (g *Gated) Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.StatusCmd { return p.Set(ctx, key, value, expiration) })
}

func (g *Gated) HGet(ctx context.Context, key, field string) *redis.StringCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.StringCmd { return p.HGet(ctx, key, field) })
}

func (g *Gated) HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.SliceCmd { return p.HMGet(ctx, key, fields...) })
}

func (g *Gated) ZScore(ctx context.Context, key, member string) *redis.FloatCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.FloatCmd { return p.ZScore(ctx, key, member) })
}

func (g *Gated) ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.IntCmd { return p.ZRem(ctx, key, members...) })
}

func (g *Gated) Time(ctx context.Context) *redis.TimeCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.TimeCmd { return p.Time(ctx) })
}

func (g *Gated) Publish(ctx context.Context, channel string, message any) *redis.IntCmd {
	return sendCmd(g, ctx, func(p redis.Pipeliner) *redis.IntCmd { return p.Publish(ctx, channel, message) })
}

// Pipeline returns a pipeline whose commands go through the lanes
// together (per node, on a cluster).
func (g *Gated) Pipeline() redis.Pipeliner {
	return &gatedPipe{Pipeliner: g.h.client.Pipeline(), g: g}
}

func (g *Gated) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	p := g.Pipeline()
	if err := fn(p); err != nil {
		return nil, err
	}
	return p.Exec(ctx)
}

type gatedPipe struct {
	redis.Pipeliner
	g *Gated
}

// Exec sends the queued commands through the lanes, with other commands
// queued there, and returns the first error among them, as go-redis does.
func (p *gatedPipe) Exec(ctx context.Context) ([]redis.Cmder, error) {
	cmds := p.Pipeliner.Cmds()
	p.Pipeliner.Discard()
	if len(cmds) == 0 {
		return nil, nil
	}
	if err := p.g.h.do(ctx, cmds, p.g.gather); err != nil {
		for _, c := range cmds {
			if c.Err() == nil {
				c.SetErr(err)
			}
		}
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return cmds, err
		}
	}
	return cmds, nil
}

// execPipe runs a pipeline, then gives every command that may not have
// run the pipeline's error: go-redis leaves a command's error unset when
// the last of its retries found no connection (Redis unreachable) or
// failed reading an earlier reply, and the command's zero value would
// pass for Redis's answer.
func execPipe(ctx context.Context, pipe redis.Pipeliner) {
	cmds, err := pipe.Exec(ctx)
	pipeFailed(cmds, err)
}

// pipeFailed gives the commands of a pipeline without an error its error,
// unless that is a reply of Redis's (see execPipe).
func pipeFailed(cmds []redis.Cmder, err error) {
	var reply redis.Error
	if err == nil || errors.As(err, &reply) {
		return
	}
	for _, c := range cmds {
		if c.Err() == nil {
			c.SetErr(err)
		}
	}
}
