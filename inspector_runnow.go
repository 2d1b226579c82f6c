package redisdelay

import (
	"context"

	"github.com/redisdelay/watermill-redisdelay/internal/store"
)

// RunNow makes a waiting message of topic due now, by Redis's clock, in
// place (same UUID, body and business key): the scheduler moves it to the
// consumer groups at once, as it would at its due time. It reports whether
// the message was waiting (not when unknown, already due or cancelled).
// As Reschedule to now, with no clock of this process involved; a message
// of the far tier is moved first, as for Reschedule. It is delivered only
// once a scheduler runs for the topic (TopicStats.Leased).
func (i *Inspector) RunNow(ctx context.Context, topic, messageUUID string) (bool, error) {
	return i.runNow(ctx, topic, "uuid", messageUUID)
}

// RunNowKey is RunNow for the waiting message holding businessKey.
func (i *Inspector) RunNowKey(ctx context.Context, topic, businessKey string) (bool, error) {
	return i.runNow(ctx, topic, "key", businessKey)
}

func (i *Inspector) runNow(ctx context.Context, topic, by, value string) (bool, error) {
	if err := checkLookup("run now", topic, by, value); err != nil {
		return false, err
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	if err != nil {
		return false, wrap(err, "run %s now in topic %q", recallWhat(by, value), topic)
	}
	return reschedule(ctx, i.client, i.keys, topic, parts[0], by, value, 0)
}

// RunNowWhere makes the waiting messages of a topic that match f due now,
// as RunNow does one, and returns the counts. It reads and acts as
// CancelWhere does, with the same guards: the zero Filter needs
// BulkOptions.All, DryRun counts and changes nothing, and a run that
// stopped goes on from its Cursor. Messages already due when read (by
// Redis's clock) are left alone and not counted, as RescheduleWhere leaves
// those due at its time: so each is counted once, though one it made due
// (or pulled from the far tier and made due) is met again in the waiting
// set until a scheduler moves it on, and a run repeated does nothing.
func (i *Inspector) RunNowWhere(ctx context.Context, topic string, f Filter, o BulkOptions) (BulkProgress, error) {
	s, err := i.waitingBulk(ctx, topic, f, o)
	if err != nil {
		return BulkProgress{Cursor: o.Cursor}, err
	}
	// s.now is Redis's time (ms, rounded up) read before each batch: a
	// message this run made due in an earlier batch is due by then.
	s.readNow = true
	s.skip = func(w waitingMatch) bool { return w.Due.UnixMilli() <= s.now }
	p, err := runBulk(ctx, s, o, i.eachWaiting(ctx, func(ctx context.Context, sh store.Shard, uuids []string) (int, error) {
		return store.RunNowMany(ctx, i.client, sh, uuids)
	}))
	return p, wrapErr(err, "run waiting messages of topic %q now", topic)
}
