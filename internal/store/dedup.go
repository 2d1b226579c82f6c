package store

import (
	"context"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DedupKey is the key of a deduplication key in a namespace: key is used
// as is when it is a valid name (valid), else hex-encoded; braces make it
// its own hash tag.
func DedupKey(prefix, namespace, key string, valid bool) string {
	if !valid || key[0] == '~' {
		key = "~" + hex.EncodeToString([]byte(key))
	}
	return prefix + ":dedup:" + namespace + ":{" + key + "}"
}

// MarkSeen sets a deduplication key for window unless it is set; it
// reports whether it set it (the key was not seen within the window). The
// value, when the key was first seen, is for operators reading it.
func MarkSeen(ctx context.Context, c redis.Cmdable, key string, window time.Duration) (bool, error) {
	return c.SetNX(ctx, key, strconv.FormatInt(time.Now().UnixMilli(), 10), window).Result()
}
