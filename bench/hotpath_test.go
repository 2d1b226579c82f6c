package main

// Micro-benchmarks of the adapter's hot paths through its public API, for
// catching regressions: go test -bench . -benchtime 20000x
// They run against a redis-server started on a free loopback port, or the
// one at REDISDELAY_TEST_ADDR (loopback only; it is flushed).

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

var testAddr string

func TestMain(m *testing.M) {
	var (
		server *redisServer
		err    error
	)
	// Held while the benchmarks run: the library's tests flush the same
	// server (see redistest.External).
	addr, release, err := redistest.External()
	if err == nil && addr != "" {
		server, err = externalRedis(addr)
	} else if err == nil {
		server, err = startRedis()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench tests:", err)
		os.Exit(1)
	}
	testAddr = server.addr
	code := m.Run()
	server.stop()
	release()
	os.Exit(code)
}

// freshClient flushes the server and returns a client closed with the
// benchmark.
func freshClient(b *testing.B) *redis.Client {
	c := newClient(testAddr, poolSize)
	b.Cleanup(func() { _ = c.Close() })
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return c
}

func newPublisher(b *testing.B, c *redis.Client) *redisdelay.Publisher {
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: c}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return pub
}

func benchMessage(delayFor time.Duration) *message.Message {
	msg := message.NewMessage(watermill.NewULID(), make([]byte, 16))
	if delayFor > 0 {
		delay.Message(msg, delay.For(delayFor))
	}
	return msg
}

// BenchmarkPublish publishes 16 B messages from 64 goroutines; ns/op is per
// message.
func BenchmarkPublish(b *testing.B) {
	for _, c := range []struct {
		name  string
		batch int
		delay time.Duration
	}{
		{"immediate", 1, 0},
		{"delayed", 1, time.Hour},
		{"delayed-near", 1, nearDelay},
		{"immediate-batch100", batchSize, 0},
		{"delayed-batch100", batchSize, time.Hour},
		{"delayed-near-batch100", batchSize, nearDelay},
	} {
		b.Run(c.name, func(b *testing.B) {
			pub := newPublisher(b, freshClient(b))
			b.ReportAllocs()
			b.SetParallelism(max(1, publishers/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				msgs := make([]*message.Message, 0, c.batch)
				for more := pb.Next(); more; {
					msgs = append(msgs, benchMessage(c.delay))
					more = pb.Next()
					if len(msgs) == c.batch || !more {
						if err := pub.Publish("hot", msgs...); err != nil {
							b.Error(err)
							return
						}
						msgs = msgs[:0]
					}
				}
			})
		})
	}
}

// BenchmarkSubscribeAck receives and acks b.N ready messages from one
// subscription, without a Router; ns/op is per message.
func BenchmarkSubscribeAck(b *testing.B) { benchSubscribeAck(b, nil) }

// benchSubscribeAck receives and acks b.N messages, with metrics when m is
// not nil.
func benchSubscribeAck(b *testing.B, m redisdelay.Metrics) {
	c := freshClient(b)
	pub := newPublisher(b, c)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: c, ConsumerGroup: consumerGroup, Metrics: m}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize("hot"); err != nil {
		b.Fatal(err)
	}
	if _, err := publishWatermill(pub, []string{"hot"}, b.N, batchSize, make([]byte, 16), 0); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	ch, err := sub.Subscribe(ctx, "hot")
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		(<-ch).Ack()
	}
}

// BenchmarkSubscribeAckUser receives and acks b.N ready messages of the
// shape users publish (UUIDv4, Watermill's delay metadata, due already,
// 100 B) from one subscription, without a Router; ns/op is per message.
func BenchmarkSubscribeAckUser(b *testing.B) {
	c := freshClient(b)
	pub := newPublisher(b, c)
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: c, ConsumerGroup: consumerGroup}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize("hot"); err != nil {
		b.Fatal(err)
	}
	due := time.Now().Add(-time.Minute)
	if _, err := publishUser(pub, "hot", b.N, make([]byte, userPayload), nil, func() delay.Delay { return delay.Until(due) }, nil); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	ch, err := sub.Subscribe(ctx, "hot")
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		(<-ch).Ack()
	}
	b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkPromote moves b.N due messages to the ready stream with a
// Manager; ns/op is per message.
func BenchmarkPromote(b *testing.B) {
	c := freshClient(b)
	pub := newPublisher(b, c)
	if _, err := publishWatermill(pub, []string{"hot"}, b.N, batchSize, make([]byte, 16), time.Millisecond); err != nil {
		b.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	b.ResetTimer()
	if _, err := promote(context.Background(), watermill.NopLogger{}, c, "hot", 0); err != nil {
		b.Fatal(err)
	}
}

// routerProfile, when set, writes a CPU profile of BenchmarkRouterSubscribe's
// consuming phase only (publishing excluded), suffixed with the sub-benchmark,
// and allocation profiles before and after it (compare them with pprof -base).
var routerProfile = flag.String("router-cpuprofile", "", "write a CPU profile of each BenchmarkRouterSubscribe run's consuming phase to this file, suffixed with its name")

// BenchmarkRouterSubscribe consumes b.N ready messages (16 and 256 B) through
// a Router with an ack-only handler, as scenario 2 does, with 1 and 4
// subscribers in one group; ns/op is per message, cpu-ns/op the process's CPU
// time per message.
func BenchmarkRouterSubscribe(b *testing.B) {
	for _, size := range []int{16, 256} {
		for _, subs := range []int{1, 4} {
			b.Run(fmt.Sprintf("%dB-%dsubs", size, subs), func(b *testing.B) {
				c := freshClient(b)
				pub := newPublisher(b, c)
				var subscribers []message.Subscriber
				for range subs {
					sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{Client: c, ConsumerGroup: consumerGroup}, nil)
					if err != nil {
						b.Fatal(err)
					}
					defer sub.Close()
					if err := sub.SubscribeInitialize("hot"); err != nil {
						b.Fatal(err)
					}
					subscribers = append(subscribers, sub)
				}
				if _, err := publishWatermill(pub, []string{"hot"}, b.N, batchSize, randomPayload(size), 0); err != nil {
					b.Fatal(err)
				}
				if *routerProfile != "" {
					f, err := os.Create(*routerProfile + "." + strings.ReplaceAll(b.Name(), "/", "_"))
					if err != nil {
						b.Fatal(err)
					}
					defer f.Close()
					if err := pprof.StartCPUProfile(f); err != nil {
						b.Fatal(err)
					}
					defer pprof.StopCPUProfile()
					// Allocations of the consuming phase: pprof -base <name>.allocs0 <name>.allocs1
					writeHeap := func(suffix string) {
						runtime.GC()
						if f, err := os.Create(f.Name() + suffix); err == nil {
							_ = pprof.Lookup("allocs").WriteTo(f, 0)
							_ = f.Close()
						}
					}
					writeHeap(".allocs0")
					defer writeHeap(".allocs1")
				}
				bn := &bench{ctx: context.Background(), logger: watermill.NopLogger{}}
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				if _, err := consume(bn, subscribers, []string{"hot"}, b.N, nil); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// nullSubscriber hands out fresh messages one at a time, each after the
// previous one was acked, as a subscription does, with nothing behind it:
// the floor of any Subscriber through a Router on this machine.
type nullSubscriber struct{ payload []byte }

func (s nullSubscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		uuid := watermill.NewUUID()
		for {
			msg := message.NewMessage(uuid, append([]byte(nil), s.payload...))
			select {
			case out <- msg:
			case <-ctx.Done():
				return
			}
			select {
			case <-msg.Acked():
			case <-msg.Nacked():
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (nullSubscriber) Close() error { return nil }

// BenchmarkRouterFloor is BenchmarkRouterSubscribe with nullSubscribers:
// what the Router and one-at-a-time delivery cost alone.
func BenchmarkRouterFloor(b *testing.B) {
	for _, size := range []int{16, 256} {
		for _, subs := range []int{1, 4} {
			b.Run(fmt.Sprintf("%dB-%dsubs", size, subs), func(b *testing.B) {
				subscribers := make([]message.Subscriber, subs)
				for i := range subscribers {
					subscribers[i] = nullSubscriber{payload: randomPayload(size)}
				}
				bn := &bench{ctx: context.Background(), logger: watermill.NopLogger{}}
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				if _, err := consume(bn, subscribers, []string{"hot"}, b.N, nil); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
