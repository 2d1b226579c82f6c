package main

import (
	"slices"
	"strings"
	"testing"
)

// -cost-skip takes system names or their prefixes; an unknown name is an
// error that says which names there are, not a run that skips nothing.
func TestParseCostSkip(t *testing.T) {
	skip, err := parseCostSkip(" asynq, redisstream ,")
	if err != nil || !slices.Equal(skip, []string{"asynq", "redisstream"}) {
		t.Fatalf("got %q, %v", skip, err)
	}
	if skip, err = parseCostSkip(""); err != nil || len(skip) != 0 {
		t.Fatalf("empty: got %q, %v", skip, err)
	}
	_, err = parseCostSkip("redis-stream")
	want := `no system of scenario 13 is named "redis-stream": give redisstream, redisdelay or asynq`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
}
