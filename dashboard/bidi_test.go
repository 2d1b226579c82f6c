package dashboard_test

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/dashboard"
)

var tags = regexp.MustCompile(`<[^>]*>`)

// TestPages_BidiNamesEscaped: a topic, group or schedule name with Bidi
// controls (U+202E reorders what follows) shows them escaped, as the CLI
// does, in the pages and their <title>; links still reach it.
func TestPages_BidiNamesEscaped(t *testing.T) {
	e := newEnv(t, dashboard.Options{})
	topic := "orders\u202egpj.exe"
	group := "bill\u2066ing\u200f"
	e.publish(topic, later(time.Hour, "x"))
	e.subscribe(topic, group)
	e.schedule(redisdelay.Schedule{ID: "daily\u202breport", Spec: "0 9 * * *", Topic: topic})
	for _, path := range []string{"/", "/topic?t=" + url.QueryEscape(topic), "/group?t=" + url.QueryEscape(topic) + "&g=" + url.QueryEscape(group),
		"/dead?t=" + url.QueryEscape(topic) + "&g=" + url.QueryEscape(group), "/search?t=" + url.QueryEscape(topic), "/schedules"} {
		status, page := e.get(path)
		require.Equal(t, http.StatusOK, status, "%s: %s", path, page)
		// What the page shows: its text, not the attributes, where the
		// names stay as they are (form values, links).
		text := tags.ReplaceAllString(page, " ")
		for _, r := range []string{"\u202e", "\u2066", "\u200f", "\u202b"} {
			assert.NotContains(t, text, r, "%s shows a raw Bidi control %U", path, []rune(r)[0])
		}
		assert.Contains(t, page, `orders\u202egpj.exe`, path)
	}
	_, page := e.get("/topic?t=" + url.QueryEscape(topic))
	assert.Contains(t, page, `<title>Topic orders\u202egpj.exe · redisdelay</title>`)
	assert.Contains(t, page, `bill\u2066ing\u200f`)
	_, page = e.get("/schedules")
	assert.Contains(t, page, `daily\u202breport`)
}
