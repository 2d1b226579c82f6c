// Package advance joins package redisdelaytest to the root package, whose
// unexported code moves a topic's clock forward: the root package sets
// Func in its init, redisdelaytest calls it. Nothing else uses it, so the
// root package's API carries nothing for tests.
package advance

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Report counts what an advance moved.
type Report struct {
	Waiting, Retrying, Far int64
	Ticks, SkippedTicks    int64
}

// Func advances the clock of topics (all of the prefix when none is
// given) by d; set by the root package.
var Func func(ctx context.Context, client redis.UniversalClient, prefix string, d time.Duration, topics []string) (Report, error)
