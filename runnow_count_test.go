package redisdelay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// RunNowWhere counts each message once: a far-tier message it pulls into
// the waiting set and makes due is met there again by the same run (no
// scheduler moves it on: none runs), and a run repeated finds only
// messages already due, which it leaves alone.
func TestInspector_RunNowWhere_CountsEachOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)
	tp := topic()
	pub := newPublisher(t, client)
	insp := newInspector(t, client)

	// More far messages than one batch reads (1,000): the second batch
	// reads the waiting set the first one's far messages were pulled to.
	const far, near = 1200, 10
	var msgs []*message.Message
	for n := range far + near {
		d := 48 * time.Hour // the far tier
		if n >= far {
			d = time.Hour // the waiting set
		}
		m := delayed(delay.For(d), "m"+strconv.Itoa(n))
		m.Metadata.Set("tenant", "acme")
		msgs = append(msgs, m)
	}
	require.NoError(t, pub.Publish(tp, msgs...))
	acme := redisdelay.Filter{Metadata: map[string]string{"tenant": "acme"}}

	p, err := insp.RunNowWhere(ctx, tp, acme, redisdelay.BulkOptions{DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, int64(far+near), p.Matched)
	p, err = insp.RunNowWhere(ctx, tp, acme, redisdelay.BulkOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(far+near), p.Matched, "matched")
	assert.Equal(t, int64(far+near), p.Done, "made due")

	p, err = insp.RunNowWhere(ctx, tp, acme, redisdelay.BulkOptions{})
	require.NoError(t, err)
	assert.Zero(t, p.Matched, "a run repeated: all are due already")
	assert.Zero(t, p.Done)
}
