package main

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// batchSize is the number of messages per call of the batch figures.
const batchSize = 100

// farFuture delays messages that must stay waiting during a run.
const farFuture = time.Hour

// nearDelay is the delay of the messages that wait in the waiting set
// itself (not the far tier) and are then consumed: the benchmark issue's
// harness publishes with 50 ms.
const nearDelay = 50 * time.Millisecond

// throughput measures scenarios 1 and 2 for each payload size: publishing
// (immediate, delayed, batches) and consuming the published backlog through
// a Router, with one subscriber and with several in one consumer group.
func (b *bench) throughput() {
	for _, size := range b.opts.Payloads {
		payload := randomPayload(size)
		sfx := fmt.Sprintf(", %d B", size)
		pub, sub1, subN, batch := map[string]*float64{}, map[string]*float64{}, map[string]*float64{}, map[string]*float64{}
		for _, sys := range watermillSystems {
			pub[sys.name], sub1[sys.name] = b.publishAndConsume(sys, payload, 1, true, 0)
			_, subN[sys.name] = b.publishAndConsume(sys, payload, b.opts.Subscribers, false, 0)
			batch[sys.name] = b.publishOnly(sys, payload, batchSize, 0)
		}
		// Messages that waited: published nearDelay ahead, consumed once due
		// (the scheduler's promotion is part of the consuming time).
		nearPub, waited1 := b.publishAndConsume(watermillSystems[0], payload, 1, true, nearDelay)
		_, waitedN := b.publishAndConsume(watermillSystems[0], payload, b.opts.Subscribers, false, nearDelay)
		delayed := b.publishOnly(watermillSystems[0], payload, 1, farFuture)
		batchDelayed := b.publishOnly(watermillSystems[0], payload, batchSize, farFuture)
		asynqDelayed := b.asynqEnqueue(payload)
		rawXAdd, rawSub1 := b.rawStream(payload, 1, 1)
		rawXAddBatch, rawSubN := b.rawStream(payload, batchSize, b.opts.Subscribers)
		rawZAdd := b.rawZAdd(batchSize)

		b.rep.row("1", "publish immediate"+sfx, "msg/s", "", pub[sysRedisdelay],
			peer(sysRedisstream, pub[sysRedisstream]), peer(sysGoChannel, pub[sysGoChannel]),
			peer(sysRaw+" XADD", rawXAdd))
		b.rep.row("1", "publish delayed 1 h (delay.For, far tier)"+sfx, "msg/s", "≥ 2× redisstream immediate", delayed,
			peer(sysRedisstream+" immediate", pub[sysRedisstream]), peer("asynq ProcessIn", asynqDelayed))
		b.rep.row("1", fmt.Sprintf("publish delayed %v (delay.For)%s", nearDelay, sfx), "msg/s", "≥ 2× redisstream immediate", nearPub,
			peer(sysRedisstream+" immediate", pub[sysRedisstream]))
		b.rep.row("1", fmt.Sprintf("batch Publish of %d, immediate%s", batchSize, sfx), "msg/s", "", batch[sysRedisdelay],
			peer(sysRedisstream, batch[sysRedisstream]), peer(sysGoChannel, batch[sysGoChannel]),
			peer(sysRaw+" XADD pipelined", rawXAddBatch))
		b.rep.row("1", fmt.Sprintf("batch Publish of %d, delayed%s", batchSize, sfx), "msg/s", "≥ 0.6× raw ZADD pipelined", batchDelayed,
			peer(sysRaw+" ZADD pipelined", rawZAdd))
		subTarget := "≥ 10× redisstream and ≥ 0.8× gochannel"
		b.rep.row("2", "subscribe, 1 subscriber"+sfx, "msg/s", subTarget, sub1[sysRedisdelay],
			peer(sysRedisstream, sub1[sysRedisstream]), peer(sysGoChannel, sub1[sysGoChannel]),
			peer(sysRaw+" XREADGROUP+XACK", rawSub1))
		b.rep.row("2", fmt.Sprintf("subscribe, %d subscribers in one group%s", b.opts.Subscribers, sfx), "msg/s", subTarget, subN[sysRedisdelay],
			peer(sysRedisstream, subN[sysRedisstream]), peer(sysGoChannel, subN[sysGoChannel]),
			peer(sysRaw+" XREADGROUP+XACK", rawSubN))
		waitedTarget := "≥ 0.8× immediate ones"
		b.rep.row("2", fmt.Sprintf("subscribe to messages that waited %v, 1 subscriber%s", nearDelay, sfx), "msg/s", waitedTarget, waited1,
			peer(sysRedisdelay+" immediate", sub1[sysRedisdelay]), peer(sysRedisstream+" immediate", sub1[sysRedisstream]))
		b.rep.row("2", fmt.Sprintf("subscribe to messages that waited %v, %d subscribers%s", nearDelay, b.opts.Subscribers, sfx), "msg/s", waitedTarget, waitedN,
			peer(sysRedisdelay+" immediate", subN[sysRedisdelay]), peer(sysRedisstream+" immediate", subN[sysRedisstream]))
	}
}

// publishAndConsume publishes n messages to a fresh Pub/Sub, delayed by
// delayFor when it is not zero, then consumes them through a Router once
// they are due. With measurePublish the messages are published one per call
// and that rate is returned; otherwise they are prepared in batches and
// only the subscribe rate is measured.
func (b *bench) publishAndConsume(sys watermillSystem, payload []byte, subscribers int, measurePublish bool, delayFor time.Duration) (pubRate, subRate *float64) {
	if b.failed("flush", b.flush()) {
		return nil, nil
	}
	ps, err := sys.open(b, subscribers)
	if b.failed("open "+sys.name, err) {
		return nil, nil
	}
	defer ps.close()
	topics := ps.topics("throughput")
	if b.failed("initialize "+sys.name, ps.initialize(topics)) {
		return nil, nil
	}
	n := b.opts.Messages
	size := len(payload)
	kind := "immediate"
	if delayFor > 0 {
		kind = fmt.Sprintf("delayed %v", delayFor)
	}
	if measurePublish {
		pubRate = b.measure(fmt.Sprintf("publish %s %d B · %s", kind, size, sys.name), n, func() (time.Duration, error) {
			return publishWatermill(ps.pub, topics, n, 1, payload, delayFor)
		})
		if pubRate == nil {
			return nil, nil
		}
	} else if _, err := publishWatermill(ps.pub, topics, n, batchSize, payload, delayFor); b.failed("prepare messages for "+sys.name, err) {
		return nil, nil
	}
	time.Sleep(delayFor) // the last published is due
	name := fmt.Sprintf("subscribe %d× %d B %s · %s", subscribers, size, kind, sys.name)
	subRate = b.measure(name, n, func() (time.Duration, error) {
		// -cpuprofile: the consuming side's profile, CPU and allocations
		// per message (the publishing is done).
		stop := startDeliveryProfile(b.ctx, b.admin, topics[0], name, func() int64 { return -1 })
		return consume(b, ps.subs, topics, n, func() { stop(n) })
	})
	return pubRate, subRate
}

// publishOnly measures publishing n messages, batch per call, delayed by
// delayFor when it is not zero.
func (b *bench) publishOnly(sys watermillSystem, payload []byte, batch int, delayFor time.Duration) *float64 {
	if b.failed("flush", b.flush()) {
		return nil
	}
	ps, err := sys.open(b, 0)
	if b.failed("open "+sys.name, err) {
		return nil
	}
	defer ps.close()
	kind := "immediate"
	if delayFor > 0 {
		kind = "delayed"
	}
	name := fmt.Sprintf("publish %s %d B, %d per call · %s", kind, len(payload), batch, sys.name)
	return b.measure(name, b.opts.Messages, func() (time.Duration, error) {
		return publishWatermill(ps.pub, []string{"throughput"}, b.opts.Messages, batch, payload, delayFor)
	})
}

// publishWatermill publishes n messages from 64 goroutines, batch per
// Publish call, spreading the calls over topics; a positive delayFor adds
// Watermill's delay metadata (delay.For).
func publishWatermill(pub message.Publisher, topics []string, n, batch int, payload []byte, delayFor time.Duration) (time.Duration, error) {
	return runPublishers(n, batch, func(first, count int) error {
		msgs := make([]*message.Message, count)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewULID(), payload)
			if delayFor > 0 {
				delay.Message(msgs[i], delay.For(delayFor))
			}
		}
		return pub.Publish(topics[(first/batch)%len(topics)], msgs...)
	})
}

// asynqEnqueue measures asynq's scheduling of tasks (ProcessIn) from 64
// goroutines: the delayed publish of the peer built for delays.
func (b *bench) asynqEnqueue(payload []byte) *float64 {
	if b.failed("flush", b.flush()) {
		return nil
	}
	rdb := newClient(b.addr, poolSize)
	defer rdb.Close()
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()
	n := b.opts.Messages
	return b.measure(fmt.Sprintf("enqueue ProcessIn %d B · asynq", len(payload)), n, func() (time.Duration, error) {
		return runPublishers(n, 1, func(int, int) error {
			_, err := client.Enqueue(asynq.NewTask(asynqTaskType, payload), asynq.ProcessIn(farFuture))
			return err
		})
	})
}

// rawStream measures the physical limit of the stream design on this
// Redis: XADD from 64 goroutines (batch 1: one command per round trip;
// otherwise pipelines of batch), then XREADGROUP COUNT 100 + XACK of the
// entries by the given number of consumers.
func (b *bench) rawStream(payload []byte, batch, consumers int) (pubRate, subRate *float64) {
	if b.failed("flush", b.flush()) {
		return nil, nil
	}
	c := newClient(b.addr, poolSize)
	defer c.Close()
	const stream = "raw:stream"
	if b.failed("raw stream group", c.XGroupCreateMkStream(b.ctx, stream, consumerGroup, "0").Err()) {
		return nil, nil
	}
	n := b.opts.Messages
	name := fmt.Sprintf("raw XADD %d B, %d per round trip", len(payload), batch)
	pubRate = b.measure(name, n, func() (time.Duration, error) {
		return rawCommands(b, c, n, batch, func(p redis.Cmdable, _ int) redis.Cmder {
			return p.XAdd(b.ctx, &redis.XAddArgs{Stream: stream, Values: []any{"m", payload}})
		})
	})
	if pubRate == nil {
		return nil, nil
	}
	name = fmt.Sprintf("raw XREADGROUP COUNT 100 + XACK %d B, %d consumers", len(payload), consumers)
	subRate = b.measure(name, n, func() (time.Duration, error) {
		return rawConsume(b, c, stream, consumers, n)
	})
	return pubRate, subRate
}

// rawZAdd measures pipelined ZADD of n members, batch per pipeline, from 64
// goroutines.
func (b *bench) rawZAdd(batch int) *float64 {
	if b.failed("flush", b.flush()) {
		return nil
	}
	c := newClient(b.addr, poolSize)
	defer c.Close()
	n := b.opts.Messages
	due := float64(time.Now().Add(farFuture).UnixMilli())
	return b.measure(fmt.Sprintf("raw ZADD, %d per pipeline", batch), n, func() (time.Duration, error) {
		return rawCommands(b, c, n, batch, func(p redis.Cmdable, i int) redis.Cmder {
			return p.ZAdd(b.ctx, "raw:waiting", redis.Z{Score: due, Member: fmt.Sprintf("%026d", i)})
		})
	})
}

// rawCommands sends n commands from 64 goroutines: one per round trip when
// batch is 1, otherwise in pipelines of batch.
func rawCommands(b *bench, c *redis.Client, n, batch int, cmd func(p redis.Cmdable, i int) redis.Cmder) (time.Duration, error) {
	return runPublishers(n, batch, func(first, count int) error {
		if batch == 1 {
			return cmd(c, first).Err()
		}
		pipe := c.Pipeline()
		for i := first; i < first+count; i++ {
			cmd(pipe, i)
		}
		_, err := pipe.Exec(b.ctx)
		return err
	})
}

// rawConsume reads n entries with XREADGROUP COUNT 100 and acknowledges each
// read with one XACK, from consumers goroutines of one group.
func rawConsume(b *bench, c *redis.Client, stream string, consumers, n int) (time.Duration, error) {
	var (
		got      atomic.Int64
		finished atomic.Int64 // unix ns when the n-th entry was acknowledged
		errs     = make(chan error, consumers)
	)
	start := time.Now()
	for i := range consumers {
		go func() {
			for got.Load() < int64(n) {
				res, err := c.XReadGroup(b.ctx, &redis.XReadGroupArgs{
					Group: consumerGroup, Consumer: fmt.Sprintf("raw-%d", i),
					Streams: []string{stream, ">"}, Count: 100, Block: 100 * time.Millisecond,
				}).Result()
				if err == redis.Nil {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				ids := make([]string, len(res[0].Messages))
				for j, m := range res[0].Messages {
					ids[j] = m.ID
				}
				if err := c.XAck(b.ctx, stream, consumerGroup, ids...).Err(); err != nil {
					errs <- err
					return
				}
				if got.Add(int64(len(ids))) >= int64(n) {
					finished.CompareAndSwap(0, time.Now().UnixNano())
				}
			}
			errs <- nil
		}()
	}
	var err error
	for range consumers {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return 0, err
	}
	return time.Duration(finished.Load() - start.UnixNano()), nil
}
