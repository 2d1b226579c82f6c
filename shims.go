package redisdelay

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/redisdelay/watermill-redisdelay/internal/loglimit"
	"github.com/redisdelay/watermill-redisdelay/internal/pause"
)

// The names of helpers that moved to internal packages, as the root files
// call them.

// logLimiter holds back repeated errors (internal/loglimit). A Subscriber
// and a Manager (with its scheduler) have one each.
type logLimiter struct{ l *loglimit.Limiter }

func newLogLimiter() *logLimiter { return &logLimiter{l: loglimit.New()} }

// errorf logs msg with err and fields unless the same message with the same
// kind of error was logged recently (see loglimit.Limiter.Errorf).
func (l *logLimiter) errorf(logger watermill.LoggerAdapter, msg string, err error, fields watermill.LogFields) {
	l.l.Errorf(logger, msg, err, fields)
}

// backoff is the pause after the n-th consecutive failure (pause.Backoff).
func backoff(n int, limit time.Duration) time.Duration { return pause.Backoff(n, limit) }

// sleep waits d, or less when ctx ends (pause.Sleep).
func sleep(ctx context.Context, d time.Duration) { pause.Sleep(ctx, d) }
