package main

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// memoryTopic is the topic of the memory scenario.
const memoryTopic = "memory"

// memory measures scenario 6: Redis memory (INFO used_memory) per message
// waiting for its due time, 100 B payloads: this adapter, asynq scheduled
// tasks, and a bare sorted set + hash of ULID → payload as the floor of the
// design (the adapter's messages have ULIDs too).
func (b *bench) memory() {
	n := b.opts.Memory
	payload := randomPayload(100)
	var bodySize *float64
	ours := b.bytesPerMessage(sysRedisdelay, n, func(c *redis.Client) error {
		pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: c}, b.logger)
		if err != nil {
			return err
		}
		if _, err := publishWatermill(pub, []string{memoryTopic}, n, batchSize, payload, farFuture); err != nil {
			return err
		}
		// What one stored message takes: the encoded ID, metadata
		// (including Watermill's delay keys) and payload.
		bodies := redisdelay.DefaultKeyPrefix + ":{" + memoryTopic + "}:bodies"
		fields, err := c.HRandField(b.ctx, bodies, 1).Result()
		if err == nil && len(fields) == 1 {
			var size int64
			if size, err = c.HStrLen(b.ctx, bodies, fields[0]).Result(); err == nil {
				bodySize = ptr(float64(size))
			}
		}
		return err
	})
	asynqBytes := b.bytesPerMessage("asynq", n, func(c *redis.Client) error {
		client := asynq.NewClientFromRedisClient(c)
		defer client.Close()
		_, err := runPublishers(n, 1, func(int, int) error {
			_, err := client.Enqueue(asynq.NewTask(asynqTaskType, payload), asynq.ProcessIn(farFuture))
			return err
		})
		return err
	})
	raw := b.bytesPerMessage(sysRaw, n, func(c *redis.Client) error {
		due := float64(time.Now().Add(farFuture).UnixMilli())
		_, err := rawCommands(b, c, n, batchSize, func(p redis.Cmdable, _ int) redis.Cmder {
			id := watermill.NewULID() // as the adapter's messages

			p.HSet(b.ctx, "raw:bodies", id, payload)
			return p.ZAdd(b.ctx, "raw:waiting", redis.Z{Score: due, Member: id})
		})
		return err
	})
	b.rep.row("6", fmt.Sprintf("%s waiting messages, 100 B payload", count(n)), "B/msg", "≤ 300 B and below asynq",
		ours, peer("asynq", asynqBytes), peer(sysRaw+" sorted set + hash (ULID → payload)", raw))
	b.rep.row("6", "stored size of one message body (ID, metadata, payload)", "B", "", bodySize)
}

// bytesPerMessage returns the growth of used_memory per message while fill
// stores n messages, measured with fill's connections closed.
func (b *bench) bytesPerMessage(system string, n int, fill func(*redis.Client) error) *float64 {
	if b.failed("flush", b.flush()) {
		return nil
	}
	before, err := usedMemory(b.ctx, b.admin)
	if b.failed("INFO memory", err) {
		return nil
	}
	start := time.Now()
	c := newClient(b.addr, poolSize)
	err = fill(c)
	_ = c.Close()
	if b.failed(fmt.Sprintf("store %d messages in %s", n, system), err) {
		return nil
	}
	time.Sleep(200 * time.Millisecond) // let Redis free the closed connections' buffers
	after, err := usedMemory(b.ctx, b.admin)
	if b.failed("INFO memory", err) {
		return nil
	}
	perMsg := float64(after-before) / float64(n)
	progress("%-60s %10.0f B/msg (%s messages stored in %.1fs)", "memory · "+system, perMsg, count(n), time.Since(start).Seconds())
	return &perMsg
}
