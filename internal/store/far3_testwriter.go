package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// WriteFar3 stores msg in partition sh's far tier in format 3, due at due,
// with an optional business key and high priority: for the tests of the
// readers, which need a message of a chosen due time in a chosen shape.
// The library's writer is publish.lua (FarArg.Format3); this one indexes
// the message as it does: a fingerprint taken in its shard flags the
// holder's entry as collided and sends the newcomer to the side table,
// and a tombstone is taken over, and the far filter (if any) gets its
// bit, at the selectors it has (farfilter.go's modes). Not atomic, and no split: tests set the shape they want in :fmeta
// (iL, iS) before writing.
func WriteFar3(ctx context.Context, c redis.Cmdable, sh Shard, msg *message.Message, due time.Time, key string, prio bool) error {
	// Rounded up to the ms, as the library rounds delays: never early.
	dueMs := due.Add(time.Millisecond - 1).UnixMilli()
	b, start, unpackAt, ok := farPlace(time.Now().UnixMilli(), dueMs)
	if !ok {
		return fmt.Errorf("a message due %s is not for the far tier", time.Until(due))
	}
	return writeFar3At(ctx, c, sh, b, start, unpackAt, msg, float64(dueMs*1024), key, prio)
}

// writeFar3At is WriteFar3 into bucket b (first due ms start, unpacked at
// unpackAt when new) with due score score.
func writeFar3At(ctx context.Context, c redis.Cmdable, sh Shard, b, start, unpackAt int64, msg *message.Message, score float64, key string, prio bool) error {
	el, err := encodeFar3(start, farElem{Score: score, Body: string(Encode(msg)), Key: key, Prio: prio})
	if err != nil {
		return err
	}
	vals, err := c.HMGet(ctx, sh.FarMeta(), farPopped(2, b), fpShapeFields[0], fpShapeFields[1], "fb", "fs").Result()
	if err != nil {
		return err
	}
	shape, err := fpShapeOf(vals[1:3])
	if err != nil {
		return err
	}
	fbs, _ := vals[3].(string)
	blocks, _ := strconv.ParseInt(fbs, 10, 64)
	p, _ := vals[0].(string)
	popped, _ := strconv.ParseInt(p, 10, 64)
	n, err := c.RPush(ctx, sh.FarList(b), el).Result()
	if err != nil {
		return err
	}
	pos := popped + n - 1
	field := farField(msg.UUID)
	h := fpHash(field)
	shard, fp := sh.fpIndex(shape.shard(h)), fpField(h)
	cur, curErr := c.HGet(ctx, shard, fp).Result()
	if curErr != nil && curErr != redis.Nil {
		return curErr
	}
	mark := "\x00" + msg.UUID // farmark.lua's far_mark
	if len(field) == 16 {
		mark = "\x00\x01" + field
	}
	_, err = c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.ZAddNX(ctx, sh.FarZ(), redis.Z{Score: float64(unpackAt), Member: b})
		pipe.HIncrBy(ctx, sh.FarMeta(), "L:"+strconv.FormatInt(b, 10), 1)
		pipe.HIncrBy(ctx, sh.FarMeta(), "n", 1)
		pipe.HIncrBy(ctx, sh.FarMeta(), "fm", 1) // fm moves with n, as publish.lua keeps it
		pipe.HSetNX(ctx, sh.FarMeta(), fpShapeFields[0], shape.L)
		if blocks > 0 { // the far filter's bit, counted
			sel := farSel(field)
			if vals[4] == "3" {
				sel = fpSel(h)
			}
			pipe.SetBit(ctx, sh.farFilter(), int64(sel)%(blocks*512), 1)
			pipe.HIncrBy(ctx, sh.FarMeta(), "fi", 1)
		}
		switch {
		case curErr == redis.Nil:
			pipe.HSet(ctx, shard, fp, fpLoc(b, pos, false))
		case len(cur) == 1: // a tombstone
			pipe.HSet(ctx, shard, fp, fpLoc(b, pos, true))
		default:
			hb, hpos, _, err := fpParse(cur, b)
			if err != nil {
				return err
			}
			pipe.HSet(ctx, shard, fp, fpLoc(hb, hpos, true))
			pipe.HSet(ctx, sh.fpSide(), field, fpLoc(b, pos, false))
		}
		if key != "" {
			pipe.HSet(ctx, sh.Bkeys(), key, mark)
		}
		pipe.Publish(ctx, sh.Wake(), "d")
		return nil
	})
	return err
}
