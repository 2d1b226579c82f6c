package store

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

func isNoSuchKey(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such key")
}

// IsNoPerm reports an error of Redis's ACL.
func IsNoPerm(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOPERM")
}

// IsNoGroup reports Redis's NOGROUP error: a consumer group (or its
// stream) is gone, e.g. after a restart without persistence.
func IsNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

// isOOM reports Redis's refusal of a write at maxmemory (policy noeviction,
// or nothing left to evict).
func isOOM(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "OOM ")
}

// IsClientClosed reports whether err comes from a go-redis client that was
// closed: nothing will work again, so loops stop rather than retry.
func IsClientClosed(err error) bool {
	return errors.Is(err, redis.ErrClosed)
}
