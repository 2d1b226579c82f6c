package otelredisdelay

import (
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

func md(kv ...string) message.Metadata {
	m := message.Metadata{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// scheduledAt follows the redisdelay delay rule: the earlier of the
// duration and the end of the until second.
func TestTracing_ScheduledAt(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 600e6, time.UTC)
	for name, tc := range map[string]struct {
		md   message.Metadata
		want time.Time
	}{
		"no delay":                {md(), now},
		"delay.Message For":       {md(delay.DelayedForKey, "1.5s", delay.DelayedUntilKey, "2026-01-02T03:04:07Z"), now.Add(1500 * time.Millisecond)},
		"until second ends first": {md(delay.DelayedForKey, "10s", delay.DelayedUntilKey, "2026-01-02T03:04:07Z"), time.Date(2026, 1, 2, 3, 4, 8, 0, time.UTC)},
		"until alone":             {md(delay.DelayedUntilKey, "2026-01-02T03:04:07Z"), time.Date(2026, 1, 2, 3, 4, 7, 0, time.UTC)},
		"until with fraction":     {md(delay.DelayedForKey, "10s", delay.DelayedUntilKey, "2026-01-02T03:04:07.250Z"), time.Date(2026, 1, 2, 3, 4, 7, 250e6, time.UTC)},
		"past":                    {md(delay.DelayedUntilKey, "2020-01-01T00:00:00Z"), now},
		"bad duration":            {md(delay.DelayedForKey, "soon"), now},
		"bad until":               {md(delay.DelayedUntilKey, "tomorrow"), now},
	} {
		got, ok := scheduledAt(tc.md, now)
		if !ok || !got.Equal(tc.want) {
			t.Errorf("%s: scheduledAt = %s, %v; want %s", name, got, ok, tc.want)
		}
	}
}

// deliveredDue prefers ScheduledAtKey (milliseconds) when the until key the
// Subscriber delivered agrees with it, else the until key.
func TestTracing_DeliveredDue(t *testing.T) {
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339Nano, s); return v }
	for name, tc := range map[string]struct {
		md   message.Metadata
		want time.Time
		ok   bool
	}{
		"nothing":                          {md(), time.Time{}, false},
		"scheduled alone":                  {md(ScheduledAtKey, "2026-01-02T03:04:07.123Z"), at("2026-01-02T03:04:07.123Z"), true},
		"until alone":                      {md(delay.DelayedUntilKey, "2026-01-02T03:04:07.000Z"), at("2026-01-02T03:04:07Z"), true},
		"agree":                            {md(ScheduledAtKey, "2026-01-02T03:04:07.123Z", delay.DelayedUntilKey, "2026-01-02T03:04:07.000Z"), at("2026-01-02T03:04:07.123Z"), true},
		"republished later":                {md(ScheduledAtKey, "2026-01-02T03:04:07.123Z", delay.DelayedUntilKey, "2026-01-02T05:00:00.000Z"), at("2026-01-02T05:00:00Z"), true},
		"until before it by over a second": {md(ScheduledAtKey, "2026-01-02T03:04:09.123Z", delay.DelayedUntilKey, "2026-01-02T03:04:07.000Z"), at("2026-01-02T03:04:07Z"), true},
		"bad scheduled":                    {md(ScheduledAtKey, "x", delay.DelayedUntilKey, "2026-01-02T03:04:07.000Z"), at("2026-01-02T03:04:07Z"), true},
		"bad both":                         {md(ScheduledAtKey, "x", delay.DelayedUntilKey, "y"), time.Time{}, false},
	} {
		got, ok := deliveredDue(tc.md)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("%s: deliveredDue = %s, %v; want %s, %v", name, got, ok, tc.want, tc.ok)
		}
	}
}

// The codec stores ScheduledAtKey by code, from its own copy of the name.
func TestTracing_ScheduledAtKeyIsNamedInTheCodec(t *testing.T) {
	if !slices.Contains(store.NamedKeys(), ScheduledAtKey) {
		t.Fatalf("%q is not in the codec's named keys %q", ScheduledAtKey, store.NamedKeys())
	}
}
