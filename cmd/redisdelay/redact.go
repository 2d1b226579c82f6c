// Secrets kept out of messages: a URL's credentials (redis://user:PASSWORD@host
// given to --addr by mistake, and echoed back by go-redis's errors) and the
// password itself, wherever a message would carry it.

package main

import (
	"bytes"
	"io"
	"regexp"
	"strings"
)

// urlUserinfo is the userinfo of a URL in a text: scheme://user:password@
// or scheme://secret@ (go-redis reads a lone one as the user name, but it
// is as often a password).
var urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^\s/@:]*)(:[^\s/@]*)?@`)

// redacted is the mark of a secret taken out.
const redacted = "xxxxx"

// minRedacted is the length under which the password itself is not
// searched for in messages: replacing every "a" of a message would garble
// it and tell the password's length anyway.
const minRedacted = 4

// redact takes the credentials of URLs out of s, and the password (of
// --password or the environment) when long enough to find.
func (o *options) redact(s string) string {
	s = urlUserinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := urlUserinfo.FindStringSubmatch(m)
		if sub[3] == "" {
			return sub[1] + redacted + "@"
		}
		return sub[1] + sub[2] + ":" + redacted + "@"
	})
	for _, secret := range []string{o.password, o.getenv("REDISDELAY_PASSWORD"), o.getenv("REDIS_PASSWORD"), o.getenv("REDISDELAY_SENTINEL_PASSWORD")} {
		if len(secret) >= minRedacted {
			s = strings.ReplaceAll(s, secret, redacted)
		}
	}
	return s
}

// redactingWriter redacts what is written to the error stream: every
// message goes through it, whatever builds it (flag errors, go-redis
// errors, the dashboard's log). A message is written in one call, so a
// secret is not split across two.
type redactingWriter struct {
	w    io.Writer
	opts *options
}

func (r redactingWriter) Write(p []byte) (int, error) {
	if !bytes.Contains(p, []byte("@")) && r.opts.password == "" && r.opts.getenv("REDISDELAY_PASSWORD") == "" && r.opts.getenv("REDIS_PASSWORD") == "" && r.opts.getenv("REDISDELAY_SENTINEL_PASSWORD") == "" {
		return r.w.Write(p)
	}
	if _, err := io.WriteString(r.w, r.opts.redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
