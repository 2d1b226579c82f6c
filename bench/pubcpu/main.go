// Command pubcpu measures what one Publish call costs the publishing
// process at a steady rate: the process's CPU time (user + system) per
// call while one goroutine publishes one message per call, paced, into one
// topic, with nothing else running in the process. Scenario 13 measures a
// whole pipeline, whose noise on 2 shared cores hides a difference of 10%
// in the publishing side alone.
//
//	go run ./pubcpu -redis 127.0.0.1:6379                 # go-redis's default client
//	go run ./pubcpu -redis 127.0.0.1:6379 -context-timeouts # ContextTimeoutEnabled
//
// With -context-timeouts the client ends its socket waits at the call's
// deadline, so Publish runs its script in the caller's goroutine instead
// of a goroutine of its own (see PublisherConfig.PublishTimeout). -plain
// sends a SET per call instead of a Publish, to show what a round trip
// alone costs the process at that rate. Alternate runs of both ways and
// compare medians: single runs move by 10-20% on a busy machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/redisdelay/watermill-redisdelay"
)

func main() {
	addr := flag.String("redis", "", "address of a loopback redis-server (a topic of its own is used, then deleted)")
	rate := flag.Int("rate", 1000, "calls per second")
	window := flag.Duration("window", 6*time.Second, "how long to measure")
	delayed := flag.Bool("delayed", false, "messages delayed 1 s (default: immediate)")
	timeouts := flag.Bool("context-timeouts", false, "set go-redis's ContextTimeoutEnabled")
	plain := flag.Bool("plain", false, "a SET per call instead of a Publish")
	flag.Parse()
	if *addr == "" {
		log.Fatal("pubcpu: give -redis host:port of a loopback redis-server")
	}
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: *timeouts})
	defer client.Close()
	prefix := "pubcpu-" + watermill.NewShortUUID()
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, KeyPrefix: prefix}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	call := func() error {
		if *plain {
			return client.Set(ctx, prefix, "v", 0).Err()
		}
		msg := message.NewMessage(watermill.NewUUID(), make([]byte, 100))
		if *delayed {
			delay.Message(msg, delay.For(time.Second))
		}
		return pub.Publish("t", msg)
	}
	for range 200 { // warm up: the topic's registration, the scripts, the pool
		if err := call(); err != nil {
			log.Fatal(err)
		}
	}

	n := int(window.Seconds() * float64(*rate))
	every := time.Second / time.Duration(*rate)
	start, cpu0 := time.Now(), processCPU()
	next := start
	for range n {
		if err := call(); err != nil {
			log.Fatal(err)
		}
		next = next.Add(every)
		time.Sleep(time.Until(next))
	}
	took, cpu := time.Since(start), processCPU()-cpu0
	fmt.Printf("%d calls in %.1f s: %.1f µs of process CPU per call\n", n, took.Seconds(), float64(cpu.Nanoseconds())/1e3/float64(n))

	if keys, err := client.Keys(ctx, prefix+"*").Result(); err == nil && len(keys) > 0 {
		client.Del(ctx, keys...)
	}
}

func processCPU() time.Duration {
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		log.Fatal(err)
	}
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
