package store

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Inspector's listings of a consumer group's messages where they are:
// ready (due, not fetched yet), pending (fetched, not acknowledged),
// retrying (waiting for a retry delay), and the group's consumers. Each
// reads one page, bounded by its limit, whatever the backlog: stream reads
// by entry ID (XRANGE, XPENDING), the retry set by rank (ZRANGE).

// StreamEntry is an entry of a ready or redelivery stream.
type StreamEntry struct {
	ID string
	// Body is the encoded message; nil when the entry is gone (a pending
	// entry acknowledged, or deleted, since the page was read).
	Body []byte
	// Attempt is the delivery attempt the entry is (field a; 1 without).
	Attempt int
	// Group is a grouped message's group (field k), "" for none.
	Group string
}

// entryOf reads a stream entry's fields, as lib.lua's entry_of does.
func entryOf(m redis.XMessage) StreamEntry {
	e := StreamEntry{ID: m.ID, Attempt: 1}
	if b, ok := m.Values["m"].(string); ok {
		e.Body = []byte(b)
	}
	if a, ok := m.Values["a"].(string); ok {
		if n, err := strconv.Atoi(a); err == nil {
			e.Attempt = n
		}
	}
	e.Group, _ = m.Values["k"].(string)
	return e
}

// StreamOf names the stream a group reads: "m", the partition's ready
// stream (new messages), or "r", the group's redelivery stream (retries,
// requeued dead letters, high-priority and grouped messages).
func (s Shard) StreamOf(group, which string) string {
	if which == "r" {
		return s.Redelivery(group)
	}
	return s.Stream()
}

// ReadyEntries returns up to limit entries of a group's stream (which, see
// StreamOf) that the group has not fetched yet, after the entry ID after
// ("" for the first): those past the group's last delivered entry. A group
// not created on the stream yet (no subscriber read it) will fetch every
// entry.
func ReadyEntries(ctx context.Context, c redis.Cmdable, sh Shard, group, which, after string, limit int) ([]StreamEntry, error) {
	key := sh.StreamOf(group, which)
	infos, err := c.XInfoGroups(ctx, key).Result()
	if err != nil && !isNoSuchKey(err) {
		return nil, err
	}
	start := "-"
	for _, in := range infos {
		if in.Name == group {
			start = "(" + in.LastDeliveredID
		}
	}
	if after != "" && (start == "-" || compareIDs(after, start[1:]) > 0) {
		start = "(" + after
	}
	msgs, err := c.XRangeN(ctx, key, start, "+", int64(limit)).Result()
	if err != nil {
		return nil, err
	}
	out := make([]StreamEntry, len(msgs))
	for n, m := range msgs {
		out[n] = entryOf(m)
	}
	return out, nil
}

// compareIDs orders two stream entry IDs (ms-seq).
func compareIDs(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	x, _ := strconv.ParseUint(am, 10, 64)
	y, _ := strconv.ParseUint(bm, 10, 64)
	if x != y {
		if x < y {
			return -1
		}
		return 1
	}
	x, _ = strconv.ParseUint(as, 10, 64)
	y, _ = strconv.ParseUint(bs, 10, 64)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// PendingEntry is a message a consumer fetched and has not settled.
type PendingEntry struct {
	StreamEntry
	Consumer string
	// Idle is how long ago the consumer fetched the message or last renewed
	// its lease (Redis's last delivery time of the entry).
	Idle time.Duration
	// Deliveries counts Redis's deliveries of the entry (a lease renewal
	// does not count; a reclaim requeues the message as a new entry).
	Deliveries int64
	// Handler is what the consumer last reported of the entry (see
	// Extend), and HandedAt when it handed it to a handler.
	Handler  HandlerState
	HandedAt time.Time
}

// HandlerState is what a consumer last reported of an entry it holds.
type HandlerState uint8

const (
	HandlerUnreported HandlerState = iota // no report of the consumer's is current
	HandlerBuffered                       // fetched, behind the one being handled
	HandlerRunning                        // handed to a handler
)

// handedOf sets p's Handler from its consumer's report (report, a GET
// of its handling key), p being an entry of the stream which.
func (p *PendingEntry) handedOf(which string, report *redis.StringCmd) {
	r, err := report.Result()
	if err != nil {
		return
	}
	p.Handler = HandlerBuffered
	fs := strings.Fields(r)
	if len(fs) == 3 && fs[0] == which && fs[1] == p.ID {
		ms, _ := strconv.ParseInt(fs[2], 10, 64)
		p.Handler, p.HandedAt = HandlerRunning, time.UnixMilli(ms)
	}
}

// PendingEntries returns up to limit entries of a group's stream (which)
// pending for its consumers, after the entry ID after ("" for the first),
// with their bodies: two round trips, XPENDING then one XRANGE per entry
// on a pipeline.
func PendingEntries(ctx context.Context, c redis.Cmdable, sh Shard, group, which, after string, limit int) ([]PendingEntry, error) {
	key := sh.StreamOf(group, which)
	start := "-"
	if after != "" {
		start = "(" + after
	}
	pending, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: group, Start: start, End: "+", Count: int64(limit)}).Result()
	if err != nil {
		if isNoSuchKey(err) || IsNoGroup(err) {
			return nil, nil
		}
		return nil, err
	}
	if len(pending) == 0 {
		return nil, nil
	}
	pipe := c.Pipeline()
	reads := make([]*redis.XMessageSliceCmd, len(pending))
	reports := map[string]*redis.StringCmd{} // per consumer
	for n, p := range pending {
		reads[n] = pipe.XRange(ctx, key, p.ID, p.ID)
		if reports[p.Consumer] == nil {
			reports[p.Consumer] = pipe.Get(ctx, sh.handling(group, p.Consumer))
		}
	}
	if err := execRead(ctx, pipe); err != nil {
		return nil, err
	}
	out := make([]PendingEntry, len(pending))
	for n, p := range pending {
		e := StreamEntry{ID: p.ID, Attempt: 1}
		if ms := reads[n].Val(); len(ms) == 1 {
			e = entryOf(ms[0])
		}
		out[n] = PendingEntry{StreamEntry: e, Consumer: p.Consumer, Idle: p.Idle, Deliveries: p.RetryCount}
		out[n].handedOf(which, reports[p.Consumer])
	}
	return out, nil
}

// ReadGroupPolicy reads a group's stored policy: its Visibility and
// MaxAttempts (0 when not stored).
func ReadGroupPolicy(ctx context.Context, c redis.Cmdable, sh Shard, group string) (GroupPolicy, error) {
	v, err := c.HMGet(ctx, sh.Meta(group), "vis", "max").Result()
	if err != nil {
		return GroupPolicy{}, err
	}
	return GroupPolicy{Visibility: time.Duration(parseCount(v[0])) * time.Millisecond, MaxAttempts: int(parseCount(v[1]))}, nil
}

// RetryEntry is a message waiting in a group's retry set.
type RetryEntry struct {
	Member string // "<attempt>:..." (see lib.lua's retry_later)
	Due    time.Time
	// Attempt is the attempt it will be delivered as.
	Attempt int
	Body    []byte // nil when it fell due meanwhile
	// Cursor is where a page after this entry starts.
	Cursor RetryCursor
}

// RetryCursor is a place in a retry set: after the member with this
// score (the zero RetryCursor: from the start).
type RetryCursor struct {
	Score  int64
	Member string
}

func (r RetryCursor) String() string { return strconv.FormatInt(r.Score, 10) + ":" + r.Member }

// ParseRetryCursor reads a RetryCursor's String.
func ParseRetryCursor(s string) (RetryCursor, bool) {
	score, member, ok := strings.Cut(s, ":")
	n, err := strconv.ParseInt(score, 10, 64)
	return RetryCursor{Score: n, Member: member}, ok && err == nil && member != ""
}

// RetryEntriesAfter returns up to limit members of a group's retry set
// after the cursor, in (score, member) order (Redis's: due order, equal
// due times by member), with their bodies. The position is the cursor's
// score and member, not a rank, so what falls due or is added between two
// pages shifts nothing: the cursor's member need not be in the set any
// more, and members due in the same millisecond after it are still read.
func RetryEntriesAfter(ctx context.Context, c redis.Cmdable, sh Shard, group string, from RetryCursor, limit int) ([]RetryEntry, error) {
	key := sh.Retry(group)
	var zs []redis.Z
	if from.Member == "" {
		var err error
		if zs, err = c.ZRangeWithScores(ctx, key, 0, int64(limit-1)).Result(); err != nil {
			return nil, err
		}
	} else {
		// From the cursor's score on; members at that score up to the
		// cursor's were read already (a few, unless many retries share a
		// due millisecond: then read past a batch at a time). A page is
		// full unless the set ends: Retrying goes on to the next
		// partition after a short one.
		at := float64(from.Score)
		n := int64(limit) + 1
		for offset := int64(0); ; offset += n {
			batch, err := c.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
				Key: key, Start: strconv.FormatInt(from.Score, 10), Stop: "+inf", ByScore: true, Offset: offset, Count: n,
			}).Result()
			if err != nil {
				return nil, err
			}
			for _, z := range batch {
				if m, _ := z.Member.(string); z.Score == at && m <= from.Member {
					continue
				}
				if len(zs) < limit {
					zs = append(zs, z)
				}
			}
			if len(zs) == limit || int64(len(batch)) < n {
				break
			}
		}
	}
	if len(zs) == 0 {
		return nil, nil
	}
	members := make([]string, len(zs))
	for n, z := range zs {
		members[n], _ = z.Member.(string)
	}
	bodies, err := c.HMGet(ctx, sh.retryBodies(group), members...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]RetryEntry, len(zs))
	for n, z := range zs {
		r := RetryEntry{Member: members[n], Due: DueOf(z.Score), Attempt: 1, Cursor: RetryCursor{int64(z.Score), members[n]}}
		if a, _, ok := strings.Cut(members[n], ":"); ok {
			if k, err := strconv.Atoi(a); err == nil {
				r.Attempt = k
			}
		}
		if b, ok := bodies[n].(string); ok {
			r.Body = []byte(b)
		}
		out[n] = r
	}
	return out, nil
}

// RetryCount is the size of a group's retry set.
func RetryCount(ctx context.Context, c redis.Cmdable, sh Shard, group string) (int64, error) {
	return c.ZCard(ctx, sh.Retry(group)).Result()
}

// ConsumerInfo is a consumer of a group on one partition, over both of
// its streams.
type ConsumerInfo struct {
	Name    string
	Pending int64
	// Idle is how long since the consumer last read, claimed or renewed
	// (XINFO CONSUMERS idle: any attempt); Inactive how long since it last
	// got or renewed an entry (Redis 7.2 and later; -1 before, or never).
	Idle, Inactive time.Duration
	// Silent is, of its streams in which it holds entries, the longest
	// idle time (0 when it holds none): how long its oldest unrenewed
	// lease has gone without a sign of life from it at most.
	Silent time.Duration
}

// Consumers reads a group's consumers on a partition: those of its ready
// stream and of its redelivery stream, merged by name (the lowest idle
// times, the pending entries summed), and the group's stored visibility
// timeout (0 when none is stored).
func Consumers(ctx context.Context, c redis.Cmdable, sh Shard, group string) ([]ConsumerInfo, time.Duration, error) {
	pipe := c.Pipeline()
	ready := pipe.XInfoConsumers(ctx, sh.Stream(), group)
	redo := pipe.XInfoConsumers(ctx, sh.Redelivery(group), group)
	vis := pipe.HGet(ctx, sh.Meta(group), "vis")
	if err := execRead(ctx, pipe); err != nil {
		return nil, 0, err
	}
	var out []ConsumerInfo
	index := map[string]int{}
	for _, list := range [][]redis.XInfoConsumer{ready.Val(), redo.Val()} {
		for _, x := range list {
			// go-redis leaves Inactive 0 when the server does not send it
			// (before Redis 7.2); from 7.2 on it is never below Idle (a
			// success is an attempt too), or -1 when it never got one.
			inactive := x.Inactive
			if inactive < x.Idle {
				inactive = -1
			}
			var silent time.Duration
			if x.Pending > 0 {
				silent = x.Idle
			}
			k, ok := index[x.Name]
			if !ok {
				index[x.Name] = len(out)
				out = append(out, ConsumerInfo{Name: x.Name, Pending: x.Pending, Idle: x.Idle, Inactive: inactive, Silent: silent})
				continue
			}
			ci := &out[k]
			ci.Pending += x.Pending
			ci.Idle = min(ci.Idle, x.Idle)
			ci.Silent = max(ci.Silent, silent)
			if inactive >= 0 && (ci.Inactive < 0 || inactive < ci.Inactive) {
				ci.Inactive = inactive
			}
		}
	}
	return out, time.Duration(parseCount(vis.Val())) * time.Millisecond, nil
}

// ServerInfo is what INFO tells of a Redis (or Valkey) server.
type ServerInfo struct {
	Addr    string // "" when the client is not a Cluster client
	Name    string // "redis" or "valkey"
	Version string
	Mode    string // standalone, cluster, sentinel
	Uptime  time.Duration
	// UsedMemory and PeakMemory in bytes; MaxMemory 0 when unbounded.
	UsedMemory, PeakMemory, MaxMemory int64
	Policy                            string // maxmemory-policy
	// Denied is set when the user may not run INFO (ACL): nothing else
	// is known then.
	Denied bool
}

// ReadServers reads INFO server and memory of the server, or of every
// master of a Cluster.
func ReadServers(ctx context.Context, client redis.UniversalClient) ([]ServerInfo, error) {
	read := func(ctx context.Context, c redis.Cmdable, addr string) (ServerInfo, error) {
		info, err := c.Info(ctx, "server", "memory").Result()
		if err != nil {
			if IsNoPerm(err) {
				return ServerInfo{Addr: addr, Denied: true}, nil
			}
			return ServerInfo{}, err
		}
		return parseServerInfo(addr, info), nil
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		var (
			mu  sync.Mutex
			out []ServerInfo
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			s, err := read(ctx, node, node.Options().Addr)
			mu.Lock()
			out = append(out, s)
			mu.Unlock()
			return err
		})
		slices.SortFunc(out, func(a, b ServerInfo) int { return strings.Compare(a.Addr, b.Addr) })
		return out, err
	}
	s, err := read(ctx, client, "")
	if err != nil {
		return nil, err
	}
	return []ServerInfo{s}, nil
}

// parseServerInfo reads the fields ServerInfo holds from an INFO reply.
func parseServerInfo(addr, info string) ServerInfo {
	s := ServerInfo{Addr: addr, Name: "redis"}
	var redisVersion, valkeyVersion string
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "redis_version":
			redisVersion = v
		case "valkey_version":
			valkeyVersion = v
		case "server_name":
			s.Name = v
		case "redis_mode", "server_mode":
			s.Mode = v
		case "uptime_in_seconds":
			s.Uptime = time.Duration(parseCount(v)) * time.Second
		case "used_memory":
			s.UsedMemory = parseCount(v)
		case "used_memory_peak":
			s.PeakMemory = parseCount(v)
		case "maxmemory":
			s.MaxMemory = parseCount(v)
		case "maxmemory_policy":
			s.Policy = v
		}
	}
	s.Version = redisVersion
	if valkeyVersion != "" {
		s.Version = valkeyVersion
		if s.Name == "redis" {
			s.Name = "valkey"
		}
	}
	return s
}
