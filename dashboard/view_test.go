package dashboard

import (
	"strings"
	"testing"
	"time"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

func TestView_Since(t *testing.T) {
	// The duration format itself is internal/present's (TestPresent_Duration).
	if got := since(time.Now().Add(-3 * 24 * time.Hour)); got != "3d0h0m ago" {
		t.Errorf("since 3 days ago = %q", got)
	}
	if got := since(time.Now().Add(90*time.Second + 200*time.Millisecond)); got != "in 1m30s" {
		t.Errorf("since in 90s = %q", got)
	}
}

func TestView_SchedulingAlert(t *testing.T) {
	st := redisdelay.TopicStats{Topic: "t", Partitions: 2, Waiting: 5}
	for _, c := range []struct {
		leased  int
		waiting int64
		overdue time.Duration
		want    string // "" for none
	}{
		{0, 0, 0, ""}, // nothing waits: a dormant partition needs no lease
		{0, 5, 0, "No scheduler holds this topic's lease: its 5 waiting message(s) are not moved to the consumer groups when due. "},
		{0, 5, 101 * time.Second, "when due, and the earliest is overdue by 1m41s."},
		{1, 5, 3 * time.Second, ""}, // a handover, or a busy moment
		{1, 5, 101 * time.Second, "overdue by 1m41s, although a scheduler holds the lease of 1 of 2 partition(s)"},
		{2, 5, 50 * time.Hour, "overdue by 2d2h0m, although a scheduler holds the lease of 2 of 2"},
	} {
		st.Leased, st.Waiting = c.leased, c.waiting
		got := schedulingAlert(st, c.overdue)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("leased %d, waiting %d, overdue %v: %q, want %q", c.leased, c.waiting, c.overdue, got, c.want)
		}
	}
}
