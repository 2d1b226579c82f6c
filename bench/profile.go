package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// cpuProfile, when set, profiles the bench process while messages are
// consumed (the subscribe runs of scenario 2, every system; due deliveries
// of scenarios 7 and 10, from the due time to the last delivery): that is
// the consumer side's cost, publishing done. Each run writes
// <cpuprofile>.<k>.
var cpuProfile = flag.String("cpuprofile", "", "write a CPU profile of each subscribe run (scenario 2) and due delivery (scenarios 7, 10) to this file, suffixed .1, .2, ...")

// traceDelivery, when set, prints every 500 ms of a due delivery how many
// messages were promoted into the topic's ready stream (XINFO STREAM
// entries-added, partition 0) and how many delivered: which side keeps up.
var traceDelivery = flag.Bool("trace-delivery", false, "print promoted and delivered counts every 500 ms of a due delivery (scenarios 7, 10)")

var profiles int

// startDeliveryProfile starts a delivery's CPU profile (if asked for) and
// returns what stops it and prints the process's CPU time per delivered
// message meanwhile (user+system, from getrusage).
func startDeliveryProfile(ctx context.Context, admin *redis.Client, topic, name string, delivered func() int64) func(n int) {
	stopTrace := func() {}
	if *traceDelivery {
		stopTrace = traceDeliveries(ctx, admin, topic, delivered)
	}
	var f *os.File
	if *cpuProfile != "" {
		profiles++
		var err error
		if f, err = os.Create(fmt.Sprintf("%s.%d", *cpuProfile, profiles)); err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				_ = f.Close()
				f = nil
			}
		}
		if err != nil {
			progress("   cpuprofile: %v", err)
		}
	}
	var mem0 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	cpu0, wall0 := processCPU(), time.Now()
	rcpu0, _ := cpuSeconds(ctx, admin)
	stats0, _ := commandStats(ctx, admin)
	return func(n int) {
		stopTrace()
		cpu, wall := processCPU()-cpu0, time.Since(wall0)
		rcpu, _ := cpuSeconds(ctx, admin)
		stats, _ := commandStats(ctx, admin)
		before := map[string]CommandStat{}
		for _, st := range stats0 {
			before[st.Command] = st
		}
		line := ""
		for _, st := range stats {
			calls, usec := st.Calls-before[st.Command].Calls, st.Usec-before[st.Command].Usec
			if calls > 0 && usec > 0 {
				line += fmt.Sprintf(" %s %.4f/msg %.2fµs/msg;", st.Command, float64(calls)/float64(n), float64(usec)/float64(n))
			}
		}
		progress("   during delivery: Redis CPU %.2f s (%.2f cores); commands:%s", rcpu-rcpu0, (rcpu-rcpu0)/wall.Seconds(), line)
		if f != nil {
			pprof.StopCPUProfile()
			_ = f.Close()
			progress("   cpuprofile written: %s", f.Name())
		}
		var mem runtime.MemStats
		runtime.ReadMemStats(&mem)
		progress("   %s: bench process CPU %.2f s during delivery (%.2f cores over %s), %.2f µs and %.1f allocations (%.0f B) per message",
			name, cpu.Seconds(), cpu.Seconds()/wall.Seconds(), wall.Round(time.Millisecond), float64(cpu.Microseconds())/float64(n),
			float64(mem.Mallocs-mem0.Mallocs)/float64(n), float64(mem.TotalAlloc-mem0.TotalAlloc)/float64(n))
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func traceDeliveries(ctx context.Context, admin *redis.Client, topic string, delivered func() int64) func() {
	stream := redisdelay.DefaultKeyPrefix + ":{" + topic + "}:stream"
	added := func() int64 {
		info, err := admin.XInfoStream(ctx, stream).Result()
		if err != nil {
			return -1
		}
		return info.EntriesAdded
	}
	base, start := added(), time.Now()
	return every(500*time.Millisecond, func() {
		progress("   +%5.1fs promoted %8d delivered %8d", time.Since(start).Seconds(), added()-base, delivered())
	})
}

// every runs fn every period until the function it returns is called,
// which returns once fn has stopped.
func every(period time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fn()
			}
		}
	}()
	return func() { close(done); <-stopped }
}
