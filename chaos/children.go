package main

// The child roles: consumer and manager processes. Both connect to Redis
// through the driver's proxy only, stop gracefully on SIGTERM, and exit at
// once when their stdin closes (the driver died: no orphans are left).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// childContext is cancelled by SIGTERM or SIGINT; the process exits with
// code 4 when its stdin reaches EOF (the driver is gone).
func childContext() (context.Context, context.CancelFunc) {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(4)
	}()
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
}

func childLogger() watermill.LoggerAdapter {
	// Info and errors (connection errors during faults are expected) go to
	// stderr, which the driver keeps in a file and shows on failure.
	return watermill.NewStdLoggerWithOut(os.Stderr, false, false)
}

// runConsumer runs a Router with c.subs handlers (each its own consumer in
// the group) on one Subscriber, and writes an event log the driver reads:
//
//	D <uuid> <attempt> <unix ns>   a delivery, written when the handler starts
//	A <uuid> <unix ns>             an ack, written just before the handler returns nil
//	H <uuid>                       the handler hangs from now on
//
// Each line is one unbuffered write(2) on an O_APPEND file, so what the
// kernel took survives a SIGKILL of this process, and lines of concurrent
// handlers do not interleave (os.File serializes writes).
//
// Why the ack line comes BEFORE the Ack: the line records "the handler has
// finished its work and decided to ack", which is what at-least-once is
// about (the handler's side effect happened). If the process is killed
// between the line and Redis's XACK, the entry is still pending in Redis:
// the library must reclaim it and deliver it again, so the message is
// handled again and a second ack line appears, which the driver counts as a
// duplicate (or, if it then runs out of attempts, as acked-and-dead, also a
// duplicate). Never a loss. The reverse order would be wrong: a kill after
// XACK but before the line would leave a message acked in Redis with no
// record of it, and the driver would report a false loss. The only record
// this order can make of an ack that Redis never got is for a message that
// Redis still holds; the driver's final quiescence check (nothing waiting,
// ready, pending or in retry) catches such a message if the library then
// failed to deliver it again.
func runConsumer(c config) int {
	ctx, stop := childContext()
	defer stop()
	logger := childLogger()

	events, err := os.OpenFile(c.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos consumer:", err)
		return 3
	}
	write := func(line string) {
		if _, err := events.WriteString(line); err != nil {
			// Without its record the run cannot be judged: die loudly
			// (the driver reports an unexpected exit), without acking.
			fmt.Fprintln(os.Stderr, "chaos consumer: event log:", err)
			os.Exit(3)
		}
	}

	// go-redis's defaults, as a service creates its client.
	client := redis.NewClient(&redis.Options{Addr: c.addr})
	defer client.Close()
	sub, err := redisdelay.NewSubscriber(redisdelay.SubscriberConfig{
		Client:              client,
		KeyPrefix:           keyPrefix,
		ConsumerGroup:       group,
		Consumer:            c.name,
		BatchSize:           c.batch,
		Partitions:          c.partitions,
		Ordered:             c.ordered,
		DisableScheduler:    true,
		VisibilityTimeout:   c.visibility,
		RetryDelay:          c.retryDelayFunc(),
		MaxAttempts:         c.maxAttempts,
		MaxDeadLetters:      -1, // the driver reads every dead letter
		ConsumerIdleTimeout: 10 * time.Second,
		CloseTimeout:        time.Second,
		HandlerTimeout:      c.handlerTimeout,
		GroupConcurrency:    c.groupConc,
	}, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos consumer:", err)
		return 3
	}
	defer sub.Close()

	// The Router fails for good if Subscribe fails, which it does when Redis
	// cannot be reached while creating the group (the driver restarts
	// consumers during proxy cuts and Redis restarts): initialize first,
	// until it works. Subscribe then needs no Redis round trip.
	for {
		err := sub.SubscribeInitialize(topic)
		if err == nil {
			break
		}
		logger.Error("chaos consumer: cannot initialize yet; retrying", err, nil)
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(200 * time.Millisecond):
		}
	}

	hang := make(chan struct{}) // never closed
	handler := func(msg *message.Message) error {
		attempt := msg.Metadata.Get(redisdelay.AttemptKey)
		write("D " + msg.UUID + " " + attempt + " " + strconv.FormatInt(time.Now().UnixNano(), 10) + "\n")
		r := rand.Float64()
		if r < c.hang {
			write("H " + msg.UUID + "\n")
			<-hang // never acks; ignores its context, like a stuck call
		}
		if c.work > 0 {
			time.Sleep(rand.N(c.work + 1))
		}
		if r < c.hang+c.fail {
			return fmt.Errorf("chaos: handler failed on attempt %s", attempt)
		}
		write("A " + msg.UUID + " " + strconv.FormatInt(time.Now().UnixNano(), 10) + "\n")
		return nil
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 2 * time.Second}, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos consumer:", err)
		return 3
	}
	router.AddMiddleware(redisdelay.RecordError)
	for i := 0; i < c.subs; i++ {
		router.AddConsumerHandler("h"+strconv.Itoa(i), topic, sub, handler)
	}
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	select {
	case <-ctx.Done():
		_ = router.Close()
		<-done
		_ = sub.Close()
		return 0
	case err := <-done:
		// The Router stopped by itself: that is not supposed to happen.
		fmt.Fprintln(os.Stderr, "chaos consumer: router stopped:", err)
		return 5
	}
}

// runManager runs a redisdelay.Manager that discovers the topic by itself.
func runManager(c config) int {
	ctx, stop := childContext()
	defer stop()
	client := redis.NewClient(&redis.Options{Addr: c.addr})
	defer client.Close()
	mgr, err := redisdelay.NewManager(redisdelay.ManagerConfig{
		Client:        client,
		KeyPrefix:     keyPrefix,
		CheckInterval: time.Second,
		TrimInterval:  time.Second,
	}, childLogger())
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos manager:", err)
		return 3
	}
	if err := mgr.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "chaos manager:", err)
		return 5
	}
	return 0
}
