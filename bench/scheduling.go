package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// schedulingTopic is the topic of the scheduling and scaling scenarios.
const schedulingTopic = "scheduling"

// scheduling measures scenario 5: how fast a Manager promotes a backlog of
// due messages, against a minimal Lua script moving 100 due items per call
// from a sorted set and a hash to a stream, pipelined, on the same Redis.
func (b *bench) scheduling() {
	n := b.opts.Schedule
	payload := randomPayload(100)
	ours := b.promoteBacklog(n, payload)
	raw := b.rawMove(n, payload)
	b.rep.row("5", fmt.Sprintf("promote %s due messages (Manager defaults)", count(n)), "msg/s", "≥ 0.5× raw Lua move",
		ours, peer(sysRaw+" Lua move of 100, pipelined", raw))
}

// promoteBacklog publishes n messages due in 1 ms (untimed batches) and
// measures how fast a Manager moves them to the ready stream.
func (b *bench) promoteBacklog(n int, payload []byte) *float64 {
	if b.failed("flush", b.flush()) {
		return nil
	}
	client := newClient(b.addr, poolSize)
	defer client.Close()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, b.logger)
	if b.failed("publisher", err) {
		return nil
	}
	_, err = publishWatermill(pub, []string{schedulingTopic}, n, batchSize, payload, time.Millisecond)
	if b.failed("publish due messages", err) {
		return nil
	}
	time.Sleep(10 * time.Millisecond) // all due
	return b.measure(fmt.Sprintf("promote %s due · %s", count(n), sysRedisdelay), n, func() (time.Duration, error) {
		return promote(b.ctx, b.logger, client, schedulingTopic, 0)
	})
}

// promote runs a Manager for topic until at most left messages wait, and
// returns how long that took. Progress is read with Inspector.Stats, so the
// bench counts waiting messages wherever the library keeps them.
func promote(ctx context.Context, logger watermill.LoggerAdapter, client *redis.Client, topic string, left int64) (time.Duration, error) {
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	if err != nil {
		return 0, err
	}
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{Client: client, Topics: []string{topic}}, logger)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Run(ctx) }()
	defer func() { _ = errors.Join(mgr.Close(), <-stopped) }()
	<-mgr.Running()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	last, lastMove := int64(-1), time.Now()
	for {
		st, err := insp.Stats(ctx, topic)
		if err != nil {
			return 0, err
		}
		if st.Waiting <= left {
			return time.Since(start), nil
		}
		if st.Waiting != last {
			last, lastMove = st.Waiting, time.Now()
		} else if time.Since(lastMove) > stallTimeout {
			return 0, fmt.Errorf("promotion stalled with %d messages waiting", st.Waiting)
		}
		<-tick.C
	}
}

// rawMoveScript is the physical limit of promotion: move up to 100 due
// members of a sorted set, with their bodies from a hash, to a stream.
var rawMoveScript = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)
if #ids == 0 then return 0 end
local bodies = redis.call('HMGET', KEYS[2], unpack(ids))
for i = 1, #ids do
  redis.call('XADD', KEYS[3], '*', 'm', bodies[i])
end
redis.call('HDEL', KEYS[2], unpack(ids))
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #ids - 1)
return #ids
`)

// rawMovePipeline is the number of script calls per round trip.
const rawMovePipeline = 16

// rawMove loads n due items (a sorted-set member and a hash field each) and
// measures moving them all with rawMoveScript from one connection.
func (b *bench) rawMove(n int, payload []byte) *float64 {
	if b.failed("flush", b.flush()) {
		return nil
	}
	c := newClient(b.addr, poolSize)
	defer c.Close()
	keys := []string{"raw:{t}:waiting", "raw:{t}:bodies", "raw:{t}:stream"}
	_, err := rawCommands(b, c, n, batchSize, func(p redis.Cmdable, i int) redis.Cmder {
		member := fmt.Sprintf("%036d", i)
		p.HSet(b.ctx, keys[1], member, payload)
		return p.ZAdd(b.ctx, keys[0], redis.Z{Score: float64(i), Member: member})
	})
	if b.failed("load raw items", err) || b.failed("load raw move script", rawMoveScript.Load(b.ctx, c).Err()) {
		return nil
	}
	return b.measure(fmt.Sprintf("raw Lua move of 100, %d per pipeline", rawMovePipeline), n, func() (time.Duration, error) {
		start := time.Now()
		for moved := int64(0); moved < int64(n); {
			pipe := c.Pipeline()
			cmds := make([]*redis.Cmd, rawMovePipeline)
			for i := range cmds {
				cmds[i] = rawMoveScript.EvalSha(b.ctx, pipe, keys, "+inf")
			}
			if _, err := pipe.Exec(b.ctx); err != nil {
				return 0, err
			}
			round := int64(0)
			for _, cmd := range cmds {
				k, _ := cmd.Int64()
				round += k
			}
			if round == 0 {
				return 0, fmt.Errorf("raw move: nothing left after %d of %d", moved, n)
			}
			moved += round
		}
		return time.Since(start), nil
	})
}
