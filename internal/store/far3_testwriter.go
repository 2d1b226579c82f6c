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
	entries := []fpEntry{{shard: sh.fpIndex(shape.shard(h)), side: sh.fpSide(), fp: fpField(h), full: field}}
	if key != "" {
		kh := fpKeyHash(key)
		entries = append(entries, fpEntry{shard: sh.fpIndex(shape.shard(kh)), side: sh.fpKeySide(), fp: fpField(kh), full: key, key: true})
	}
	for i := range entries {
		if err := entries[i].read(ctx, c); err != nil {
			return err
		}
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
		for _, e := range entries {
			if err := e.write(ctx, pipe, b, pos); err != nil {
				return err
			}
		}
		if key != "" {
			pipe.HIncrBy(ctx, sh.FarMeta(), "nk", 1)
		}
		pipe.Publish(ctx, sh.Wake(), "d")
		return nil
	})
	return err
}

// fpEntry is an entry writeFar3At makes in the format 3 index: of the
// message's UUID, or of its business key (key), and what its fingerprint
// held before (cur, or none).
type fpEntry struct {
	shard, side, fp, full string
	key                   bool
	cur                   string
	none                  bool
}

func (e *fpEntry) read(ctx context.Context, c redis.Cmdable) error {
	cur, err := c.HGet(ctx, e.shard, e.fp).Result()
	if err == redis.Nil {
		e.none = true
		return nil
	}
	e.cur = cur
	return err
}

// write indexes the element at position pos of bucket b as fpindex.lua's
// fi_insert does.
func (e fpEntry) write(ctx context.Context, pipe redis.Pipeliner, b, pos int64) error {
	switch {
	case e.none:
		pipe.HSet(ctx, e.shard, e.fp, fpLoc(b, pos, false, e.key))
	case len(e.cur) == 1: // a tombstone
		pipe.HSet(ctx, e.shard, e.fp, fpLoc(b, pos, true, e.key))
	default:
		hb, hpos, _, err := fpParse(e.cur, b)
		if err != nil {
			return err
		}
		pipe.HSet(ctx, e.shard, e.fp, fpLoc(hb, hpos, true, len(e.cur) == 7 && e.cur[0]&fpLocKey != 0))
		pipe.HSet(ctx, e.side, e.full, fpLoc(b, pos, false, e.key))
	}
	return nil
}
