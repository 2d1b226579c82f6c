package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Rewritten counts what RewriteShard changed.
type Rewritten struct {
	Far    int // far messages moved into the waiting set (of format 2 or 3)
	Bodies int // waiting and retry bodies re-encoded
	Dead   int // dead letters re-encoded (each a new entry)
}

// RewriteShard rewrites what a partition holds at rest to storage level
// lvl, for a rollback to a release that reads up to it once a newer level
// was written: to level 2 (release 0.2.0's), far messages of format 3 move
// into the waiting set; to level 1 (release 0.1.0's), every far message of
// format 2's lists does (level 1 reads none), and waiting, retry and dead
// letter bodies that use level 2's codes are re-encoded. The ready and redelivery streams are not rewritten (their
// entries cannot change): they drain (NewerEntries counts what is left).
// Run it after pinning the level (PinLevel), so that nothing new of the
// newer level is written meanwhile.
func RewriteShard(ctx context.Context, c redis.Cmdable, sh Shard, lvl int) (Rewritten, error) {
	var out Rewritten
	if lvl >= Level3 {
		return out, nil
	}
	for from := int64(0); ; {
		refs, err := FarBuckets(ctx, c, sh, from, 64)
		if err != nil {
			return out, fmt.Errorf("list the far buckets of %s: %w", sh, err)
		}
		for _, ref := range refs {
			if v, _ := farUnref(ref); v != farFormat2 {
				continue
			}
			for pos := int64(0); ; {
				ms, next, done, err := FarRange(ctx, c, sh, ref, pos, 512)
				if err != nil {
					return out, err
				}
				ids := make([]string, 0, len(ms))
				for _, m := range ms {
					if lvl < Level2 || m.Format3 {
						ids = append(ids, m.ID)
					}
				}
				if err := FarPullMany(ctx, c, sh, ids); err != nil {
					return out, fmt.Errorf("move far messages of %s into the waiting set: %w", sh, err)
				}
				out.Far += len(ids)
				if done {
					break
				}
				pos = next
			}
		}
		if len(refs) < 64 {
			break
		}
		from = refs[len(refs)-1] + 1
	}
	if lvl >= Level2 {
		return out, nil // the bodies' codes are level 2's
	}
	n, err := rewriteHash(ctx, c, sh.Bodies(), lvl)
	out.Bodies += n
	if err != nil {
		return out, err
	}
	groups, err := c.SMembers(ctx, sh.Groups()).Result()
	if err != nil {
		return out, err
	}
	for _, g := range groups {
		n, err := rewriteHash(ctx, c, sh.retryBodies(g), lvl)
		out.Bodies += n
		if err != nil {
			return out, err
		}
		n, err = rewriteDead(ctx, c, sh.Dead(g), lvl)
		out.Dead += n
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// reencode is body at level lvl, or ok false when it needs no change
// (already readable at lvl, or not readable by this release at all).
func reencode(body string, lvl int) (string, bool) {
	if l := BodyLevel([]byte(body)); l == 0 || l <= lvl {
		return "", false
	}
	msg, err := Decode([]byte(body))
	if err != nil {
		return "", false
	}
	return string(EncodeAt(msg, lvl)), true
}

func rewriteHash(ctx context.Context, c redis.Cmdable, key string, lvl int) (int, error) {
	total := 0
	var cursor uint64
	for {
		kv, next, err := c.HScan(ctx, key, cursor, "", 256).Result()
		if err != nil {
			return total, fmt.Errorf("read %s: %w", key, err)
		}
		args := []any{"h"}
		for i := 0; i+1 < len(kv); i += 2 {
			if b, ok := reencode(kv[i+1], lvl); ok {
				args = append(args, kv[i], kv[i+1], b)
			}
		}
		if len(args) > 1 {
			n, err := rewriteScript.Run(ctx, c, []string{key}, args...).Int()
			total += n
			if err != nil {
				return total, err
			}
		}
		if cursor = next; cursor == 0 {
			return total, nil
		}
	}
}

func rewriteDead(ctx context.Context, c redis.Cmdable, key string, lvl int) (int, error) {
	total := 0
	end, err := c.XRevRangeN(ctx, key, "+", "-", 1).Result()
	if err != nil || len(end) == 0 {
		return 0, err
	}
	// Up to the last entry as it was: the rewritten ones go after it.
	last := end[0].ID
	for start := "-"; ; {
		es, err := c.XRangeN(ctx, key, start, last, 256).Result()
		if err != nil {
			return total, err
		}
		args := []any{"s"}
		for _, e := range es {
			if m, ok := e.Values["m"].(string); ok {
				if b, ok := reencode(m, lvl); ok {
					args = append(args, e.ID, m, b)
				}
			}
		}
		if len(args) > 1 {
			n, err := rewriteScript.Run(ctx, c, []string{key}, args...).Int()
			total += n
			if err != nil {
				return total, err
			}
		}
		if len(es) < 256 || es[len(es)-1].ID == last {
			return total, nil
		}
		start = "(" + es[len(es)-1].ID
	}
}

// NewerEntries counts the entries of a partition's ready stream and
// redelivery streams that a consumer group has still to read or settle
// (not read yet, or pending) and that use a storage level above lvl: what
// a rollback to lvl waits to drain. It reads up to limit entries per
// stream and group; more reads as limit.
func NewerEntries(ctx context.Context, c redis.Cmdable, sh Shard, lvl, limit int) (int, error) {
	groups, err := c.SMembers(ctx, sh.Groups()).Result()
	if err != nil {
		return 0, err
	}
	n := 0
	count := func(stream, group, start string) error {
		es, err := c.XRangeN(ctx, stream, start, "+", int64(limit)).Result()
		if err != nil {
			return err
		}
		for _, e := range es {
			if m, ok := e.Values["m"].(string); ok && BodyLevel([]byte(m)) > lvl {
				n++
			}
		}
		pend, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: int64(limit)}).Result()
		if err != nil {
			return err
		}
		for _, p := range pend {
			es, err := c.XRangeN(ctx, stream, p.ID, p.ID, 1).Result()
			if err != nil {
				return err
			}
			for _, e := range es {
				if m, ok := e.Values["m"].(string); ok && BodyLevel([]byte(m)) > lvl {
					n++
				}
			}
		}
		return nil
	}
	infos, err := c.XInfoGroups(ctx, sh.Stream()).Result()
	if err != nil && !isNoSuchKey(err) {
		return 0, err
	}
	for _, g := range infos {
		if err := count(sh.Stream(), g.Name, "("+g.LastDeliveredID); err != nil {
			return n, err
		}
	}
	for _, g := range groups {
		redo, err := c.XInfoGroups(ctx, sh.Redelivery(g)).Result()
		if err != nil {
			if isNoSuchKey(err) {
				continue
			}
			return n, err
		}
		for _, r := range redo {
			if err := count(sh.Redelivery(g), r.Name, "("+r.LastDeliveredID); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}
