package store

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

func isNoSuchKey(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such key")
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
