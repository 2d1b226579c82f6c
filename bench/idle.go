package main

import (
	"fmt"
	"sync"
	"time"
)

// idleWarmup lets subscriptions settle before the idle measurement.
const idleWarmup = 2 * time.Second

// idle measures scenario 8: the Redis CPU (and commands per second) caused by
// idle topics, each with its own subscriber (as separate services would
// run), against redisstream and an idle Redis without clients. Every
// Subscriber has the defaults, its embedded scheduler included, and no
// Manager runs: services that each consume their own topic, as users run
// them.
func (b *bench) idle() {
	topics := b.opts.IdleTopics
	cpu, cmds := map[string]*float64{}, map[string]*float64{}
	for _, sys := range watermillSystems[:2] {
		cpu[sys.name], cmds[sys.name] = b.idleLoad(sys, topics)
	}
	baseline := min(b.opts.Idle, 10*time.Second)
	var rawCPU, rawCmds *float64
	if !b.failed("flush", b.flush()) {
		rawCPU, rawCmds = b.redisLoad("no clients", baseline)
	}
	label := fmt.Sprintf("%d idle topics, one subscriber each, over %s", topics, b.opts.Idle)
	b.rep.row("8", label+": Redis CPU", "% of a core", "< 0.5%", cpu[sysRedisdelay],
		peer(sysRedisstream, cpu[sysRedisstream]), peer(sysRaw+" without clients", rawCPU))
	b.rep.row("8", label+": Redis commands (incl. those scripts run)", "calls/s", "", cmds[sysRedisdelay],
		peer(sysRedisstream, cmds[sysRedisstream]), peer(sysRaw+" without clients", rawCmds))
}

// idleLoad subscribes one subscriber to each of n empty topics and measures
// the load on Redis once they have settled.
func (b *bench) idleLoad(sys watermillSystem, n int) (cpu, cmds *float64) {
	if b.failed("flush", b.flush()) {
		return nil, nil
	}
	var opened []*pubSub
	defer func() { closeAll(opened) }()
	for i := range n {
		ps, err := sys.open(b, 1)
		if b.failed("open "+sys.name, err) {
			return nil, nil
		}
		opened = append(opened, ps)
		ch, err := ps.subs[0].Subscribe(b.ctx, fmt.Sprintf("idle-%d", i))
		if b.failed("subscribe "+sys.name, err) {
			return nil, nil
		}
		go func() {
			for msg := range ch {
				msg.Ack()
			}
		}()
	}
	time.Sleep(idleWarmup)
	return b.redisLoad(fmt.Sprintf("%d idle topics · %s", n, sys.name), b.opts.Idle)
}

// closeAll closes Pub/Subs concurrently: some take a while to end a
// blocking read.
func closeAll(pss []*pubSub) {
	var wg sync.WaitGroup
	for _, ps := range pss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps.close()
		}()
	}
	wg.Wait()
}

// redisLoad returns the server's CPU use (percent of one core) and command
// rate over d, not counting the bench's own INFO and CONFIG calls.
func (b *bench) redisLoad(name string, d time.Duration) (cpu, cmds *float64) {
	if b.failed("CONFIG RESETSTAT", b.admin.ConfigResetStat(b.ctx).Err()) {
		return nil, nil
	}
	before, err := cpuSeconds(b.ctx, b.admin)
	if b.failed("INFO cpu", err) {
		return nil, nil
	}
	time.Sleep(d)
	after, err := cpuSeconds(b.ctx, b.admin)
	if b.failed("INFO cpu", err) {
		return nil, nil
	}
	stats, err := commandStats(b.ctx, b.admin)
	if b.failed("INFO commandstats", err) {
		return nil, nil
	}
	run := IdleRun{Name: name, Seconds: d.Seconds(), RedisCPU: (after - before) / d.Seconds() * 100}
	calls := int64(0)
	for _, s := range stats {
		if s.Command != "info" && s.Command != "config|resetstat" {
			calls += s.Calls
			run.Commands = append(run.Commands, s)
		}
	}
	run.CallsPerSecond = float64(calls) / d.Seconds()
	b.rep.Idle = append(b.rep.Idle, run)
	progress("%-60s %9.2f%% of a core, %.0f calls/s", "idle · "+name, run.RedisCPU, run.CallsPerSecond)
	return &run.RedisCPU, &run.CallsPerSecond
}
