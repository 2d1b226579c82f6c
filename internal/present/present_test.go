package present

import (
	"testing"
	"time"
)

func TestPresent_Duration(t *testing.T) {
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
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
	if got := Overdue(273 * time.Second); got != "overdue by 4m33s" {
		t.Errorf("Overdue = %q", got)
	}
}

func TestPresent_Bytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KB", 3 << 20: "3.0 MB", 5 << 30: "5.0 GB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestVisible: what a screen would act on or reorder shows escaped, as Go
// writes it; the rest as it is. The CLI and the dashboard both use it.
func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"orders.close-unpaid":         "orders.close-unpaid",
		"café ünïcode 日本 a b":         "café ünïcode 日本 a b",
		"orders\u202egpj.exe":         `orders\u202egpj.exe`,
		"\u202a\u202b\u202c\u202d":    `\u202a\u202b\u202c\u202d`,
		"\u2066x\u2067y\u2068z\u2069": `\u2066x\u2067y\u2068z\u2069`,
		"a\u200eb\u200fc\u061cd":      `a\u200eb\u200fc\u061cd`,
		"\x1b[31mred\a":               `\x1b[31mred\a`,
		"tab\tnew\nline":              `tab\tnew\nline`,
		"bad \xff byte":               `bad \xff byte`,
	} {
		if got := Visible(in); got != want {
			t.Errorf("Visible(%q) = %q, want %q", in, got, want)
		}
	}
}
