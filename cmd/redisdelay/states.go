package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/internal/present"
)

// The commands that show where a group's messages are (ready, pending,
// retrying), its consumers, the Redis server, throughput and health, and
// those that run waiting messages now or delete a group; and the checks
// that no scheduler is missing.

// schedulerWait is how long an action that made messages due waits for a
// scheduler to take the topic's lease before it warns that none did: a
// scheduler whose loop retired takes it within milliseconds of the
// wake-up, a standby within 1.5 CheckInterval (3 s by default). Tests
// shorten it.
var schedulerWait = 3 * time.Second

// warnUnscheduled warns, on stderr, when no scheduler holds a lease of the
// topic after an action that made messages due or wait, or published a
// schedule's tick: nothing would move them to the consumer groups when
// due, nor retry or reclaim them. The action woke the schedulers (a
// scheduler whose loop retired on an idle partition takes the lease
// again at once), so it waits up to schedulerWait for one to take it.
func (e *env) warnUnscheduled(topic string) {
	if missing, st := present.SchedulerMissing(e.ctx, e.insp, topic, schedulerWait); missing {
		fmt.Fprintf(e.stderr, "redisdelay: warning: %s\n", noSchedulerText(topic, st.Waiting))
	}
}

func noSchedulerText(topic string, waiting int64) string {
	return fmt.Sprintf("no scheduler holds topic %q (%s): nothing moves waiting messages to the consumer groups when due, "+
		"nor retries or reclaims, nor ticks its schedules; run a redisdelay Manager, or a Subscriber without DisableScheduler, for the topic",
		topic, messagesWaiting(waiting))
}

// messagesWaiting says how many messages wait: "nothing waiting", "1
// message waiting", "4 messages waiting".
func messagesWaiting(n int64) string {
	switch n {
	case 0:
		return "nothing waiting"
	case 1:
		return "1 message waiting"
	}
	return fmt.Sprintf("%d messages waiting", n)
}

// noGroupText is the warning for a topic holding ready messages with no
// consumer group to read them, as Health's no_consumer_group: a schedule
// ticking into a topic nobody subscribed to piles up unseen otherwise.
// Grouped messages waiting for the first group alone are no warning: they
// wait aside, by design, and need no scheduler meanwhile.
func noGroupText(st redisdelay.TopicStats) string {
	if len(st.Groups) > 0 || st.Stream == 0 {
		return ""
	}
	return fmt.Sprintf("topic %q has no consumer group: %d message(s) in its ready stream wait for the first, "+
		"and pile up meanwhile; start its subscribers, or stop what publishes to it (a schedule? redisdelay schedules)",
		st.Topic, st.Stream)
}

// schedulerCell is the SCHEDULER column of stats: "yes" while a scheduler
// holds every partition's lease, "2/4" some, "no" none while messages
// wait (they are not delivered), "idle" none with nothing waiting (a
// scheduler lets the lease of such a partition lapse: no fault), nor with
// only grouped messages waiting for the topic's first consumer group.
func schedulerCell(st redisdelay.TopicStats) string {
	switch {
	case st.Leased >= st.Partitions:
		return "yes"
	case st.Leased > 0:
		return fmt.Sprintf("%d/%d", st.Leased, st.Partitions)
	case st.Waiting > st.WaitingForGroup:
		return "no"
	}
	return "idle"
}

// topicStatus is a topic's stats with how overdue its earliest waiting
// message is.
type topicStatus struct {
	redisdelay.TopicStats
	overdue time.Duration
}

// overdueCell is the OVERDUE column of stats.
func overdueCell(d time.Duration) string {
	if d < time.Second {
		return "-"
	}
	return present.Duration(d)
}

// warnStalled reports, on stderr, the topics whose waiting messages no
// scheduler moves, from the stats just printed. Grouped messages waiting
// for the topic's first consumer group need no scheduler until then.
func (e *env) warnStalled(all []topicStatus) {
	for _, st := range all {
		if waiting := st.Waiting - st.WaitingForGroup; st.Leased == 0 && waiting > 0 {
			late := ""
			if st.overdue >= time.Second {
				late = fmt.Sprintf("; the earliest is overdue by %s", present.Duration(st.overdue))
			}
			fmt.Fprintf(e.stderr, "redisdelay: warning: %s%s\n", noSchedulerText(st.Topic, waiting), late)
		}
		if w := noGroupText(st.TopicStats); w != "" {
			fmt.Fprintf(e.stderr, "redisdelay: warning: %s\n", w)
		}
	}
}

// A group's messages.

// groupMessageJSON is a message of a group's listing.
type groupMessageJSON struct {
	ID      string    `json:"id"`
	Queued  time.Time `json:"queued"`
	Attempt int       `json:"attempt"`
	// MessageGroup is the message's group (SetGroup), "" for none.
	MessageGroup string `json:"message_group,omitempty"`
	// UUID, PayloadBytes and Metadata are empty for an entry that could
	// not be decoded (UndecodableBytes is its size), or gone.
	UUID             string            `json:"uuid"`
	PayloadBytes     int               `json:"payload_bytes"`
	Metadata         map[string]string `json:"metadata"`
	UndecodableBytes int               `json:"undecodable_bytes,omitempty"`
	payloadJSON
}

type pendingJSON struct {
	groupMessageJSON
	Consumer     string     `json:"consumer"`
	Renewed      time.Time  `json:"renewed"`
	LeaseExpires *time.Time `json:"lease_expires,omitempty"`
	Deliveries   int64      `json:"deliveries"`
	Handler      string     `json:"handler"`
	HandedAt     *time.Time `json:"handed_at,omitempty"`
}

type retryingJSON struct {
	ID               string            `json:"id"`
	Due              time.Time         `json:"due"`
	DueInMs          int64             `json:"due_in_ms"`
	Attempt          int               `json:"attempt"`
	UUID             string            `json:"uuid"`
	PayloadBytes     int               `json:"payload_bytes"`
	Metadata         map[string]string `json:"metadata"`
	UndecodableBytes int               `json:"undecodable_bytes,omitempty"`
	payloadJSON
}

// pageJSON is the output of a listing of a group's messages.
type pageJSON[T any] struct {
	Topic    string `json:"topic"`
	Group    string `json:"group"`
	Messages []T    `json:"messages"`
	// Cursor goes on with --cursor; "" after the last page.
	Cursor string `json:"cursor"`
}

// messageFields are what every listing shows of a message: its UUID,
// payload size, metadata, or why it cannot be shown.
func (e *env) messageFields(msg *message.Message, body []byte) (uuid string, size int, md map[string]string, undecodable int, p payloadJSON) {
	md = map[string]string{}
	if msg == nil {
		return "", 0, md, len(body), p
	}
	if e.flags.payload {
		p = toPayloadJSON(msg.Payload, e.flags.maxPayload)
	}
	return msg.UUID, len(msg.Payload), nonNilMap(msg.Metadata), 0, p
}

func (e *env) groupMessageJSON(m redisdelay.GroupMessage) groupMessageJSON {
	out := groupMessageJSON{ID: m.ID, Queued: m.Queued.UTC(), Attempt: m.Attempt, MessageGroup: m.Group}
	out.UUID, out.PayloadBytes, out.Metadata, out.UndecodableBytes, out.payloadJSON = e.messageFields(m.Message, m.Body)
	return out
}

// listFlags are the flags of the listings of a group's messages.
func listFlags(fs *flag.FlagSet, f *cmdFlags) {
	fs.IntVar(&f.limit, "limit", 100, "list at most `N` messages (1 to 10000)")
	fs.StringVar(&f.cursor, "cursor", "", "go on from the cursor `C` the previous page printed")
	payloadFlags(fs, f, true)
}

func checkList(_ []string, f *cmdFlags) error {
	if err := checkMaxPayload(f); err != nil {
		return err
	}
	return checkPage(0, f.limit)
}

// pageHint prints how to get the next page, on stderr.
func (e *env) pageHint(n int, cursor string) {
	if cursor != "" {
		fmt.Fprintf(e.stderr, "(%d shown; next page: --cursor %s)\n", n, shellWord(cursor))
	}
}

// cell is a message's UUID, size and metadata in a table.
func cell(msg *message.Message, body []byte) (uuid, size, md string) {
	switch {
	case msg == nil && body == nil:
		return "-", "-", "(settled meanwhile)"
	case msg == nil:
		return "-", strconv.Itoa(len(body)), "CORRUPT: cannot be decoded"
	}
	return printable(msg.UUID), strconv.Itoa(len(msg.Payload)), metadataSummary(msg.Metadata)
}

func cmdReady(e *env, pos []string) error {
	topic, group, f := pos[0], pos[1], e.flags
	if _, err := e.knownGroup(topic, group); err != nil {
		return err
	}
	msgs, next, err := e.insp.Ready(e.ctx, topic, group, f.cursor, f.limit)
	if err != nil {
		return err
	}
	if e.opts.json {
		out := pageJSON[groupMessageJSON]{Topic: topic, Group: group, Messages: []groupMessageJSON{}, Cursor: next}
		for _, m := range msgs {
			out.Messages = append(out.Messages, e.groupMessageJSON(m))
		}
		return writeJSON(e.stdout, out)
	}
	if len(msgs) == 0 {
		fmt.Fprintf(e.stdout, "no ready messages for group %q of topic %q\n", group, topic)
		return nil
	}
	if f.payload {
		for n, m := range msgs {
			if n > 0 {
				fmt.Fprintln(e.stdout)
			}
			fmt.Fprintf(e.stdout, "id:       %s\nstate:    ready for group %q since %s, attempt %d\n", m.ID, printable(group), m.Queued.UTC().Format(time.RFC3339), m.Attempt)
			e.writeBody(m.Message, m.Body)
		}
	} else {
		tw := newTable(e.stdout)
		fmt.Fprintln(tw, "ID\tQUEUED\tATTEMPT\tUUID\tSIZE\tMETADATA")
		for _, m := range msgs {
			uuid, size, md := cell(m.Message, m.Body)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, m.Queued.UTC().Format(time.RFC3339), m.Attempt, uuid, size, md)
		}
		_ = tw.Flush()
	}
	e.pageHint(len(msgs), next)
	return nil
}

// writeBody prints a message's metadata and payload (--payload).
func (e *env) writeBody(msg *message.Message, body []byte) {
	switch {
	case msg == nil && body == nil:
		fmt.Fprintln(e.stdout, "gone:     settled since the page was read")
	case msg == nil:
		fmt.Fprintf(e.stdout, "corrupt:  the stored entry (%d bytes) could not be decoded\n", len(body))
	default:
		fmt.Fprintf(e.stdout, "uuid:     %s\n", printable(msg.UUID))
		writeMetadata(e.stdout, msg.Metadata)
		writePayload(e.stdout, msg.Payload, e.flags.maxPayload)
	}
}

func cmdPending(e *env, pos []string) error {
	topic, group, f := pos[0], pos[1], e.flags
	if _, err := e.knownGroup(topic, group); err != nil {
		return err
	}
	msgs, next, err := e.insp.Pending(e.ctx, topic, group, f.cursor, f.limit)
	if err != nil {
		return err
	}
	now := e.now()
	if e.opts.json {
		out := pageJSON[pendingJSON]{Topic: topic, Group: group, Messages: []pendingJSON{}, Cursor: next}
		for _, m := range msgs {
			p := pendingJSON{groupMessageJSON: e.groupMessageJSON(m.GroupMessage), Consumer: m.Consumer, Renewed: m.Renewed.UTC(), Deliveries: m.Deliveries,
				Handler: string(m.Handler), HandedAt: utcPtr(m.HandedAt)}
			if !m.LeaseExpires.IsZero() {
				at := m.LeaseExpires.UTC()
				p.LeaseExpires = &at
			}
			out.Messages = append(out.Messages, p)
		}
		return writeJSON(e.stdout, out)
	}
	if len(msgs) == 0 {
		fmt.Fprintf(e.stdout, "no pending messages in group %q of topic %q\n", group, topic)
		return nil
	}
	if f.payload {
		for n, m := range msgs {
			if n > 0 {
				fmt.Fprintln(e.stdout)
			}
			fmt.Fprintf(e.stdout, "id:       %s\nstate:    pending with consumer %s, %s, attempt %d, renewed %s, %s\n", m.ID, printable(m.Consumer),
				handlerCell(m.Handler, m.HandedAt, now), m.Attempt, ago(m.Renewed, now), leaseCell(m.LeaseExpires, now))
			e.writeBody(m.Message, m.Body)
		}
	} else {
		tw := newTable(e.stdout)
		fmt.Fprintln(tw, "ID\tCONSUMER\tHANDLER\tRENEWED\tLEASE\tATTEMPT\tUUID\tSIZE\tMETADATA")
		for _, m := range msgs {
			uuid, size, md := cell(m.Message, m.Body)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, truncate(printable(m.Consumer), 40), handlerCell(m.Handler, m.HandedAt, now),
				ago(m.Renewed, now), leaseCell(m.LeaseExpires, now), m.Attempt, uuid, size, md)
		}
		_ = tw.Flush()
	}
	e.pageHint(len(msgs), next)
	e.prefetchNote(msgs)
	return nil
}

// prefetchNote explains the HANDLER column when a consumer holds more
// than one message: one is handled, the others were fetched with it.
func (e *env) prefetchNote(msgs []redisdelay.PendingMessage) {
	held := map[string]int{} // consumer and partition -> messages held
	var most string
	unreported := false
	for _, m := range msgs {
		part, _, _ := strings.Cut(m.ID, ":")
		k := m.Consumer + " in partition " + part
		if held[k]++; most == "" || held[k] > held[most] {
			most = k
		}
		unreported = unreported || m.Handler == redisdelay.HandlerUnreported
	}
	if most == "" || held[most] < 2 {
		return
	}
	fmt.Fprintf(e.stderr, "note: consumer %s holds %d: a subscription hands its messages to its handler one at a time, in the order fetched; "+
		"the others are buffered (BatchSize), their lease renewed alike.\n", printable(most), held[most])
	if unreported {
		fmt.Fprintln(e.stderr, "note: \"unreported\": a consumer reports what its handler has at each lease renewal and once a handler has had a message for a second; "+
			"a release before 0.2.0 does not report.")
	}
}

// handlerCell says whether a handler has a pending message: "handling 12s",
// "buffered" or "unreported".
func handlerCell(h redisdelay.HandlerState, at, now time.Time) string {
	if h == redisdelay.HandlerRunning {
		return "handling " + present.Duration(max(now.Sub(at), 0))
	}
	return string(h)
}

// ago says how long before now t was: "12s ago".
func ago(t, now time.Time) string {
	d := now.Sub(t)
	if d < time.Second {
		return "just now"
	}
	return present.Duration(d) + " ago"
}

// leaseCell says when a pending message's lease expires: "expires in 18s",
// or "expired 4m0s ago" (a scheduler reclaims it: none runs?).
func leaseCell(at, now time.Time) string {
	switch d := at.Sub(now); {
	case at.IsZero():
		return "unknown"
	case d >= 0:
		return "expires in " + present.Duration(d)
	default:
		return "expired " + present.Duration(-d) + " ago"
	}
}

func cmdRetrying(e *env, pos []string) error {
	topic, group, f := pos[0], pos[1], e.flags
	if _, err := e.knownGroup(topic, group); err != nil {
		return err
	}
	msgs, next, err := e.insp.Retrying(e.ctx, topic, group, f.cursor, f.limit)
	if err != nil {
		return err
	}
	now := e.now()
	if e.opts.json {
		out := pageJSON[retryingJSON]{Topic: topic, Group: group, Messages: []retryingJSON{}, Cursor: next}
		for _, m := range msgs {
			r := retryingJSON{ID: m.ID, Due: m.Due.UTC(), DueInMs: m.Due.Sub(now).Milliseconds(), Attempt: m.Attempt}
			r.UUID, r.PayloadBytes, r.Metadata, r.UndecodableBytes, r.payloadJSON = e.messageFields(m.Message, m.Body)
			out.Messages = append(out.Messages, r)
		}
		return writeJSON(e.stdout, out)
	}
	if len(msgs) == 0 {
		fmt.Fprintf(e.stdout, "no messages of group %q of topic %q wait for a retry\n", group, topic)
		return nil
	}
	if f.payload {
		for n, m := range msgs {
			if n > 0 {
				fmt.Fprintln(e.stdout)
			}
			fmt.Fprintf(e.stdout, "id:       %s\nstate:    retrying as attempt %d, due %s (%s)\n", printable(m.ID), m.Attempt, m.Due.UTC().Format(time.RFC3339), dueIn(m.Due, now))
			e.writeBody(m.Message, m.Body)
		}
	} else {
		tw := newTable(e.stdout)
		// As dead's table: the error RecordError kept (ErrorKey) in a
		// REASON column rather than among the metadata.
		fmt.Fprintln(tw, "DUE\tIN\tATTEMPT\tUUID\tSIZE\tREASON\tMETADATA")
		for _, m := range msgs {
			uuid, size, md := cell(m.Message, m.Body)
			reason := "-"
			if m.Message != nil {
				if r := m.Message.Metadata.Get(redisdelay.ErrorKey); r != "" {
					reason, md = truncate(printable(oneLine(r)), 60), metadataSummary(withoutError(m.Message.Metadata))
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", m.Due.UTC().Format(time.RFC3339), dueIn(m.Due, now), m.Attempt, uuid, size, reason, md)
		}
		_ = tw.Flush()
	}
	e.pageHint(len(msgs), next)
	return nil
}

type consumerJSON struct {
	Group    string     `json:"group"`
	Name     string     `json:"name"`
	Pending  int64      `json:"pending"`
	IdleMs   int64      `json:"idle_ms"`
	LastSeen time.Time  `json:"last_seen"`
	Active   *time.Time `json:"active,omitempty"`
	Stuck    bool       `json:"stuck"` // see redisdelay.Consumer.Stuck
}

func cmdConsumers(e *env, pos []string) error {
	topic := pos[0]
	var groups []string
	if len(pos) > 1 {
		if _, err := e.knownGroup(topic, pos[1]); err != nil {
			return err
		}
		groups = pos[1:]
	} else {
		if err := e.knownTopics(topic); err != nil {
			return err
		}
		st, err := e.insp.Stats(e.ctx, topic)
		if err != nil {
			return err
		}
		for _, g := range st.Groups {
			groups = append(groups, g.Group)
		}
		slices.Sort(groups)
	}
	out := []consumerJSON{}
	for _, g := range groups {
		cs, err := e.insp.Consumers(e.ctx, topic, g)
		if err != nil {
			return err
		}
		for _, c := range cs {
			j := consumerJSON{Group: g, Name: c.Name, Pending: c.Pending, IdleMs: c.Idle.Milliseconds(), LastSeen: c.LastSeen.UTC(), Stuck: c.Stuck}
			if !c.Active.IsZero() {
				at := c.Active.UTC()
				j.Active = &at
			}
			out = append(out, j)
		}
	}
	if e.opts.json {
		return writeJSON(e.stdout, out)
	}
	if len(out) == 0 {
		fmt.Fprintf(e.stdout, "no consumers known to Redis in topic %q\n", topic)
		return nil
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "GROUP\tCONSUMER\tPENDING\tIDLE\tLAST SEEN\tSTUCK")
	for _, c := range out {
		stuck := "no"
		if c.Stuck {
			stuck = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", printable(c.Group), printable(c.Name), c.Pending, present.Duration(time.Duration(c.IdleMs)*time.Millisecond), c.LastSeen.Format(time.RFC3339), stuck)
	}
	_ = tw.Flush()
	return nil
}

type serverJSON struct {
	Addr            string `json:"addr,omitempty"`
	Name            string `json:"name,omitempty"`
	Version         string `json:"version,omitempty"`
	Mode            string `json:"mode,omitempty"`
	UptimeS         int64  `json:"uptime_s"`
	UsedMemory      int64  `json:"used_memory"`
	PeakMemory      int64  `json:"peak_memory"`
	MaxMemory       int64  `json:"maxmemory"`
	MaxMemoryPolicy string `json:"maxmemory_policy,omitempty"`
	Warning         string `json:"warning,omitempty"`
	InfoDenied      bool   `json:"info_denied,omitempty"`
}

func cmdServer(e *env, _ []string) error {
	servers, err := e.insp.Servers(e.ctx)
	if err != nil {
		return err
	}
	if e.opts.json {
		out := []serverJSON{}
		for _, s := range servers {
			out = append(out, serverJSON{Addr: s.Addr, Name: s.Name, Version: s.Version, Mode: s.Mode, UptimeS: int64(s.Uptime / time.Second),
				UsedMemory: s.UsedMemory, PeakMemory: s.PeakMemory, MaxMemory: s.MaxMemory, MaxMemoryPolicy: s.MaxMemoryPolicy,
				Warning: s.Warning, InfoDenied: s.InfoDenied})
		}
		return writeJSON(e.stdout, out)
	}
	for n, s := range servers {
		if n > 0 {
			fmt.Fprintln(e.stdout)
		}
		writeServer(e.stdout, s, e.opts.target())
		if s.Warning != "" {
			fmt.Fprintf(e.stderr, "redisdelay: warning: %s\n", s.Warning)
		}
	}
	if st, err := e.insp.Storage(e.ctx); err == nil {
		fmt.Fprintf(e.stdout, "storage level:     %s\n", storageSummary(st))
	}
	return nil
}

func writeServer(w io.Writer, s redisdelay.RedisServer, target string) {
	where := target
	if s.Addr != "" {
		where = s.Addr
	}
	fmt.Fprintf(w, "server:            %s\n", where)
	if s.InfoDenied {
		fmt.Fprintln(w, "info:              denied: the Redis user may not run INFO (grant +info)")
		return
	}
	mode := ""
	if s.Mode != "" {
		mode = ", " + s.Mode
	}
	fmt.Fprintf(w, "version:           %s %s%s, up %s\n", s.Name, printable(s.Version), mode, present.Duration(s.Uptime))
	limit := "no limit (maxmemory 0)"
	if s.MaxMemory > 0 {
		limit = fmt.Sprintf("%s (%.0f%% used)", present.Bytes(s.MaxMemory), 100*float64(s.UsedMemory)/float64(s.MaxMemory))
	}
	fmt.Fprintf(w, "memory:            %s used, peak %s\n", present.Bytes(s.UsedMemory), present.Bytes(s.PeakMemory))
	fmt.Fprintf(w, "maxmemory:         %s\n", limit)
	ok := "ok"
	if s.Warning != "" {
		ok = "WARNING: not noeviction (see stderr)"
	}
	fmt.Fprintf(w, "maxmemory-policy:  %s (%s)\n", printable(s.MaxMemoryPolicy), ok)
}

type throughputJSON struct {
	Topic     string          `json:"topic"`
	OverMs    int64           `json:"over_ms"`
	ReadyRate float64         `json:"made_ready_per_s"`
	Groups    []groupRateJSON `json:"groups"`
	counters  [2]redisdelay.TopicCounters
}

type groupRateJSON struct {
	Group string `json:"group"`
	// Delivered is -1 when Redis cannot tell (entries deleted by hand).
	DeliveredRate float64 `json:"delivered_per_s"`
	DeadRate      float64 `json:"dead_lettered_per_s"`
}

func cmdThroughput(e *env, topics []string) error {
	if len(topics) == 0 {
		var err error
		if topics, err = e.insp.Topics(e.ctx); err != nil {
			return err
		}
		slices.Sort(topics)
	} else if err := e.knownTopics(topics...); err != nil {
		return err
	}
	out := make([]throughputJSON, len(topics))
	for round := range 2 {
		if round == 1 {
			select {
			case <-e.ctx.Done():
				return e.ctx.Err()
			case <-time.After(e.flags.over):
			}
		}
		for n, t := range topics {
			c, err := e.insp.Counters(e.ctx, t)
			if err != nil {
				return err
			}
			out[n].Topic, out[n].counters[round] = t, c
		}
	}
	for n := range out {
		a, b := out[n].counters[0], out[n].counters[1]
		dt := b.Time.Sub(a.Time).Seconds()
		out[n].OverMs, out[n].Groups = b.Time.Sub(a.Time).Milliseconds(), []groupRateJSON{}
		if dt <= 0 {
			continue
		}
		out[n].ReadyRate = rateOf(a.Ready, b.Ready, dt)
		for _, g := range b.Groups {
			r := groupRateJSON{Group: g.Group}
			for _, was := range a.Groups {
				if was.Group == g.Group {
					r.DeliveredRate, r.DeadRate = rateOf(was.Delivered, g.Delivered, dt), rateOf(was.DeadTotal, g.DeadTotal, dt)
				}
			}
			out[n].Groups = append(out[n].Groups, r)
		}
	}
	if e.opts.json {
		return writeJSON(e.stdout, out)
	}
	tw := newTable(e.stdout)
	fmt.Fprintf(tw, "TOPIC\tGROUP\tMADE READY/S\tDELIVERED/S\tDEAD-LETTERED/S\n")
	for _, t := range out {
		if len(t.Groups) == 0 {
			fmt.Fprintf(tw, "%s\t-\t%s\t-\t-\n", printable(t.Topic), rateText(t.ReadyRate))
		}
		for _, g := range t.Groups {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", printable(t.Topic), printable(g.Group), rateText(t.ReadyRate), rateText(g.DeliveredRate), rateText(g.DeadRate))
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(e.stderr, "(rates over %s by Redis's clock; delivered counts first deliveries from the ready stream, not redeliveries)\n", e.flags.over)
	return nil
}

// rateOf is the growth of a counter per second; -1 when unknown or
// restarted (the counter shrank: its stream was deleted).
func rateOf(a, b int64, dt float64) float64 {
	if a < 0 || b < a {
		return -1
	}
	return float64(b-a) / dt
}

func rateText(r float64) string {
	if r < 0 {
		return "?"
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}

func cmdHealth(e *env, topics []string) error {
	if len(topics) > 0 {
		if err := e.knownTopics(topics...); err != nil {
			return err
		}
	}
	f := e.flags
	report, err := e.insp.Health(e.ctx, redisdelay.HealthConfig{Topics: topics, MaxOverdue: f.maxOverdue, StuckAfter: f.stuckAfter,
		ConsumerIdle: f.consumerIdle, ShowConsumers: true})
	if err != nil {
		return err
	}
	if e.opts.json {
		if report.Problems == nil {
			report.Problems = []redisdelay.HealthProblem{}
		}
		if err := writeJSON(e.stdout, report); err != nil {
			return err
		}
	} else if report.Healthy {
		fmt.Fprintf(e.stdout, "healthy: %d topic(s) checked, no problem found\n", report.Topics)
	} else {
		fmt.Fprintf(e.stdout, "UNHEALTHY: %d problem(s) in %d topic(s) checked\n", len(report.Problems), report.Topics)
		tw := newTable(e.stdout)
		fmt.Fprintln(tw, "KIND\tTOPIC\tGROUP\tDETAIL")
		for _, p := range report.Problems {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Kind, orDash(printable(p.Topic)), orDash(printable(p.Group)), printable(oneLine(p.Detail)))
		}
		_ = tw.Flush()
	}
	if !report.Healthy {
		return errReported
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func cmdDeleteGroup(e *env, pos []string) error {
	topic, group := pos[0], pos[1]
	st, err := e.knownGroup(topic, group)
	if err != nil {
		return err
	}
	if !e.flags.yes {
		g := groupStats(st, group)
		return usagef(lookup("delete-group"), "delete-group: would delete consumer group %q of topic %q with its %d pending, %d retrying and %d dead messages, and leave the %d it has not read to the other groups; nothing deleted: stop its subscribers first, then add --yes",
			group, topic, g.Pending, g.Retry, g.Dead, max(g.Ready, 0))
	}
	existed, err := e.insp.DeleteGroup(e.ctx, topic, group)
	if err != nil {
		return err
	}
	if e.opts.json {
		return writeJSON(e.stdout, deleteGroupJSON{Topic: topic, Group: group, Deleted: existed})
	}
	if existed {
		fmt.Fprintf(e.stdout, "deleted consumer group %q of topic %q; a subscriber of it still running creates it again and reads what is left in the ready stream\n", group, topic)
	} else {
		fmt.Fprintf(e.stdout, "consumer group %q of topic %q was gone already\n", group, topic)
	}
	return nil
}

type deleteGroupJSON struct {
	Topic   string `json:"topic"`
	Group   string `json:"group"`
	Deleted bool   `json:"deleted"`
}

type runNowJSON struct {
	Topic string `json:"topic"`
	UUID  string `json:"uuid,omitempty"`
	Key   string `json:"key,omitempty"`
	Ran   bool   `json:"ran"`
}

func cmdRunNow(e *env, pos []string) error {
	topic, f := pos[0], e.flags
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	if f.bulk() {
		if err := e.confirmAll("run-now", topic); err != nil {
			return err
		}
		filter := f.filter()
		err := e.runBulk(bulkAction{
			name: "run-now", verb: "run now", did: "made due now", topic: topic,
			what: func(n int64) string { return fmt.Sprintf("%s of topic %q", waitingMessages(n), topic) },
			run: func(ctx context.Context, o redisdelay.BulkOptions) (redisdelay.BulkProgress, error) {
				return e.insp.RunNowWhere(ctx, topic, filter, o)
			},
		})
		if err == nil && !f.dryRun {
			e.warnUnscheduled(topic)
		}
		return err
	}
	out := runNowJSON{Topic: topic, Key: f.key}
	var err error
	if out.Key != "" {
		out.Ran, err = e.insp.RunNowKey(e.ctx, topic, out.Key)
	} else {
		out.UUID = pos[1]
		out.Ran, err = e.insp.RunNow(e.ctx, topic, out.UUID)
	}
	if err != nil {
		return err
	}
	if out.Ran {
		e.warnUnscheduled(topic)
	}
	what := "message " + out.UUID
	if out.Key != "" {
		what = fmt.Sprintf("the message holding business key %q", out.Key)
	}
	switch {
	case e.opts.json:
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
	case out.Ran:
		fmt.Fprintf(e.stdout, "%s of topic %q is due now: the scheduler moves it to the consumer groups\n", what, topic)
	default:
		fmt.Fprintf(e.stdout, "not run: %s is not waiting in topic %q (unknown, cancelled, or already due)\n", what, topic)
	}
	return notFoundUnless(out.Ran)
}
