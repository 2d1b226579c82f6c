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

// waitingKey is the sorted set of a topic's waiting messages, as the
// package README documents the key layout: the bench polls its size to see
// promotion progress.
func waitingKey(topic string) string {
	return redisdelay.DefaultKeyPrefix + ":{" + topic + "}:waiting"
}

// scheduling measures scenario 5: how fast a Manager promotes a backlog of
// due messages, against a minimal Lua script moving 100 due items per call
// from a sorted set and a hash to a stream, pipelined, on the same Redis.
func (b *bench) scheduling() {
	n := b.opts.Schedule
	payload := randomPayload(100)
	_, ours := b.promoteBacklog(0, n, payload, false)
	raw := b.rawMove(n, payload)
	b.rep.row("5", fmt.Sprintf("promote %s due messages (Manager defaults)", count(n)), "msg/s", "≥ 0.5× raw Lua move",
		ours, peer(sysRaw+" Lua move of 100, pipelined", raw))
}

// scaling measures scenario 7: the publish rate of delayed messages (one per
// Publish from 64 goroutines) and the promotion rate, with a small and a
// large backlog of messages waiting far in the future in the same topic.
func (b *bench) scaling() {
	n := b.opts.Scaling
	payload := randomPayload(16)
	smallPub, smallPromote := b.promoteBacklog(b.opts.BacklogSmall, n, payload, true)
	largePub, largePromote := b.promoteBacklog(b.opts.Backlog, n, payload, true)
	target := "≥ 0.8× the small backlog"
	ref := fmt.Sprintf("at %s backlog", count(b.opts.BacklogSmall))
	b.rep.row("7", fmt.Sprintf("publish delayed at %s backlog", count(b.opts.Backlog)), "msg/s", target,
		largePub, peer(ref, smallPub))
	b.rep.row("7", fmt.Sprintf("promote at %s backlog", count(b.opts.Backlog)), "msg/s", target,
		largePromote, peer(ref, smallPromote))
}

// promoteBacklog fills a topic with backlog messages waiting far in the
// future, publishes n messages due in 1 ms and measures how fast a Manager
// moves those n to the ready stream. With measurePublish the n messages are
// published one per call and timed; otherwise in untimed batches.
func (b *bench) promoteBacklog(backlog, n int, payload []byte, measurePublish bool) (pubRate, promoteRate *float64) {
	if b.failed("flush", b.flush()) {
		return nil, nil
	}
	client := newClient(b.addr, poolSize)
	defer client.Close()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, b.logger)
	if b.failed("publisher", err) {
		return nil, nil
	}
	topics := []string{schedulingTopic}
	if backlog > 0 {
		progress("loading a backlog of %s waiting messages", count(backlog))
		_, err := publishWatermill(pub, topics, backlog, batchSize, payload, 24*time.Hour)
		if b.failed("load backlog", err) {
			return nil, nil
		}
	}
	at := fmt.Sprintf("at backlog %s · %s", count(backlog), sysRedisdelay)
	if measurePublish {
		pubRate = b.measure("publish delayed "+at, n, func() (time.Duration, error) {
			return publishWatermill(pub, topics, n, 1, payload, time.Millisecond)
		})
		if pubRate == nil {
			return nil, nil
		}
	} else {
		_, err := publishWatermill(pub, topics, n, batchSize, payload, time.Millisecond)
		if b.failed("publish due messages", err) {
			return nil, nil
		}
	}
	time.Sleep(10 * time.Millisecond) // all due
	promoteRate = b.measure(fmt.Sprintf("promote %s due ", count(n))+at, n, func() (time.Duration, error) {
		return promote(b.ctx, b.logger, client, schedulingTopic, int64(backlog))
	})
	return pubRate, promoteRate
}

// promote runs a Manager for topic until at most left messages wait, and
// returns how long that took.
func promote(ctx context.Context, logger watermill.LoggerAdapter, client *redis.Client, topic string, left int64) (time.Duration, error) {
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
		waiting, err := client.ZCard(ctx, waitingKey(topic)).Result()
		if err != nil {
			return 0, err
		}
		if waiting <= left {
			return time.Since(start), nil
		}
		if waiting != last {
			last, lastMove = waiting, time.Now()
		} else if time.Since(lastMove) > stallTimeout {
			return 0, fmt.Errorf("promotion stalled with %d messages waiting", waiting)
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
