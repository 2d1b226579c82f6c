package store

import (
	"strconv"
	"time"
)

// A waiting or retry member's score is its due time in ms × 1024 plus a
// tie-break below 1024 (publish order): see publish.lua.
const scoreScale = 1024

// DueOf is the due time of a waiting or retry score.
func DueOf(score float64) time.Time { return time.UnixMilli(int64(score) / scoreScale) }

// scoreBound is the ZCOUNT bound of the first score due at t.
func scoreBound(t time.Time) string { return strconv.FormatInt(t.UnixMilli()*scoreScale, 10) }

// parseCount reads an integer reply value (a hash field read by HMGET or
// HGET), 0 when absent.
func parseCount(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
