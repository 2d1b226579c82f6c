package main

// redisdelay ui and the CLI against issue 47's review: forms from another
// port, connections held open, secrets echoed, credential files others
// may read, and the flags that weaken the defences.

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"

	"github.com/redisdelay/watermill-redisdelay/internal/testkit"
)

// TestUI_CrossPortOrigin: a form sent from a page on another port of the
// address the dashboard listens on is refused: the address is allowed
// with its port only. The dashboard's own origin acts.
func TestUI_CrossPortOrigin(t *testing.T) {
	s := setupSample(t)
	ui := startUI(t, s, "ui", "--addr-listen", "127.0.0.1:0")
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	resp, err := client.Get(ui.url + "message?t=" + topic + "&q=" + s.delayed[0])
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(string(page))
	require.NotNil(t, m, string(page))
	cancel := func(origin string) int {
		form := url.Values{"csrf": {m[1]}, "t": {topic}, "uuid": {s.delayed[0]}, "confirm": {"yes"}}
		req, _ := http.NewRequest(http.MethodPost, ui.url+"cancel", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusForbidden, cancel("http://127.0.0.1:49999"), "a page on another port")
	assert.Equal(t, 3, s.waitingCount(t), "cancelled from another port")
	assert.Equal(t, http.StatusOK, cancel(strings.TrimSuffix(ui.url, "/")))
	assert.Equal(t, 2, s.waitingCount(t))
	ui.interrupt(t)
}

func (s sample) waitingCount(t *testing.T) int {
	t.Helper()
	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: s.client, KeyPrefix: s.prefix})
	require.NoError(t, err)
	msgs, err := insp.Waiting(context.Background(), topic, 0, 100)
	require.NoError(t, err)
	return len(msgs)
}

// TestUI_ConnectionsBounded: a client that declares a body and never sends
// it is cut off at the read timeout, an idle kept-alive connection after
// a 401 at the idle timeout, and headers past 64 KiB are refused.
func TestUI_ConnectionsBounded(t *testing.T) {
	wasRead, wasIdle := uiReadTimeout, uiIdleTimeout
	uiReadTimeout, uiIdleTimeout = 300*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() { uiReadTimeout, uiIdleTimeout = wasRead, wasIdle })
	s := setupSample(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("token-of-the-monitoring-script\n"), 0o600))
	ui := startUI(t, s, "ui", "--addr-listen", "127.0.0.1:0", "--token-file", tokens)
	u, _ := url.Parse(ui.url)

	// closedWithin tells whether the server closes conn within d.
	closedWithin := func(conn net.Conn, d time.Duration) bool {
		_ = conn.SetReadDeadline(time.Now().Add(d))
		_, err := io.Copy(io.Discard, conn)
		var ne net.Error
		if err != nil && (errorAs(err, &ne) && ne.Timeout()) {
			return false
		}
		return true // EOF or reset: closed
	}
	start := time.Now()
	body, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer body.Close()
	_, err = io.WriteString(body, "POST /cancel HTTP/1.1\r\nHost: "+u.Host+"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nt=")
	require.NoError(t, err)
	assert.True(t, closedWithin(body, 3*time.Second), "a body never sent holds the connection")
	t.Logf("a body never sent: closed after %s", time.Since(start).Round(time.Millisecond))

	idle, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer idle.Close()
	_, err = io.WriteString(idle, "GET /api/topics HTTP/1.1\r\nHost: "+u.Host+"\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	start = time.Now()
	assert.True(t, closedWithin(idle, 3*time.Second), "an idle keep-alive after a 401 stays open")
	t.Logf("idle after a 401: closed after %s", time.Since(start).Round(time.Millisecond))

	req, _ := http.NewRequest(http.MethodGet, ui.url+"api/topics", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 100<<10))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	ui.interrupt(t)
}

func errorAs(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

// uiRefused runs the ui command line, which must refuse to start: past 5 s
// it is stopped, so that a regression fails rather than serve forever.
func (s sample) uiRefused(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out, errOut testkit.SyncBuffer
	code := run(ctx, append([]string{"--addr", redisAddr, "--prefix", s.prefix}, args...), &out, &errOut)
	r := result{code, out.String(), errOut.String()}
	t.Logf("redisdelay %s → exit %d\n%s%s", strings.Join(args, " "), code, r.stdout, r.stderr)
	require.NotEqual(t, exitOK, code, "served: %s", r.stdout)
	return r
}

// TestUI_CredentialFilesPrivate: a users or token file that group or
// others may read is refused, naming the file and chmod 600, as ssh does.
func TestUI_CredentialFilesPrivate(t *testing.T) {
	s := setupSample(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	require.NoError(t, os.WriteFile(users, []byte("alice:correct-horse-battery\n"), 0o644))
	require.NoError(t, os.Chmod(users, 0o644))
	r := s.uiRefused(t, "ui", "--addr-listen", "127.0.0.1:0", "--basic-auth-file", users)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "--basic-auth-file "+users+" is accessible by group or others (mode 0644)")
	assert.Contains(t, r.stderr, "chmod 600 "+users)
	assert.NotContains(t, r.stderr, "correct-horse-battery")

	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("token-of-the-monitoring-script\n"), 0o640))
	require.NoError(t, os.Chmod(tokens, 0o640))
	r = s.uiRefused(t, "ui", "--addr-listen", "127.0.0.1:0", "--token-file", tokens)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "chmod 600 "+tokens)

	require.NoError(t, os.Chmod(tokens, 0o600))
	ui := startUI(t, s, "ui", "--addr-listen", "127.0.0.1:0", "--token-file", tokens)
	ui.interrupt(t)
}

// TestUI_WeakeningFlags: --allowed-host '*' is warned about; --read-only
// on an address other than loopback without a login needs --insecure.
func TestUI_WeakeningFlags(t *testing.T) {
	s := setupSample(t)
	ui := startUI(t, s, "ui", "--addr-listen", "127.0.0.1:0", "--allowed-host", "*")
	assert.Contains(t, ui.errOut.String(), "warning: --allowed-host '*' turns off the Host check against DNS rebinding")
	ui.interrupt(t)
	ui = startUI(t, s, "ui", "--addr-listen", "127.0.0.1:0", "--allowed-host", "ops.example")
	assert.NotContains(t, ui.errOut.String(), "--allowed-host '*'")
	ui.interrupt(t)

	r := s.uiRefused(t, "ui", "--addr-listen", "0.0.0.0:0", "--read-only")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "is not a loopback address, and the dashboard would have no login: anyone who reaches it could read every payload, read-only or not")
	assert.Contains(t, r.stderr, "--insecure")
}

// TestUI_TLS: --ui-tls-cert and --ui-tls-key serve https, the token's
// cookie Secure; a key file others may read is refused, and one flag
// without the other.
func TestUI_TLS(t *testing.T) {
	s := setupSample(t)
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	ui := startUIAt(t, s, `on (https://127\.0\.0\.1:\d+/)`, "ui", "--addr-listen", "127.0.0.1:0", "--ui-tls-cert", certFile, "--ui-tls-key", keyFile)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(ui.url + "topic?t=" + topic)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(page))
	assert.Contains(t, string(page), s.delayed[0])
	require.NotEmpty(t, resp.Cookies())
	assert.True(t, resp.Cookies()[0].Secure, "the token's cookie over https")
	resp, err = http.Get(strings.Replace(ui.url, "https:", "http:", 1))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain http on the https port")
	ui.interrupt(t)

	r := s.uiRefused(t, "ui", "--addr-listen", "127.0.0.1:0", "--ui-tls-cert", certFile)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "--ui-tls-cert and --ui-tls-key go together")
	require.NoError(t, os.Chmod(keyFile, 0o644))
	r = s.uiRefused(t, "ui", "--addr-listen", "127.0.0.1:0", "--ui-tls-cert", certFile, "--ui-tls-key", keyFile)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "chmod 600 "+keyFile)
}

// selfSigned writes a certificate for 127.0.0.1 and its key (mode 0600),
// and returns a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redisdelay test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestUI_FailedLoginsLogged: a wrong token is logged on stderr, without
// the token.
func TestUI_FailedLoginsLogged(t *testing.T) {
	s := setupSample(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("token-of-the-monitoring-script\n"), 0o600))
	ui := startUI(t, s, "ui", "--addr-listen", "127.0.0.1:0", "--token-file", tokens)
	for _, auth := range []string{"Bearer a-wrong-token-guessed", "bearer token-of-the-monitoring-script"} {
		req, _ := http.NewRequest(http.MethodGet, ui.url+"api/topics", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		if strings.HasPrefix(auth, "bearer") {
			assert.Equal(t, http.StatusOK, resp.StatusCode, "the scheme in lower case")
		}
	}
	assert.Contains(t, ui.errOut.String(), "failed login")
	assert.Contains(t, ui.errOut.String(), "remote=127.0.0.1")
	assert.NotContains(t, ui.errOut.String(), "a-wrong-token-guessed")
	ui.interrupt(t)
}
