// Package names checks the names (topics, consumer groups, ...) that go
// into Redis keys. It is shared by the redisdelay package and its
// prommetrics subpackage.
package names

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Problem says what would break the key layout in a name (empty when
// nothing): braces would move the Redis Cluster hash tag; spaces, control
// characters and invalid UTF-8 make keys unreadable in tools; a bound keeps
// keys reasonable.
func Problem(what, s string) string {
	if s == "" {
		return what + " is empty"
	}
	if len(s) > 256 {
		return fmt.Sprintf("%s is %d bytes long: use at most 256", what, len(s))
	}
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%s %q is not valid UTF-8", what, s)
	}
	if i := strings.IndexFunc(s, func(r rune) bool {
		return r == '{' || r == '}' || unicode.IsSpace(r) || unicode.IsControl(r)
	}); i >= 0 {
		return fmt.Sprintf("%s %q contains %q at byte %d: braces, spaces and control characters are not allowed (they would break the Redis key layout)", what, s, s[i:i+1], i)
	}
	return ""
}
