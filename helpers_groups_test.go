package redisdelay_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Helpers of the groups tests (groups_test.go and groups_*_test.go):
// what the handlers saw, grouped messages, and waits for the groups'
// queues.

// handled is what the handlers of a test saw: per group, the payloads in
// the order they were handled, and the most messages of a group handled at
// once.
type handled struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	order   map[string][]int
	total   int
}

func newHandled() *handled {
	return &handled{running: map[string]int{}, most: map[string]int{}, order: map[string][]int{}}
}

// start records that a handler began with msg and returns its group.
func (h *handled) start(t *testing.T, msg *message.Message) string {
	g, seq := splitPayload(t, msg)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running[g]++
	h.most[g] = max(h.most[g], h.running[g])
	h.order[g] = append(h.order[g], seq)
	return g
}

// end records that the handler of a message of group g is done.
func (h *handled) end(g string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running[g]--
	h.total++
}

func (h *handled) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// seqs is 0, 1, ..., n-1.
func seqs(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// groupedMessage is a message of group g whose payload is "g/seq".
func groupedMessage(g string, seq int) *message.Message {
	msg := newMessage(g + "/" + strconv.Itoa(seq))
	redisdelay.SetGroup(msg, g)
	return msg
}

// splitPayload is the group and sequence number of a groupedMessage.
func splitPayload(t *testing.T, msg *message.Message) (string, int) {
	t.Helper()
	g, seq, ok := strings.Cut(string(msg.Payload), "/")
	require.True(t, ok, "payload %q", msg.Payload)
	n, err := strconv.Atoi(seq)
	require.NoError(t, err)
	return g, n
}

// awaitQueuedInGroups waits until the scheduler has queued n grouped
// messages of the topic in the consumer group's group queues and nothing
// waits.
func awaitQueuedInGroups(t *testing.T, insp *redisdelay.Inspector, tp, group string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		st := topicStats(t, insp, tp)
		return st.Waiting == 0 && groupStats(t, insp, tp, group).Grouped == n
	}, 10*time.Second, 10*time.Millisecond, "want %d messages queued in groups", n)
}

// awaitGroupsSettled waits until the consumer group holds no group state
// in any partition: every slot taken was given back (the invariant of the
// per-group counts, see fair.lua).
func awaitGroupsSettled(t *testing.T, client redis.UniversalClient, tp, group string, parts int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for p := range parts {
			sh := shardOf(tp, p)
			n, err := client.Exists(context.Background(), sh.Fair(group)).Result()
			if err != nil || n != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "group state left behind: %v", groupState(t, client, tp, group, parts))
}

// fanIn delivers what each channel delivers on one channel: the
// subscriptions of one consumer group in several processes, seen as one.
// It stops forwarding when the test ends.
func fanIn(t *testing.T, chs ...<-chan *message.Message) <-chan *message.Message {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the subscribers close: registered after them
	out := make(chan *message.Message)
	for _, c := range chs {
		go func() {
			for msg := range c {
				select {
				case out <- msg:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return out
}

// groupedDelayed is groupedMessage delayed by d.
func groupedDelayed(g string, seq int, d time.Duration) *message.Message {
	msg := groupedMessage(g, seq)
	delay.Message(msg, delay.For(d))
	return msg
}

// groupOf is the grpof field of a waiting message (its group), "" when
// the partition names none for it.
func groupOf(t *testing.T, client redis.UniversalClient, tp string, part int, uuid string) string {
	t.Helper()
	g, err := client.HGet(context.Background(), shardOf(tp, part).GroupOf(), uuid).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return g
}

// redoGroups is the group (field k) of each entry of the consumer group's
// redelivery stream in partition part, by the message UUID of the entry.
func redoGroups(t *testing.T, client redis.UniversalClient, tp, group string, part int) map[string]string {
	t.Helper()
	entries, err := client.XRange(context.Background(), shardOf(tp, part).Redelivery(group), "-", "+").Result()
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		body, _ := e.Values["m"].(string)
		m, err := redisdelay.DecodeMessage([]byte(body))
		require.NoError(t, err)
		k, _ := e.Values["k"].(string)
		out[m.UUID] = k
	}
	return out
}

// fairFields reads the consumer group's fair queues in each partition: the
// groups with a state there, and how many messages each has queued.
func fairFields(t *testing.T, client redis.UniversalClient, tp, group string, parts int) (states map[string][]int, queued map[string]map[int]int) {
	t.Helper()
	states, queued = map[string][]int{}, map[string]map[int]int{}
	for p := range parts {
		m, err := client.HGetAll(context.Background(), shardOf(tp, p).Fair(group)).Result()
		require.NoError(t, err)
		for k := range m {
			g, _, isMsg := strings.Cut(k, "\x00")
			switch {
			case g == "": // the queued count
			case isMsg:
				if queued[g] == nil {
					queued[g] = map[int]int{}
				}
				queued[g][p]++
			default:
				states[g] = append(states[g], p)
			}
		}
	}
	return states, queued
}

// receiveGroups receives n messages, acking each, and checks that each
// group's come in due order from next on; it returns the groups' next
// sequence numbers.
func receiveGroups(t *testing.T, ch <-chan *message.Message, n int, next map[string]int) map[string]int {
	t.Helper()
	for range n {
		msg := receive(t, ch, 5*time.Second)
		g, seq := splitPayload(t, msg)
		require.Equal(t, next[g], seq, "group %s out of order", g)
		next[g]++
		msg.Ack()
	}
	return next
}

// receiveSet receives n messages (not acked) and returns them by payload.
func receiveSet(t *testing.T, ch <-chan *message.Message, n int) map[string]*message.Message {
	t.Helper()
	got := map[string]*message.Message{}
	for range n {
		msg := receive(t, ch, 5*time.Second)
		require.NotContains(t, got, string(msg.Payload), "delivered twice")
		got[string(msg.Payload)] = msg
	}
	return got
}

// forgetGroups makes the consumer group look like one of an older
// version's subscribers (no gv in its meta hash, see init.lua) in every
// partition: schedulers hand it grouped messages through its redelivery
// stream, as plain messages.
func forgetGroups(t *testing.T, client redis.UniversalClient, tp, group string, parts int) {
	t.Helper()
	for p := range parts {
		meta := shardOf(tp, p).Meta(group)
		require.NoError(t, client.HDel(context.Background(), meta, "gv").Err())
		require.False(t, client.HExists(context.Background(), meta, "gv").Val())
		require.True(t, client.HExists(context.Background(), meta, "max").Val(), "partition %d: the group has no meta hash", p)
	}
}

// publishDueReversed publishes each groups' messages in one call, each
// group's due in the reverse of publish order (the last published due at
// once), so that due order is not publish order; payload sequence numbers
// are the due order.
func publishDueReversed(t *testing.T, pub message.Publisher, tp string, groups []string, each int) {
	t.Helper()
	var msgs []*message.Message
	for i := range each {
		for _, g := range groups {
			seq := each - 1 - i
			msgs = append(msgs, groupedDelayed(g, seq, time.Duration(seq)*50*time.Millisecond))
		}
	}
	require.NoError(t, pub.Publish(tp, msgs...))
}

// routerHandlers adds Router handlers over subscribers of one consumer
// group: each of subs gets a handler of its own (name-0, name-1, ...), so
// they run concurrently, as in several processes.
func routerHandlers(router *message.Router, name, tp string, subs []*redisdelay.Subscriber, h message.NoPublishHandlerFunc) {
	for k, sub := range subs {
		router.AddNoPublisherHandler(fmt.Sprint(name, "-", k), tp, sub, h)
	}
}
