package redisdelay

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/redisdelay/watermill-redisdelay/internal/meta"
	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// userMessage is a stored message of the shape users publish: a UUIDv4,
// Watermill's delay metadata and a 100 B payload.
func userMessage(d delay.Delay) []byte {
	msg := message.NewMessage(watermill.NewUUID(), make([]byte, 100))
	delay.Message(msg, d)
	return store.Encode(msg)
}

// prepareDelivery is what a subscription does to each entry before handing
// it to a handler, Redis aside: decode it and mark it delivered.
func prepareDelivery(b []byte, now time.Time) (*message.Message, string, error) {
	msg, err := store.Decode(b)
	if err != nil {
		return nil, "", err
	}
	return msg, meta.MarkDelivered(msg.Metadata, "1", now), nil
}

// Decoding and marking a delivered message runs once per message on the
// consumer's hot path: it allocates only what the message keeps (its
// UUID, metadata map and values, payload, Watermill's channels), nothing
// to format or parse the delay metadata on the way.
func TestDeliveryPrep_Allocs(t *testing.T) {
	now := time.Now()
	for name, d := range map[string]delay.Delay{
		"delay.Until": delay.Until(now.Add(-time.Second)),
		"delay.For":   delay.For(time.Minute),
	} {
		t.Run(name, func(t *testing.T) {
			b := userMessage(d)
			allocs := testing.AllocsPerRun(1000, func() {
				if _, _, err := prepareDelivery(b, now); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("%s: %.0f allocations per message", name, allocs)
			if allocs > 10 {
				t.Errorf("%s: %.0f allocations per delivered message, want at most 10", name, allocs)
			}
		})
	}
}

// The fast formatters give exactly what the time package's layouts give.
func TestHotPath_FastTimeFormatsMatchTimePackage(t *testing.T) {
	offsets := []int{0, 3600, -3600, 5*3600 + 1800, -(9*3600 + 30*60), 14 * 3600, 45, -59, 3600 + 7}
	unixes := []int64{0, 1, -1, 1_700_000_000, 1_900_000_123, 253402300799, -62135596800, 253402300800, -62135596801, 1e12, -1e12}
	for i := range 2000 {
		unixes = append(unixes, int64(i)*987654321-1_000_000_000_000+int64(i*i))
	}
	for _, u := range unixes {
		for _, off := range offsets {
			want := time.Unix(u, 0).In(time.FixedZone("", off)).Format(time.RFC3339)
			if got := store.FormatUntil(u, off); got != want {
				t.Fatalf("formatUntil(%d, %d) = %q, want %q", u, off, got, want)
			}
		}
		for _, ns := range []int64{0, 1, 999_999, 1_000_000, 123_456_789, 999_999_999} {
			tm := time.Unix(u, ns)
			want := tm.UTC().Format(meta.UntilLayout)
			if got := meta.FormatUntilMs(tm); got != want {
				t.Fatalf("meta.FormatUntilMs(%s) = %q, want %q", tm, got, want)
			}
		}
	}
}

func BenchmarkDeliveryPrep(b *testing.B) {
	now := time.Now()
	msg := userMessage(delay.Until(now.Add(-time.Second)))
	b.ReportAllocs()
	for range b.N {
		if _, _, err := prepareDelivery(msg, now); err != nil {
			b.Fatal(err)
		}
	}
}
