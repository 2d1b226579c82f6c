package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisdelay/watermill-redisdelay/internal/redistest"
)

// Every mistake in the connection flags is a usage error (exit 2), found
// before anything is dialled.
func TestConnection_UsageErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sentinel", "127.0.0.1:26379", "topics"}, "--sentinel needs --master"},
		{[]string{"--master", "m", "topics"}, "--master without --sentinel"},
		{[]string{"--sentinel", "127.0.0.1:26379", "--master", "m", "--addr", "127.0.0.1:1", "topics"}, "--sentinel and --addr exclude each other"},
		{[]string{"--sentinel", "127.0.0.1:26379", "--master", "m", "--cluster", "127.0.0.1:1", "topics"}, "--sentinel and --cluster exclude each other"},
		{[]string{"--sentinel", " , ", "--master", "m", "topics"}, "--sentinel has no address"},
		{[]string{"--db", "-1", "topics"}, "--db is -1: use 0 or more"},
		{[]string{"--db", "2", "--cluster", "127.0.0.1:7000", "topics"}, "--db 2 with --cluster: a Redis Cluster has database 0 only"},
		{[]string{"--db", "x", "topics"}, `invalid value "x" for flag -db`},
		{[]string{"--tls-cert", "c.pem", "topics"}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-key", "k.pem", "topics"}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-ca", filepath.Join(dir, "missing.pem"), "topics"}, "--tls-ca: open "},
		{[]string{"--tls-ca", notPEM, "topics"}, "holds no PEM certificate"},
		{[]string{"--tls-cert", notPEM, "--tls-key", notPEM, "topics"}, "--tls-cert/--tls-key: tls: failed to find any PEM data"},
		{[]string{"--tls-insecure", "--tls-ca", notPEM, "topics"}, "--tls-insecure and --tls-ca exclude each other"},
		{[]string{"--version", "topics"}, `--version takes no command (got "topics")`},
		{[]string{"topics", "--version"}, `--version takes no command (got "topics")`},
		{[]string{"help", "frobnicate"}, `help: unknown command "frobnicate"`},
		{[]string{"help", "dead", "waiting"}, "help takes one command at most"},
		{[]string{"show", topic}, "show: give the message's UUID, or --key K"},
		{[]string{"show", topic, "u", "--max-payload", "-1"}, "--max-payload is -1: use 0 (no limit) or more"},
		{[]string{"waiting", topic, "--max-payload", "-5"}, "--max-payload is -5"},
		{[]string{"dead", topic, group, "--payload=maybe"}, `invalid boolean value "maybe" for -payload`},
	} {
		r := runCLI(t, c.args...)
		assert.Equal(t, 2, r.code, c.args)
		assert.Contains(t, r.stderr, c.want, c.args)
		usageLines(t, r, c.args)
		assert.Empty(t, r.stdout, c.args)
	}
}

// parseOptions applies the global flags as run does, with env as the
// environment.
func parseOptions(t *testing.T, env map[string]string, args ...string) *options {
	t.Helper()
	o := newOptions()
	o.getenv = func(k string) string { return env[k] }
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.register(fs)
	require.NoError(t, fs.Parse(args))
	require.NoError(t, o.check())
	return o
}

// The flags reach the client's configuration.
func TestConnection_Config(t *testing.T) {
	plain := func(o *options) *redis.Options {
		t.Helper()
		c, ok := o.client().(*redis.Client)
		require.True(t, ok)
		t.Cleanup(func() { _ = c.Close() })
		return c.Options()
	}
	o := plain(parseOptions(t, nil))
	assert.Equal(t, defaultAddr, o.Addr)
	assert.Equal(t, 0, o.DB)
	assert.Empty(t, o.Username)
	assert.Empty(t, o.Password)
	assert.Nil(t, o.TLSConfig)

	o = plain(parseOptions(t, map[string]string{"REDIS_PASSWORD": "old"}, "--db", "3", "--user", "ops"))
	assert.Equal(t, 3, o.DB)
	assert.Equal(t, "ops", o.Username)
	assert.Equal(t, "old", o.Password, "$REDIS_PASSWORD is still read")
	env := map[string]string{"REDIS_PASSWORD": "old", "REDISDELAY_PASSWORD": "new"}
	assert.Equal(t, "new", plain(parseOptions(t, env)).Password)
	assert.Equal(t, "flag", plain(parseOptions(t, env, "--password", "flag")).Password)

	o = plain(parseOptions(t, nil, "--tls"))
	require.NotNil(t, o.TLSConfig)
	assert.False(t, o.TLSConfig.InsecureSkipVerify)
	assert.Nil(t, o.TLSConfig.RootCAs, "the system's roots")
	assert.Equal(t, uint16(tls.VersionTLS12), o.TLSConfig.MinVersion)
	assert.True(t, plain(parseOptions(t, nil, "--tls-insecure")).TLSConfig.InsecureSkipVerify, "--tls-insecure implies --tls")

	certs := writeCerts(t)
	o = plain(parseOptions(t, nil, "--tls-ca", certs.ca, "--tls-cert", certs.clientCert, "--tls-key", certs.clientKey))
	require.NotNil(t, o.TLSConfig)
	assert.NotNil(t, o.TLSConfig.RootCAs)
	assert.Len(t, o.TLSConfig.Certificates, 1)

	cl, ok := parseOptions(t, map[string]string{"REDISDELAY_PASSWORD": "pw"}, "--cluster", "127.0.0.1:7000, 127.0.0.1:7001", "--tls", "--user", "ops").client().(*redis.ClusterClient)
	require.True(t, ok)
	defer cl.Close()
	assert.Equal(t, []string{"127.0.0.1:7000", "127.0.0.1:7001"}, cl.Options().Addrs)
	assert.Equal(t, "ops", cl.Options().Username)
	assert.Equal(t, "pw", cl.Options().Password)
	assert.NotNil(t, cl.Options().TLSConfig)

	so := plain(parseOptions(t, nil, "--sentinel", "127.0.0.1:26379", "--master", "mymaster", "--db", "2"))
	assert.Equal(t, 2, so.DB)
	assert.Equal(t, `Redis master "mymaster" (Sentinels 127.0.0.1:26379)`, parseOptions(t, nil, "--sentinel", "127.0.0.1:26379", "--master", "mymaster").target())
}

func TestConnection_Version(t *testing.T) {
	r := runCLI(t, "--version")
	assert.Equal(t, 0, r.code)
	assert.True(t, strings.HasPrefix(r.stdout, "redisdelay "), r.stdout)
	assert.Contains(t, r.stdout, runtime.Version())
	assert.Empty(t, r.stderr)
}

// --db selects the database; --user and the password from the environment
// log in as an ACL user.
func TestConnection_DBAndACLUser(t *testing.T) {
	s := setupSample(t)
	assert.Contains(t, s.ok(t, "--db", "0", "topics"), topic+"\n")
	assert.Equal(t, fmt.Sprintf("no topics under prefix %q\n", s.prefix), s.ok(t, "--db", "1", "topics"))

	user := "cli-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx := context.Background()
	require.NoError(t, s.client.Do(ctx, "ACL", "SETUSER", user, "on", ">s3cret", "~"+s.prefix+":*", "&*", "+@all").Err())
	t.Cleanup(func() { _ = s.client.Do(ctx, "ACL", "DELUSER", user).Err() })

	t.Setenv("REDISDELAY_PASSWORD", "s3cret")
	assert.Contains(t, s.ok(t, "--user", user, "topics"), topic+"\n")
	r := s.cli(t, "--user", user, "--password", "wrong", "topics")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "WRONGPASS")
	// The ACL user may touch only its prefix: another prefix is refused.
	r = runCLI(t, "--addr", redisAddr, "--prefix", "elsewhere", "--user", user, "topics")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "NOPERM")
}

// --sentinel and --master find the master through a real Sentinel.
func TestConnection_Sentinel(t *testing.T) {
	s := setupSample(t)
	_, port, err := net.SplitHostPort(redisAddr)
	require.NoError(t, err)
	sentinel := startServer(t, fmt.Sprintf("sentinel monitor cli 127.0.0.1 %s 1\n", port), "--sentinel")
	// s.ok passes --addr: set it back to the default, which --sentinel allows.
	assert.Contains(t, s.ok(t, "--addr", defaultAddr, "--sentinel", sentinel, "--master", "cli", "topics"), topic+"\n")
	r := runCLI(t, "--sentinel", sentinel, "--master", "nosuch", "--prefix", s.prefix, "topics")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `redisdelay: cannot reach Redis master "nosuch" (Sentinels `+sentinel+`): `)
	assert.Contains(t, r.stderr, "(is --master the name the Sentinels monitor?)")
}

// A real TLS redis-server that verifies clients: the CLI connects with the
// CA and a client certificate, not without them, and --tls-insecure
// connects with a warning.
func TestConnection_TLS(t *testing.T) {
	certs := writeCerts(t)
	addr := startServer(t, fmt.Sprintf("tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients yes\n",
		certs.serverCert, certs.serverKey, certs.ca), "--tls")
	client := []string{"--tls-cert", certs.clientCert, "--tls-key", certs.clientKey}
	cli := func(args ...string) result {
		return runCLI(t, append([]string{"--addr", addr, "--timeout", "3s", "--prefix", "tls"}, args...)...)
	}

	r := cli(append([]string{"--tls-ca", certs.ca, "topics"}, client...)...)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "no topics under prefix \"tls\"\n", r.stdout)

	r = cli(append([]string{"--tls", "topics"}, client...)...)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "certificate signed by unknown authority")

	r = cli("--tls-ca", certs.ca, "topics")
	assert.Equal(t, 1, r.code, "the server wants a client certificate")

	r = cli("topics")
	assert.Equal(t, 1, r.code, "no TLS")

	r = cli(append([]string{"--tls-insecure", "topics"}, client...)...)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "redisdelay: warning: --tls-insecure: the server's certificate is not verified")
}

// startServer runs a redis-server (or, with "--sentinel", a Sentinel) on a
// free loopback port with extra configuration, until the test ends, and
// returns its address. With "--tls" the port is a TLS port; a server built
// without TLS (the default of `make` in Redis's and Valkey's sources) skips
// the test, and only that: any other failure to start fails it.
func startServer(t *testing.T, extra, mode string) string {
	t.Helper()
	server, err := redistest.ServerBin()
	if errors.Is(err, redistest.ErrNotFound) {
		t.Skip(err)
	}
	require.NoError(t, err)
	var addr string
	err = redistest.OnFreePort(func(port int) error {
		var taken bool
		if addr, taken = startServerOn(t, server, port, extra, mode); taken {
			return redistest.ErrPortTaken
		}
		return nil
	})
	require.NoError(t, err, "every free port found was taken before %s bound it", server)
	return addr
}

// startServerOn is an attempt of startServer, on port: it reports whether
// the port was taken.
func startServerOn(t *testing.T, server string, port int, extra, mode string) (addr string, taken bool) {
	t.Helper()
	dir := t.TempDir()
	listen := fmt.Sprintf("port %d\n", port)
	if mode == "--tls" {
		listen = fmt.Sprintf("port 0\ntls-port %d\n", port)
	}
	conf := filepath.Join(dir, "redis.conf")
	logFile := filepath.Join(dir, "log")
	require.NoError(t, os.WriteFile(conf, []byte(listen+fmt.Sprintf("bind 127.0.0.1\ndir %s\nsave \"\"\nlogfile %s\n", dir, logFile)+extra), 0o600))
	args := []string{conf}
	if mode == "--sentinel" {
		args = append(args, "--sentinel")
	}
	cmd := exec.Command(server, args...)
	var out bytes.Buffer // errors in the configuration go here, not to the log
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr = "127.0.0.1:" + strconv.Itoa(port)
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			return addr, false
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logFile)
			if redistest.PortTakenIn(log) {
				return "", true
			}
			// Redis 7.2 and later and Valkey log this when a TLS port is
			// configured and TLS was not built in.
			const noTLS = "Missing implement of connection type tls"
			if mode == "--tls" && bytes.Contains(log, []byte(noTLS)) {
				t.Skipf("%s was built without TLS (its log: %q; make BUILD_TLS=yes builds it in, Debian's redis-server has it)", server, noTLS)
			}
			t.Fatalf("%s exited at start: %s%s", server, out.Bytes(), log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	log, _ := os.ReadFile(logFile)
	t.Fatalf("%s did not listen on %s: %s", server, addr, log)
	return "", false
}

// A port taken before the server binds it is told apart from any other
// failure to start, so that startServer tries another.
func TestStartServer_PortTaken(t *testing.T) {
	server, err := redistest.ServerBin()
	if errors.Is(err, redistest.ErrNotFound) {
		t.Skip(err)
	}
	require.NoError(t, err)
	_, taken := startServerOn(t, server, redistest.RefusedPort(t), "", "")
	assert.True(t, taken)
}

type certFiles struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

// writeCerts makes a CA, a server certificate for 127.0.0.1 and a client
// certificate, valid for an hour, as PEM files.
func writeCerts(t *testing.T) certFiles {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redisdelay test CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, ips []net.IP) (string, string) {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(k)
		require.NoError(t, err)
		return write(name+".pem", "CERTIFICATE", der), write(name+".key", "PRIVATE KEY", keyDER)
	}
	var c certFiles
	c.ca = write("ca.pem", "CERTIFICATE", caDER)
	c.serverCert, c.serverKey = leaf(2, "server", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	c.clientCert, c.clientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth, nil)
	return c
}

// --url and $REDISDELAY_URL take go-redis's URLs; $REDISDELAY_ADDR an
// address; the flags come first, then the URL, then the address.
func TestConnection_URLAndAddrFromEnvironment(t *testing.T) {
	plain := func(o *options) *redis.Options {
		t.Helper()
		c, ok := o.client().(*redis.Client)
		require.True(t, ok)
		t.Cleanup(func() { _ = c.Close() })
		return c.Options()
	}
	o := plain(parseOptions(t, nil, "--url", "redis://ops:pw@10.0.0.1:6380/4"))
	assert.Equal(t, "10.0.0.1:6380", o.Addr)
	assert.Equal(t, "ops", o.Username)
	assert.Equal(t, "pw", o.Password)
	assert.Equal(t, 4, o.DB)
	assert.Nil(t, o.TLSConfig)
	o = plain(parseOptions(t, nil, "--url", "rediss://10.0.0.1"))
	require.NotNil(t, o.TLSConfig, "rediss:// is TLS")
	assert.Equal(t, "10.0.0.1:6379", o.Addr)

	// The flags and $REDISDELAY_PASSWORD override the URL's parts;
	// $REDIS_PASSWORD does not.
	o = plain(parseOptions(t, map[string]string{"REDISDELAY_PASSWORD": "env"}, "--url", "redis://ops:pw@10.0.0.1/4", "--db", "2", "--user", "other"))
	assert.Equal(t, "env", o.Password)
	assert.Equal(t, 2, o.DB)
	assert.Equal(t, "other", o.Username)
	assert.Equal(t, "pw", plain(parseOptions(t, map[string]string{"REDIS_PASSWORD": "old"}, "--url", "redis://ops:pw@10.0.0.1")).Password)

	// The environment, when no flag names the server.
	env := map[string]string{"REDISDELAY_URL": "redis://10.0.0.2:7000", "REDISDELAY_ADDR": "10.0.0.3:7001"}
	assert.Equal(t, "10.0.0.2:7000", plain(parseOptions(t, env)).Addr)
	assert.Equal(t, "Redis at 10.0.0.2:7000 (from $REDISDELAY_URL)", parseOptions(t, env).target())
	assert.Equal(t, "10.0.0.4:1", plain(parseOptions(t, env, "--addr", "10.0.0.4:1")).Addr, "--addr before the environment")
	assert.Equal(t, "10.0.0.5:1", plain(parseOptions(t, env, "--url", "redis://10.0.0.5:1")).Addr)
	delete(env, "REDISDELAY_URL")
	assert.Equal(t, "10.0.0.3:7001", plain(parseOptions(t, env)).Addr)
	assert.Equal(t, "Redis at 10.0.0.3:7001 (from $REDISDELAY_ADDR)", parseOptions(t, env).target())
	cl, ok := parseOptions(t, env, "--cluster", "127.0.0.1:7000").client().(*redis.ClusterClient)
	require.True(t, ok, "--cluster before $REDISDELAY_ADDR")
	_ = cl.Close()

	// Against the test server: a URL with an ACL user's password, from
	// the flag and from the environment.
	s := setupSample(t)
	user := "cli-url-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx := context.Background()
	require.NoError(t, s.client.Do(ctx, "ACL", "SETUSER", user, "on", ">s3cret", "~"+s.prefix+":*", "&*", "+@all").Err())
	t.Cleanup(func() { _ = s.client.Do(ctx, "ACL", "DELUSER", user).Err() })
	u := "redis://" + user + ":s3cret@" + redisAddr + "/0"
	r := runCLI(t, "--url", u, "--prefix", s.prefix, "topics")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, topic+"\n")
	t.Setenv("REDISDELAY_URL", u)
	r = runCLI(t, "--prefix", s.prefix, "topics")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, topic+"\n")
	t.Setenv("REDISDELAY_URL", "")
	t.Setenv("REDISDELAY_ADDR", redisAddr)
	r = runCLI(t, "--prefix", s.prefix, "topics")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, topic+"\n")
}

// A URL's password is never printed: not in a usage error, not when the
// server cannot be reached, not when it refuses the login.
func TestConnection_URLPasswordRedacted(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--url", "redis://ops:hunter2@127.0.0.1:notaport", "topics"}, 2, "--url redis://ops:xxxxx@127.0.0.1:notaport: "},
		{[]string{"--url", "http://ops:hunter2@127.0.0.1", "topics"}, 2, "--url http://ops:xxxxx@127.0.0.1: redis: invalid URL scheme: http"},
		{[]string{"--url", "redis://ops:hunter2/:x@127.0.0.1", "topics"}, 2, "--url redis://ops:xxxxx@127.0.0.1: "},
		{[]string{"--url", "redis://ops:hunter2@127.0.0.1:6379", "--addr", "127.0.0.1:1", "topics"}, 2, "--url excludes --addr, --cluster and --sentinel"},
		{[]string{"--url", "redis://ops:hunter2@127.0.0.1:1", "--timeout", "2s", "topics"}, 1, "cannot reach Redis at 127.0.0.1:1 (from --url)"},
		{[]string{"--url", "redis://ops:hunter2@" + redisAddr, "topics"}, 1, "WRONGPASS"},
	} {
		r := runCLI(t, c.args...)
		assert.Equal(t, c.code, r.code, "%v: %s", c.args, r.stderr)
		assert.Contains(t, r.stderr, c.want, c.args)
		assert.NotContains(t, r.stderr+r.stdout, "hunter2", c.args)
	}
}

// Every duration flag says what it wants, as --in does, not only "parse
// error"; the help still shows the defaults.
func TestConnection_DurationFlagsExplainThemselves(t *testing.T) {
	for _, args := range [][]string{
		{"health", "--max-overdue", "abc"}, {"health", "--stuck-after", "5"}, {"health", "--consumer-idle", "1x"},
		{"throughput", "--over", "soon"}, {"--timeout", "ten", "topics"},
	} {
		r := runCLI(t, append([]string{"--addr", "127.0.0.1:1"}, args...)...)
		assert.Equal(t, 2, r.code, args)
		assert.Contains(t, r.stderr, "parse error: give a duration such as 90s, 10m or 2h (a number and a unit: ns, us, ms, s, m, h)", args)
	}
	help := runCLI(t, "help", "throughput")
	assert.Contains(t, help.stdout, "measure over D (default 5s)")
	assert.Contains(t, runCLI(t, "-h").stdout, "(default 10s)", "--timeout's default")
	assert.NotContains(t, runCLI(t, "help", "health").stdout, "(default 0s)")
}
