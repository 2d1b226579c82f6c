// Command numsub reproduces a wrong PUBSUB NUMSUB answer of Valkey 9.1.2:
// while hundreds of a channel's listeners come and go, the count of
// listeners it gives for a few milliseconds is a number such as
// 140,038,882,000,973, different for two channels that have the same
// listeners. The library's scan for readers of release 0.1.0 compares such
// counts (internal/store.ScanLegacy), so it counts a suspect channel twice.
//
//	go run ./numsub -redis 127.0.0.1:6379
//
// Rounds of 400 clients each subscribe in one command to "bell~s2", "bell"
// and 100 channels of their own, then close, while one more client counts
// the listeners of "bell" and "bell~s2" as fast as it can. Every count
// should be equal; it prints those that are not. The server must be a
// throwaway one on loopback (maxclients 5000 or more).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("redis", "", "address of a throwaway redis-server or valkey-server on loopback")
	rounds := flag.Int("rounds", 5, "rounds of 400 clients")
	flag.Parse()
	if !strings.HasPrefix(*addr, "127.0.0.1:") && !strings.HasPrefix(*addr, "[::1]:") {
		log.Fatal("numsub: -redis must be a loopback address (127.0.0.1:port or [::1]:port)")
	}
	ctx := context.Background()
	counter := redis.NewClient(&redis.Options{Addr: *addr})
	defer counter.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	counts, wrong := 0, 0
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := counter.PubSubNumSub(ctx, "bell", "bell~s2").Result()
			if err != nil {
				continue
			}
			counts++
			if n["bell"] != n["bell~s2"] {
				wrong++
				if wrong <= 10 {
					fmt.Println(time.Now().Format("15:04:05.000"), n)
				}
			}
		}
	}()
	for range *rounds {
		var wg sync.WaitGroup
		subs := make([]*redis.PubSub, 400)
		for i := range subs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				channels := []string{"bell~s2", "bell"}
				for k := range 100 {
					channels = append(channels, fmt.Sprintf("x%d-%d", i, k))
				}
				subs[i] = redis.NewClient(&redis.Options{Addr: *addr}).Subscribe(ctx, channels...)
				_, _ = subs[i].Receive(ctx)
			}()
		}
		wg.Wait()
		time.Sleep(200 * time.Millisecond)
		for _, s := range subs {
			_ = s.Close()
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	<-done
	fmt.Printf("%d counts, %d wrong\n", counts, wrong)
}
