package redisdelay

import (
	"github.com/redisdelay/watermill-redisdelay/internal/levels"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// Version is this release of the library (CHANGELOG.md). Processes announce
// it, with the storage level they read, in Redis: Inspector.Storage and
// `redisdelay storage` list the versions live.
const Version = "0.2.0"

// StorageLevel is the newest storage level this release reads and writes.
// It writes it only once every live process reads it (docs/upgrading.md).
const StorageLevel = store.LevelNewest

func init() { levels.Version = Version }
