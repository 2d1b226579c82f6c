package store

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The memos give what parsing and formatting afresh give, for every text
// and value, whether it repeats the last one or not, from any goroutine.
func TestDelayMemo_MatchesFreshParseAndFormat(t *testing.T) {
	untils := []string{
		"2030-01-02T03:04:05Z", "2030-01-02T03:04:05Z", "2030-01-02T03:04:06Z",
		"2030-01-02T03:04:05+01:00", "2030-01-02T03:04:05.123Z", "2030-01-02T03:04:05-00:00",
		"2030-01-02T03:04:05+05:30", "tomorrow", "2030-01-02T03:04:05Z",
	}
	fors := []string{"1h0m0s", "1h0m0s", "90s", "1m30s", "-3h2m1.5s", "soon", "50ms", "1h0m0s", "0s"}
	check := func(t assert.TestingT) {
		for _, v := range untils {
			got, exact, err := ParseUntil(v)
			want, wantErr := time.Parse(time.RFC3339Nano, v)
			if wantErr != nil {
				assert.Error(t, err, v)
				continue
			}
			assert.NoError(t, err, v)
			assert.True(t, want.Equal(got), v)
			_, offset := want.Zone()
			_, gotOffset := got.Zone()
			assert.Equal(t, offset, gotOffset, v)
			assert.Equal(t, FormatUntil(want.Unix(), offset) == v, exact, v)
			assert.Equal(t, FormatUntil(want.Unix(), offset), formatUntilMemo(want.Unix(), offset), v)
		}
		for _, v := range fors {
			got, exact, err := ParseFor(v)
			want, wantErr := time.ParseDuration(v)
			if wantErr != nil {
				assert.Error(t, err, v)
				continue
			}
			assert.NoError(t, err, v)
			assert.Equal(t, want, got, v)
			assert.Equal(t, want.String() == v, exact, v)
			assert.Equal(t, want.String(), formatForMemo(want), v)
		}
	}
	check(t)
	// assert, not require: it reports from the goroutines too
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				check(t)
			}
		}()
	}
	wg.Wait()
}
