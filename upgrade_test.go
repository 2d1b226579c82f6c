package redisdelay_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// upgradeBase is the last commit whose far tier is format 1 only (issue
// 37's base): TestUpgrade_FarFormat1 builds a publisher from it.
// filterBase is the last one without the far filter (format 2, no bits):
// TestUpgrade_FarFilter's. markBase is the last one marking a far
// holder of a business key with its UUID as text:
// TestUpgrade_FarKeyMarks's.
const (
	upgradeBase = "992aff8"
	filterBase  = "86accb0"
	markBase    = "ffd89c2"
)

// upgradeWriter is a program built from upgradeBase's tree: it publishes
// far messages with that version's code and prints their UUIDs, one a
// line, then, with -cancel (-cancelkey), tries to cancel a UUID (a business
// key) with that version's code and prints the outcome. It sets the far tier's timing to the test
// binary's (TestMain), so both versions number buckets alike.
const upgradeWriter = `package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

func main() {
	addr := flag.String("addr", "", "Redis")
	topic := flag.String("topic", "", "topic")
	n := flag.Int("n", 0, "far messages to publish")
	key := flag.String("key", "", "business key of one more message")
	due := flag.Duration("due", 0, "their delay")
	cancel := flag.String("cancel", "", "a UUID to cancel instead")
	cancelKey := flag.String("cancelkey", "", "a business key to cancel instead")
	policy := flag.String("policy", "", "the business key policy of the keyed message")
	width := flag.Duration("width", 0, "far width")
	lead := flag.Duration("lead", 0, "far lead")
	margin := flag.Duration("margin", 0, "far margin")
	flag.Parse()
	store.FarWidth, store.FarLead, store.FarMargin = *width, *lead, *margin
	client := redis.NewClient(&redis.Options{Addr: *addr})
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client}, watermill.NopLogger{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer pub.Close()
	if *cancel != "" {
		ok, err := pub.Cancel(context.Background(), *topic, *cancel)
		fmt.Printf("cancel %v %v\n", ok, err)
		return
	}
	if *cancelKey != "" {
		ok, err := pub.CancelKey(context.Background(), *topic, *cancelKey)
		fmt.Printf("cancel %v %v\n", ok, err)
		return
	}
	var msgs []*message.Message
	for i := range *n {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("old-%d", i)))
		delay.Message(msg, delay.For(*due))
		msgs = append(msgs, msg)
	}
	if *key != "" {
		msg := message.NewMessage(watermill.NewUUID(), []byte("old-keyed"))
		msg.Metadata.Set(redisdelay.BusinessKey, *key)
		if *policy != "" {
			msg.Metadata.Set(redisdelay.BusinessKeyPolicyKey, *policy)
		}
		delay.Message(msg, delay.For(*due))
		msgs = append(msgs, msg)
	}
	if err := pub.Publish(*topic, msgs...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, m := range msgs {
		fmt.Println(m.UUID)
	}
	_ = time.Second
}
`

// buildUpgradeWriter builds upgradeWriter from the tree of commit base
// (git archive: the repository's worktrees are not touched) and returns
// the binary's path.
func buildUpgradeWriter(t *testing.T, base string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the previous version: not with -short")
	}
	for _, tool := range []string{"git", "go", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	require.NoError(t, os.Mkdir(tree, 0o755))
	archive := exec.Command("git", "archive", "--format=tar", base)
	var tarball, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &stderr
	if err := archive.Run(); err != nil {
		t.Skipf("commit %s is not in this repository (a shallow clone?): %v %s", base, err, stderr.String())
	}
	untar := exec.Command("tar", "-x", "-C", tree)
	untar.Stdin = &tarball
	out, err := untar.CombinedOutput()
	require.NoError(t, err, "%s", out)
	main := filepath.Join(tree, "cmd", "upgradewriter")
	require.NoError(t, os.MkdirAll(main, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(main, "main.go"), []byte(upgradeWriter), 0o644))
	bin := filepath.Join(dir, "writer")
	build := exec.Command("go", "build", "-o", bin, "./cmd/upgradewriter")
	build.Dir = tree
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err = build.CombinedOutput()
	require.NoError(t, err, "build the previous version: %s", out)
	return bin
}

// payloads receives and acks n messages and counts their payloads.
func payloads(t *testing.T, ch <-chan *message.Message, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		msg := receive(t, ch, 10*time.Second)
		got[string(msg.Payload)]++
		msg.Ack()
	}
	return got
}

// upgradeWriterArgs is args with the Redis address and the far tier's
// timing added.
func upgradeWriterArgs(args ...string) []string {
	width, lead, margin := redisdelay.FarTier()
	return append(args, "-addr", redisAddr, "-width", width.String(), "-lead", lead.String(), "-margin", margin.String())
}

// runUpgradeWriter runs the previous version's writer with args and returns
// its output lines.
func runUpgradeWriter(t *testing.T, bin string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(bin, upgradeWriterArgs(args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s", stderr.String())
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// Upgrade: far messages written by the previous version (format 1: the
// lists :fb:<bucket>, the set :far) are read by this one beside its own
// (format 2): found, cancelled by UUID, and the others delivered on time,
// each once. A keyed message the previous version kept in the waiting set
// is cancelled by key. The previous version, beside this one, cannot see a
// format 2 message: its Cancel fails with an error naming the far index
// value (nothing is removed or delivered wrongly).
func TestUpgrade_FarFormat1(t *testing.T) {
	t.Parallel()
	bin := buildUpgradeWriter(t, upgradeBase)
	env := setup(t)
	format2(env.pub)
	ctx := context.Background()
	old := runUpgradeWriter(t, bin, "-topic", env.topic, "-n", "4", "-key", "order-old", "-due", "4s")
	require.Len(t, old, 5)
	sh := shardOf(env.topic, 0)
	require.Positive(t, env.client.ZCard(ctx, sh.Far()).Val(), "the previous version wrote format 1 buckets")
	require.Zero(t, env.client.Exists(ctx, sh.FarZ()).Val())

	mine := delayed(delay.For(4*time.Second), "new-0")
	keyed := delayed(delay.For(4*time.Second), "new-keyed")
	redisdelay.SetBusinessKey(keyed, "order-new")
	require.NoError(t, env.pub.Publish(env.topic, mine, keyed))
	require.Positive(t, env.client.ZCard(ctx, sh.FarZ()).Val(), "this version writes format 2 buckets")

	// the previous version cannot see this version's far message: an error, nothing changed
	out := runUpgradeWriter(t, bin, "-topic", env.topic, "-cancel", mine.UUID)
	require.Len(t, out, 1)
	assert.Contains(t, out[0], "cancel false")
	assert.Contains(t, out[0], "is not a location")

	// this version finds, cancels and reads format 1 messages
	found, ok, err := env.insp.FindWaiting(ctx, env.topic, old[0])
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "old-0", string(found.Message.Payload))
	ok, err = env.pub.Cancel(ctx, env.topic, old[1])
	require.NoError(t, err)
	require.True(t, ok, "a format 1 message is cancelled")
	ok, err = env.pub.CancelKey(ctx, env.topic, "order-old")
	require.NoError(t, err)
	require.True(t, ok, "the previous version's keyed message is cancelled by key")
	page, err := env.insp.Waiting(ctx, env.topic, 0, 100)
	require.NoError(t, err)
	assert.Len(t, page, 5, "both formats listed")

	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)
	assert.Equal(t, map[string]int{"old-0": 1, "old-2": 1, "old-3": 1, "new-0": 1, "new-keyed": 1}, payloads(t, ch, 5), "each once, the cancelled ones never")
	nothing(t, ch, 500*time.Millisecond)
	assert.Zero(t, env.client.Exists(ctx, sh.Far(), sh.FarZ()).Val(), "both tiers unpacked")
	assert.Empty(t, businessKeyState(t, env.topic, 0), "the keys are free")
}

// Upgrade: far messages published by a process of the previous version
// (format 2 without the far filter: it sets no bits) beside this one are
// still seen by this version's publishes: one that reuses such a UUID with
// another body is refused, before the scheduler's rebuild (the far count
// moved without this version's count: the filter is not trusted) and after
// it (the rebuild read them from the far index); each far message is
// delivered once.
func TestUpgrade_FarFilter(t *testing.T) {
	t.Parallel()
	bin := buildUpgradeWriter(t, filterBase)
	env := setup(t)
	ctx := context.Background()
	sh := shardOf(env.topic, 0)
	var mine []*message.Message
	for i := range 3 {
		mine = append(mine, delayed(delay.For(4*time.Second), "new-"+strconv.Itoa(i)))
	}
	require.NoError(t, env.pub.Publish(env.topic, mine...))
	old := runUpgradeWriter(t, bin, "-topic", env.topic, "-n", "3", "-due", "4s")
	require.Len(t, old, 3)
	meta := env.client.HGetAll(ctx, sh.FarMeta()).Val()
	require.Equal(t, "6", meta["n"])
	require.Equal(t, "3", meta["fm"], "the previous version moved n alone")

	reuse := func(id string) error {
		msg := message.NewMessage(id, []byte("reused"))
		delay.Message(msg, delay.For(time.Second))
		return env.pub.Publish(env.topic, msg)
	}
	require.ErrorIs(t, reuse(old[0]), redisdelay.ErrDuplicateMessage, "before the rebuild")
	require.NoError(t, store.RebuildFarFilter(ctx, env.client, sh, "test", store.LevelNewest))
	require.Equal(t, "5", env.client.HGet(ctx, sh.FarMeta(), "fm").Val(), "n and fm agree after the rebuild (old[0] was pulled)")
	require.ErrorIs(t, reuse(old[1]), redisdelay.ErrDuplicateMessage, "after the rebuild")

	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)
	assert.Equal(t, map[string]int{"old-0": 1, "old-1": 1, "old-2": 1, "new-0": 1, "new-1": 1, "new-2": 1}, payloads(t, ch, 6), "each once, as first published")
	nothing(t, ch, 500*time.Millisecond)
}

// Upgrade: far holders of business keys that the previous version marked
// in bkeys with their UUID as text ("\x00" and the 36 characters) are
// still found by key beside this version's marks ("\x00\x01" and the 16
// bytes): cancelled by key, named when a publish is refused by key, their
// keys restored when they are unpacked and freed when delivered. The
// previous version cannot find this version's far holder by key: its
// CancelKey and its Publish with replace fail, changing nothing.
func TestUpgrade_FarKeyMarks(t *testing.T) {
	t.Parallel()
	bin := buildUpgradeWriter(t, markBase)
	env := setup(t)
	format2(env.pub) // format 3 marks keys in its index (TestFar3_KeyMarks)
	ctx := context.Background()
	sh := shardOf(env.topic, 0)
	var old []string
	for _, key := range []string{"order-a", "order-b", "order-c"} {
		ids := runUpgradeWriter(t, bin, "-topic", env.topic, "-key", key, "-due", "4s")
		require.Len(t, ids, 1)
		old = append(old, ids[0])
	}
	require.Equal(t, "\x00"+old[0], env.client.HGet(ctx, sh.Bkeys(), "order-a").Val(), "the previous version's mark")
	keyed := delayed(delay.For(4*time.Second), "new-keyed")
	redisdelay.SetBusinessKey(keyed, "order-d")
	require.NoError(t, env.pub.Publish(env.topic, keyed))
	mark := env.client.HGet(ctx, sh.Bkeys(), "order-d").Val()
	require.Len(t, mark, 18, "this version's mark: \\0\\1 and the UUID's 16 bytes")
	id, far := store.FarHolderUUID(mark)
	require.True(t, far)
	require.Equal(t, keyed.UUID, id)

	// the previous version cannot find this version's far holder by key:
	// an error, nothing changed (the CHANGELOG's upgrade notes)
	out := runUpgradeWriter(t, bin, "-topic", env.topic, "-cancelkey", "order-d")
	require.Len(t, out, 1)
	assert.Contains(t, out[0], "cancel false")
	assert.Contains(t, out[0], "kept moving into the far tier")
	cmd := exec.Command(bin, upgradeWriterArgs("-topic", env.topic, "-key", "order-d", "-policy", "replace", "-due", "4s")...)
	output, err := cmd.CombinedOutput()
	require.Error(t, err, "the previous version's replace of this version's far holder fails")
	assert.Contains(t, string(output), "stay in the far tier")
	assert.Equal(t, keyed.UUID, businessKeyState(t, env.topic, 0)["order-d"], "nothing changed")

	ok, err := env.pub.CancelKey(ctx, env.topic, "order-a")
	require.NoError(t, err)
	require.True(t, ok, "the previous version's far holder is cancelled by key")
	for key, holder := range map[string]string{"order-b": old[1], "order-d": keyed.UUID} {
		rival := delayed(delay.For(4*time.Second), "rival")
		redisdelay.SetBusinessKey(rival, key)
		rival.Metadata.Set(redisdelay.BusinessKeyPolicyKey, "reject")
		err = env.pub.Publish(env.topic, rival)
		require.ErrorIs(t, err, redisdelay.ErrDuplicateBusinessKey)
		require.ErrorContains(t, err, holder, "the refusal names the far holder of %s", key)
	}

	require.Equal(t, map[string]string{"order-b": old[1], "order-c": old[2], "order-d": keyed.UUID}, businessKeyState(t, env.topic, 0))
	sub := newSubscriber(t, env.client, redisdelay.SubscriberConfig{ConsumerGroup: "g"})
	ch := subscribe(t, sub, env.topic)
	assert.Equal(t, map[string]int{"old-keyed": 2, "new-keyed": 1}, payloads(t, ch, 3), "each once, the cancelled one never")
	nothing(t, ch, 500*time.Millisecond)
	assert.Empty(t, businessKeyState(t, env.topic, 0), "the keys are free")
}
