// Package redisconn gives the examples a Redis client: the server at the
// address in the first argument or REDIS_ADDR, or else an embedded in-memory
// Redis (miniredis), so the examples run with no Redis installed.
package redisconn

import (
	"flag"
	"log"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Client returns the client and a function that releases it.
func Client() (redis.UniversalClient, func()) {
	flag.Parse()
	addr := flag.Arg(0)
	if addr == "" {
		addr = os.Getenv("REDIS_ADDR")
	}
	if addr != "" {
		log.Printf("using Redis at %s", addr)
		c := redis.NewClient(&redis.Options{Addr: addr})
		return c, func() { _ = c.Close() }
	}
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("no Redis address given (argument or REDIS_ADDR): using an embedded in-memory Redis at %s", mr.Addr())
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return c, func() { _ = c.Close(); mr.Close() }
}
