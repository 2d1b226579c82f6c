package redisdelay_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// Helpers of the groups tests (groups_test.go, groups_combo_test.go):
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
