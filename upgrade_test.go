package redisdelay_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay"
)

// upgradeBase is the last commit whose far tier is format 1 only (issue
// 37's base): TestUpgrade_FarFormat1 builds a publisher from it.
const upgradeBase = "992aff8"

// upgradeWriter is a program built from upgradeBase's tree: it publishes
// far messages with that version's code and prints their UUIDs, one a
// line, then, with -cancel, tries to cancel a UUID with that version's code
// and prints the outcome. It sets the far tier's timing to the test
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
	var msgs []*message.Message
	for i := range *n {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("old-%d", i)))
		delay.Message(msg, delay.For(*due))
		msgs = append(msgs, msg)
	}
	if *key != "" {
		msg := message.NewMessage(watermill.NewUUID(), []byte("old-keyed"))
		msg.Metadata.Set(redisdelay.BusinessKey, *key)
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

// buildUpgradeWriter builds upgradeWriter from upgradeBase's tree (git
// archive: the repository's worktrees are not touched) and returns the
// binary's path.
func buildUpgradeWriter(t *testing.T) string {
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
	archive := exec.Command("git", "archive", "--format=tar", upgradeBase)
	var tarball, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &stderr
	if err := archive.Run(); err != nil {
		t.Skipf("commit %s is not in this repository (a shallow clone?): %v %s", upgradeBase, err, stderr.String())
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

// runUpgradeWriter runs the previous version's writer with args and returns
// its output lines.
func runUpgradeWriter(t *testing.T, bin string, args ...string) []string {
	t.Helper()
	width, lead, margin := redisdelay.FarTier()
	args = append(args, "-addr", redisAddr, "-width", width.String(), "-lead", lead.String(), "-margin", margin.String())
	cmd := exec.Command(bin, args...)
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
	bin := buildUpgradeWriter(t)
	env := setup(t)
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
	got := map[string]int{}
	for range 5 {
		msg := receive(t, ch, 10*time.Second)
		got[string(msg.Payload)]++
		msg.Ack()
	}
	assert.Equal(t, map[string]int{"old-0": 1, "old-2": 1, "old-3": 1, "new-0": 1, "new-keyed": 1}, got, "each once, the cancelled ones never")
	nothing(t, ch, 500*time.Millisecond)
	assert.Zero(t, env.client.Exists(ctx, sh.Far(), sh.FarZ()).Val(), "both tiers unpacked")
	assert.Empty(t, businessKeyState(t, env.topic, 0), "the keys are free")
}
