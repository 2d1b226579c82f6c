package main

import (
	"context"
	"regexp"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// storage: the level written and the processes live, a pin, the settle
// time, and the rewrite's refusal before a pin; usage errors explain
// themselves.
func TestStorage_ShowPinSettleRewrite(t *testing.T) {
	s := setupSample(t)
	assert.Contains(t, s.ok(t, "storage"), "no process of this release or newer is live")

	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: s.client, KeyPrefix: s.prefix}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), nil)))
	out := s.ok(t, "storage")
	assert.Contains(t, out, "storage level written: 3 (this release reads up to 3)")
	assert.Regexp(t, `\S+\s+`+regexp.QuoteMeta(redisdelay.Version)+`\s+3\s+publisher\s+\S+\s+0\s+\S+`, out)
	info := decode[redisdelay.StorageInfo](t, s.ok(t, "--json", "storage"))
	assert.Equal(t, 3, info.Level)
	require.Len(t, info.Processes, 1)
	assert.Equal(t, redisdelay.Version, info.Processes[0].Version)
	assert.Contains(t, s.ok(t, "server"), "storage level:     3 written; processes live: 1 of "+redisdelay.Version)

	r := s.cli(t, "storage", "rewrite", "1")
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "storage level 3 is written: pin level 1 first")

	assert.Contains(t, s.ok(t, "storage", "pin", "1"), "pinned storage level 1")
	assert.Contains(t, s.ok(t, "storage"), "pinned at: 1 (agreed: 3)")
	st, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: s.client, KeyPrefix: s.prefix})
	require.NoError(t, err)
	got, err := st.Storage(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, got.Level)
	s.ok(t, "storage", "unpin")
	assert.Contains(t, s.ok(t, "storage", "settle", "1h"), "settle time set to 1h")
	assert.Contains(t, s.ok(t, "storage"), "settle time 1h0m0s")
	s.ok(t, "storage", "settle", "default")
	assert.Contains(t, s.ok(t, "storage"), "settle time 15m0s")

	for args, want := range map[[3]string]string{
		{"storage", "frob", ""}:     `unknown storage action "frob": use pin N, unpin, settle D or rewrite N`,
		{"storage", "pin", ""}:      "storage pin takes 1 argument(s)",
		{"storage", "pin", "4"}:     `storage pin "4": give a level from 1 to 3`,
		{"storage", "settle", "x"}:  `storage settle "x": give a Go duration such as 15m or 1h (or "default")`,
		{"storage", "rewrite", "0"}: `storage rewrite "0": give a level from 1 to 3`,
	} {
		a := args[:]
		if a[2] == "" {
			a = a[:2]
		}
		r := s.cli(t, a...)
		assert.Equal(t, exitUsage, r.code, "%v", a)
		assert.Contains(t, r.stderr, want)
	}
}

func TestStorage_VersionNamesTheRelease(t *testing.T) {
	r := runCLI(t, "--version")
	assert.Contains(t, r.stdout, "redisdelay "+redisdelay.Version+" (storage level 3)")
}
