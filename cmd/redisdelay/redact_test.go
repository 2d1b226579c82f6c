package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCLI_SecretsRedacted: a URL given to --addr is refused with its
// password taken out; messages never carry the password; --password on the
// command line is warned about.
func TestCLI_SecretsRedacted(t *testing.T) {
	r := runCLI(t, "--addr", "redis://default:S3cret-Pass@127.0.0.1:1/0", "topics")
	assert.Equal(t, exitUsage, r.code)
	assert.NotContains(t, r.stderr, "S3cret-Pass")
	assert.Contains(t, r.stderr, "--addr takes host:port, not a URL (redis://default:xxxxx@127.0.0.1:1/0)")
	r = runCLI(t, "--cluster", "rediss://Only-A-Secret@10.0.0.1:7000", "topics")
	assert.NotContains(t, r.stderr, "Only-A-Secret")

	o := newOptions()
	o.addr = "redis://user:Pa55word@db:6379"
	assert.Equal(t, "Redis at redis://user:xxxxx@db:6379", o.target(), "the ui banner")
	o.password = "hunter2-long"
	assert.Equal(t, "WRONGPASS for xxxxx at redis://:xxxxx@h", o.redact("WRONGPASS for hunter2-long at redis://:x@h"))

	s := setupSample(t)
	r = s.cli(t, "--password", "not-the-password", "topics")
	assert.Contains(t, r.stderr, "warning: --password on the command line is visible to the other users of this machine")
	assert.Contains(t, r.stderr, "$REDISDELAY_PASSWORD")
	assert.NotContains(t, r.stderr, "not-the-password")
	r = s.cli(t, "topics")
	assert.NotContains(t, r.stderr, "--password")
}
