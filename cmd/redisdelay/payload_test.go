package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// show finds a message wherever it still is and prints its payload.
func TestShow_WaitingAndDead(t *testing.T) {
	s := setupSample(t)

	out := s.ok(t, "show", topic, s.delayed[0])
	assert.Contains(t, out, "uuid:     "+s.delayed[0]+"\n")
	assert.Contains(t, out, "state:    waiting, due ")
	assert.Contains(t, out, "  order_id=1001\n")
	assert.Contains(t, out, "payload:  14 bytes, text\n  {\"order\":1001}\n")

	out = s.ok(t, "show", topic, s.failed[0])
	assert.Contains(t, out, `state:    dead letter `)
	assert.Contains(t, out, `of group "billing" since `)
	assert.Contains(t, out, "reason:   card declined\n")
	assert.Contains(t, out, "payload:  ")

	js := decode[showJSON](t, s.ok(t, "show", topic, s.delayed[1], "--json"))
	require.Len(t, js.Waiting, 1)
	assert.Empty(t, js.Dead)
	require.NotNil(t, js.Waiting[0].Payload)
	assert.Equal(t, `{"order":1002}`, *js.Waiting[0].Payload)
	js = decode[showJSON](t, s.ok(t, "--json", "show", topic, s.failed[1]))
	require.Len(t, js.Dead, 1)
	assert.Equal(t, group, js.Dead[0].Group)
	assert.Equal(t, "card declined", js.Dead[0].Reason)

	r := s.cli(t, "show", topic, "no-such-uuid")
	assert.Equal(t, 3, r.code, "not found has its own exit status")
	assert.Contains(t, r.stderr, `redisdelay: no message with UUID "no-such-uuid" is in topic "orders.close-unpaid" in any state`)
	r = s.cli(t, "show", "no-such-topic", "x")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `topic "no-such-topic" is not known`)
}

// Payloads are printed safely: control characters escaped in text, binary
// as a hex dump (base64 in JSON), at most --max-payload bytes.
func TestShow_PayloadIsPrintedSafely(t *testing.T) {
	s := setupSample(t)
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: s.client, KeyPrefix: s.prefix}, nil)
	require.NoError(t, err)
	defer pub.Close()
	publish := func(payload []byte) string {
		msg := message.NewMessage(watermill.NewUUID(), payload)
		delay.Message(msg, delay.For(time.Hour+time.Minute))
		require.NoError(t, pub.Publish(topic, msg))
		return msg.UUID
	}
	evil := publish([]byte("line 1\n\x1b]0;owned\x07 \u202eevil\nline 3"))
	binary := publish([]byte{0x00, 0x01, 0xff, 0xfe, 'A', 0x1b, '[', '2', 'J'})
	long := publish([]byte(strings.Repeat("é", 3000))) // 6000 bytes
	empty := publish(nil)

	out := s.ok(t, "show", topic, evil)
	assert.Contains(t, out, "payload:  32 bytes, text\n  line 1\n  \\x1b]0;owned\\a \\u202eevil\n  line 3\n")
	out = s.ok(t, "show", topic, binary)
	assert.Contains(t, out, "payload:  9 bytes, binary (not UTF-8 text): hex dump\n")
	assert.Contains(t, out, "  00000000  00 01 ff fe 41 1b 5b 32  4a                       |....A.[2J|\n")
	for _, uuid := range []string{evil, binary} {
		out := s.ok(t, "show", topic, uuid)
		assert.NotContains(t, out, "\x1b")
		assert.NotContains(t, out, "\x07")
		assert.NotContains(t, out, "\u202e")
	}

	out = s.ok(t, "show", topic, long)
	assert.Contains(t, out, "payload:  6000 bytes, text\n  "+strings.Repeat("é", 2048)+"\n  (first 4096 of 6000 bytes shown; --max-payload 0 shows all)\n")
	out = s.ok(t, "show", topic, long, "--max-payload", "5")
	assert.Contains(t, out, "\n  éé\n  (first 4 of 6000 bytes shown;", "a character is not split")
	out = s.ok(t, "show", topic, long, "--max-payload", "0")
	assert.Contains(t, out, strings.Repeat("é", 3000)+"\n")
	assert.NotContains(t, out, "shown;")
	assert.Contains(t, s.ok(t, "show", topic, empty), "payload:  empty\n")

	js := decode[showJSON](t, s.ok(t, "--json", "show", topic, binary))
	require.Len(t, js.Waiting, 1)
	assert.Nil(t, js.Waiting[0].Payload)
	assert.Equal(t, base64.StdEncoding.EncodeToString([]byte{0x00, 0x01, 0xff, 0xfe, 'A', 0x1b, '[', '2', 'J'}), js.Waiting[0].PayloadBase64)
	js = decode[showJSON](t, s.ok(t, "--json", "show", topic, long, "--max-payload", "10"))
	assert.Equal(t, strings.Repeat("é", 5), *js.Waiting[0].Payload)
	assert.True(t, js.Waiting[0].PayloadTruncated)

	// The listings: --payload shows every message in full; without it,
	// JSON has no payload.
	out = s.ok(t, "waiting", topic, "--payload", "--max-payload", "20")
	assert.Contains(t, out, "  {\"order\":1001}\n")
	assert.Contains(t, out, "  line 1\n")
	assert.NotContains(t, out, "\x1b")
	for _, w := range decode[[]waitingJSON](t, s.ok(t, "--json", "waiting", topic)) {
		assert.Nil(t, w.Payload)
		assert.Empty(t, w.PayloadBase64)
	}
	withPayload := decode[[]waitingJSON](t, s.ok(t, "--json", "waiting", topic, "--payload"))
	require.NotEmpty(t, withPayload)
	assert.Equal(t, `{"order":1001}`, *withPayload[0].Payload)

	out = s.ok(t, "dead", topic, group, "--payload")
	assert.Equal(t, 2, strings.Count(out, "reason:   card declined\n"), out)
	dead := decode[[]deadJSON](t, s.ok(t, "--json", "dead", topic, group, "--payload"))
	require.Len(t, dead, 2)
	assert.NotNil(t, dead[0].Payload)
}

// show finds a message in the group states too, by UUID or --key, and
// says what happens next.
func TestShow_EveryState(t *testing.T) {
	s := setupSample(t)
	ctx := context.Background()
	pub := s.publisher(t)
	var uuids []string
	for n := range 2 {
		msg := message.NewMessage(watermill.NewUUID(), []byte("new"))
		msg.Metadata.Set(redisdelay.BusinessKey, fmt.Sprintf("order-%d", n))
		require.NoError(t, pub.Publish(topic, msg))
		uuids = append(uuids, msg.UUID)
	}
	// A consumer that read the first and died: pending; the second ready.
	stream := store.Keys{Prefix: s.prefix}.Shard(topic, 0).Stream()
	_, err := s.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "worker-9", Streams: []string{stream, ">"}, Count: 1, Block: -1}).Result()
	require.NoError(t, err)

	out := s.ok(t, "show", topic, uuids[0])
	assert.Contains(t, out, `state:    pending in group "billing" with consumer worker-9, unreported, entry 0:m:`)
	assert.Contains(t, out, `next:     Consumer "worker-9" holds it (attempt 1).`)
	assert.Contains(t, out, "uuid:     "+uuids[0]+"\n")
	out = s.ok(t, "show", topic, "--key", "order-1")
	assert.Contains(t, out, `state:    ready for group "billing", entry 0:m:`)
	assert.Contains(t, out, `next:     The next consumer of group "billing" to read gets it, as attempt 1.`)

	js := decode[showJSON](t, s.ok(t, "--json", "show", topic, uuids[0]))
	require.Len(t, js.Locations, 1)
	l := js.Locations[0]
	assert.Equal(t, "pending", l.State)
	assert.Equal(t, "worker-9", l.Consumer)
	require.NotNil(t, l.LeaseExpires)
	assert.Equal(t, uuids[0], l.UUID)
	assert.Empty(t, js.Unsearched)
	assert.Positive(t, js.Read)

	// The delayed and dead ones have a next line too.
	assert.Contains(t, s.ok(t, "show", topic, s.delayed[0]), "next:     A scheduler copies it to each consumer group's ready queue at ")
	assert.Contains(t, s.ok(t, "show", topic, s.failed[0]), `next:     Nothing: it stays a dead letter of group "billing" until requeued`)

	r := s.cli(t, "show", topic, "--key", "order-9")
	assert.Equal(t, 3, r.code)
	assert.Contains(t, r.stderr, `no message with business key "order-9" is in topic`)
	r = s.cli(t, "show", topic, uuids[0], "--key", "order-1")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "give a UUID or --key, not both")
	r = s.cli(t, "show", topic)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "give the message's UUID, or --key K")
}
