package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer the test reads while the command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUI serves the dashboard past --timeout, read-only, and stops on
// interrupt with status 0.
func TestUI(t *testing.T) {
	s := setupSample(t)
	ctx, stop := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--addr", redisAddr, "--prefix", s.prefix, "--timeout", "200ms", "ui", "--addr-listen", "127.0.0.1:0", "--read-only"}, &out, &errOut)
	}()
	var url string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/)`).FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 5*time.Second, 10*time.Millisecond, "stdout: %s stderr: %s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "(read-only)")
	time.Sleep(300 * time.Millisecond) // past --timeout: still serving

	resp, err := http.Get(url + "topic?t=" + topic)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Contains(t, string(body), s.delayed[0])
	assert.Contains(t, string(body), `id="read-only"`)

	stop()
	select {
	case c := <-code:
		assert.Equal(t, exitOK, c, "stderr: %s", errOut.String())
	case <-time.After(5 * time.Second):
		t.Fatal("ui did not stop within 5 s of the interrupt")
	}
}

func TestUIListenError(t *testing.T) {
	s := setupSample(t)
	r := s.cli(t, "ui", "--addr-listen", "127.0.0.1:99999")
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "cannot listen on --addr-listen 127.0.0.1:99999")
	r = s.cli(t, "ui", "extra")
	assert.Equal(t, exitUsage, r.code)
}
