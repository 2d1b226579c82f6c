package dashboard

import (
	"testing"
	"time"
)

func TestHuman(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "0s",
		1500 * time.Millisecond: "2s",
		5 * time.Minute:         "5m0s",
		23*time.Hour + 59*time.Minute + 59*time.Second:    "23h59m59s",
		24*time.Hour - 100*time.Millisecond:               "1d0h0m",
		24 * time.Hour:                                    "1d0h0m",
		36013*time.Hour + 55*time.Minute + 34*time.Second: "1500d13h56m",
		-(50*time.Hour + 29*time.Second):                  "-2d2h0m",
	} {
		if got := human(d); got != want {
			t.Errorf("human(%v) = %q, want %q", d, got, want)
		}
	}
	if got := since(time.Now().Add(-3 * 24 * time.Hour)); got != "3d0h0m ago" {
		t.Errorf("since 3 days ago = %q", got)
	}
	if got := since(time.Now().Add(90*time.Second + 200*time.Millisecond)); got != "in 1m30s" {
		t.Errorf("since in 90s = %q", got)
	}
}
