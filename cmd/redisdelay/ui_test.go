package main

import (
	"bytes"
	"context"
	"io"
	"net"
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
	ui := startUI(t, s, "--timeout", "200ms", "ui", "--addr-listen", "127.0.0.1:0", "--read-only")
	url := ui.url
	assert.Contains(t, ui.out.String(), "(read-only)")
	time.Sleep(300 * time.Millisecond) // past --timeout: still serving

	resp, err := http.Get(url + "topic?t=" + topic)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Contains(t, string(body), s.delayed[0])
	assert.Contains(t, string(body), `id="read-only"`)

	ui.interrupt(t)
}

func TestUIListenError(t *testing.T) {
	s := setupSample(t)
	r := s.cli(t, "ui", "--addr-listen", "127.0.0.1:99999")
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "cannot listen on --addr-listen 127.0.0.1:99999")
	r = s.cli(t, "ui", "extra")
	assert.Equal(t, exitUsage, r.code)
}

// TestUIAllowedHost: the dashboard refuses a Host it does not know (DNS
// rebinding) and answers to the --allowed-host names.
func TestUIAllowedHost(t *testing.T) {
	s := setupSample(t)
	ui := startUI(t, s, "ui", "--addr-listen", "127.0.0.1:0",
		"--allowed-host", "ops.example", "--allowed-host", "intranet.example:8443, other.example")
	url := ui.url
	get := func(host string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for host, want := range map[string]int{
		"ops.example":             http.StatusOK,
		"ops.example:8080":        http.StatusOK,
		"intranet.example:8443":   http.StatusOK,
		"other.example":           http.StatusOK,
		"intranet.example":        http.StatusForbidden,
		"localhost":               http.StatusOK,
		"rebind.attacker.example": http.StatusForbidden,
	} {
		status, body := get(host)
		assert.Equal(t, want, status, "%s: %s", host, body)
	}
	_, body := get("rebind.attacker.example:8080")
	assert.Contains(t, body, `Host "rebind.attacker.example:8080"`)
	assert.Contains(t, body, "--allowed-host")
	ui.interrupt(t)
}

// TestListenHosts: the address listened on is allowed; all of the
// machine's for 0.0.0.0.
func TestListenHosts(t *testing.T) {
	assert.Equal(t, []string{"10.1.2.3"}, listenHosts(net.ParseIP("10.1.2.3")))
	assert.Equal(t, []string{"2001:db8::1"}, listenHosts(net.ParseIP("2001:db8::1")))
	all := listenHosts(net.IPv4zero)
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	require.Len(t, all, len(addrs))
	assert.Contains(t, all, "127.0.0.1")
}

// uiRun is the ui command running in the test.
type uiRun struct {
	url         string // where it serves
	out, errOut syncBuffer
	stop        context.CancelFunc
	code        chan int
}

// startUI runs the CLI with args (after --addr and --prefix) until it
// serves, and interrupts it when the test ends if the test did not.
func startUI(t *testing.T, s sample, args ...string) *uiRun {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	ui := &uiRun{stop: stop, code: make(chan int, 1)}
	go func() {
		ui.code <- run(ctx, append([]string{"--addr", redisAddr, "--prefix", s.prefix}, args...), &ui.out, &ui.errOut)
	}()
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/)`).FindStringSubmatch(ui.out.String())
		if m != nil {
			ui.url = m[1]
		}
		return m != nil
	}, 5*time.Second, 10*time.Millisecond, "stdout: %s stderr: %s", ui.out.String(), ui.errOut.String())
	return ui
}

// interrupt stops the command as an interrupt would: it exits with status
// 0 within 5 s.
func (ui *uiRun) interrupt(t *testing.T) {
	t.Helper()
	ui.stop()
	select {
	case c := <-ui.code:
		assert.Equal(t, exitOK, c, "stderr: %s", ui.errOut.String())
	case <-time.After(5 * time.Second):
		t.Fatal("ui did not stop within 5 s of the interrupt")
	}
}
