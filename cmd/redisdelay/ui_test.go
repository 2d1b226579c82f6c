package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/testkit"
)

// TestUI_Serves serves the dashboard past --timeout, read-only, and stops on
// interrupt with status 0.
func TestUI_Serves(t *testing.T) {
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

func TestUI_ListenError(t *testing.T) {
	s := setupSample(t)
	r := s.cli(t, "ui", "--addr-listen", "127.0.0.1:99999")
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "cannot listen on --addr-listen 127.0.0.1:99999")
	r = s.cli(t, "ui", "extra")
	assert.Equal(t, exitUsage, r.code)
}

// TestUI_AllowedHost: the dashboard refuses a Host it does not know (DNS
// rebinding) and answers to the --allowed-host names.
func TestUI_AllowedHost(t *testing.T) {
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

// TestUI_ListenHosts: the address listened on is allowed; all of the
// machine's for 0.0.0.0.
func TestUI_ListenHosts(t *testing.T) {
	assert.Equal(t, []string{"10.1.2.3:8080"}, listenHosts(net.ParseIP("10.1.2.3"), 8080))
	assert.Equal(t, []string{"[2001:db8::1]:8080"}, listenHosts(net.ParseIP("2001:db8::1"), 8080))
	all := listenHosts(net.IPv4zero, 8080)
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	require.Len(t, all, len(addrs))
	assert.Contains(t, all, "127.0.0.1:8080")
}

// uiRun is the ui command running in the test.
type uiRun struct {
	url         string // where it serves
	out, errOut testkit.SyncBuffer
	stop        context.CancelFunc
	code        chan int
}

// startUI runs the CLI with args (after --addr and --prefix) until it
// serves, and interrupts it when the test ends if the test did not.
func startUI(t *testing.T, s sample, args ...string) *uiRun {
	t.Helper()
	return startUIAt(t, s, `on (http://127\.0\.0\.1:\d+/)`, args...)
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

// TestUI_RefusesOpenAddress: on an address other than loopback, the
// dashboard needs a login or --read-only, or an explicit --insecure.
func TestUI_RefusesOpenAddress(t *testing.T) {
	s := setupSample(t)
	r := s.cli(t, "ui", "--addr-listen", "0.0.0.0:0")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "ui: --addr-listen 0.0.0.0:0 is not a loopback address, and the dashboard would have no login")
	usageLines(t, r, nil)

	ui := startUIAt(t, s, `on (http://\[::\]:\d+/|http://0\.0\.0\.0:\d+/)`, "ui", "--addr-listen", "0.0.0.0:0", "--insecure")
	assert.Contains(t, ui.errOut.String(), "warning: --addr-listen 0.0.0.0:0 is not a loopback address and the dashboard has no login")
	ui.interrupt(t)
	ui = startUIAt(t, s, `on (http://\[::\]:\d+/|http://0\.0\.0\.0:\d+/)`, "ui", "--addr-listen", "0.0.0.0:0", "--read-only", "--insecure")
	assert.Contains(t, ui.errOut.String(), "can see the payloads (read-only)")
	ui.interrupt(t)
}

// TestUI_Authentication: users from a file, a token from the environment;
// no secret on the command line.
func TestUI_Authentication(t *testing.T) {
	s := setupSample(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	require.NoError(t, os.WriteFile(users, []byte("# operators\nalice:correct-horse-battery\n\nbob:staple-staple-staple\n"), 0o600))
	t.Setenv(tokenEnv, "token-of-the-monitoring-script")
	ui := startUIAt(t, s, `on (http://\[::\]:\d+/|http://0\.0\.0\.0:\d+/)`, "ui", "--addr-listen", "0.0.0.0:0", "--basic-auth-file", users)
	assert.Contains(t, ui.out.String(), "(login: 2 user(s) of "+users+", $REDISDELAY_UI_TOKEN)")
	url := strings.NewReplacer("0.0.0.0", "127.0.0.1", "[::]", "127.0.0.1").Replace(ui.url)
	get := func(set func(*http.Request)) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url+"api/topics", nil)
		set(req)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
	}
	status, challenge := get(func(*http.Request) {})
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, challenge, "Basic realm=")
	status, _ = get(func(r *http.Request) { r.SetBasicAuth("alice", "wrong-password-12") })
	assert.Equal(t, http.StatusUnauthorized, status)
	status, _ = get(func(r *http.Request) { r.SetBasicAuth("bob", "staple-staple-staple") })
	assert.Equal(t, http.StatusOK, status)
	status, _ = get(func(r *http.Request) { r.Header.Set("Authorization", "Bearer token-of-the-monitoring-script") })
	assert.Equal(t, http.StatusOK, status)
	ui.interrupt(t)

	for _, c := range []struct {
		file, want string
	}{
		{"alice:short\n", `BasicAuth password of user "alice" has 5 characters: use at least 12`},
		{"no colon here\n", `line 1: "*************" is not user:password`},
		{"# nothing\n", "holds no user: write lines user:password"},
	} {
		require.NoError(t, os.WriteFile(users, []byte(c.file), 0o600))
		r := s.cli(t, "ui", "--basic-auth-file", users)
		assert.Equal(t, exitUsage, r.code, c.file)
		assert.Contains(t, r.stderr, c.want)
		assert.NotContains(t, r.stderr, "short", "no password in the message")
	}
	r := s.cli(t, "ui", "--basic-auth-file", filepath.Join(dir, "missing"))
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "no such file")
	r = s.cli(t, "ui", "--password-of-ui", "x")
	assert.Equal(t, exitUsage, r.code, "no flag takes a secret")
}

// startUIAt is startUI for an address printed as re matches.
func startUIAt(t *testing.T, s sample, re string, args ...string) *uiRun {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	ui := &uiRun{stop: stop, code: make(chan int, 1)}
	go func() {
		ui.code <- run(ctx, append([]string{"--addr", redisAddr, "--prefix", s.prefix}, args...), &ui.out, &ui.errOut)
	}()
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(re).FindStringSubmatch(ui.out.String())
		if m != nil {
			ui.url = m[1]
		}
		return m != nil
	}, 5*time.Second, 10*time.Millisecond, "stdout: %s stderr: %s", ui.out.String(), ui.errOut.String())
	return ui
}
