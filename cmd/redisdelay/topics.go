// The commands on topics: topics and stats.

package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	redisdelay "github.com/redisdelay/watermill-redisdelay"
)

// warnInvalidTopics reports registry entries that are not topic names,
// which the listing skips.
func (e *env) warnInvalidTopics() error {
	bad, err := e.insp.InvalidTopics(e.ctx)
	if err != nil || len(bad) == 0 {
		return err
	}
	quoted := make([]string, len(bad))
	for i, b := range bad {
		quoted[i] = strconv.Quote(b)
	}
	slices.Sort(quoted)
	fmt.Fprintf(e.stderr, "redisdelay: skipped %d entr%s of the topic registry %s that %s not a valid topic name: %s (remove with SREM)\n",
		len(bad), map[bool]string{true: "y", false: "ies"}[len(bad) == 1], strconv.Quote(e.opts.prefix+":topics"),
		map[bool]string{true: "is", false: "are"}[len(bad) == 1], strings.Join(quoted, ", "))
	return nil
}

func cmdTopics(e *env, _ []string) error {
	topics, err := e.insp.Topics(e.ctx)
	if err != nil {
		return err
	}
	if err := e.warnInvalidTopics(); err != nil {
		return err
	}
	slices.Sort(topics)
	if e.opts.json {
		return writeJSON(e.stdout, nonNil(topics))
	}
	if len(topics) == 0 {
		fmt.Fprintf(e.stdout, "no topics under prefix %q\n", e.opts.prefix)
		return nil
	}
	for _, t := range topics {
		fmt.Fprintln(e.stdout, printable(t))
	}
	return nil
}

// knownTopics fails when a topic is not registered under the prefix: a
// typo would otherwise show empty counts, or requeue and purge nothing.
func (e *env) knownTopics(topics ...string) error {
	all, err := e.insp.Topics(e.ctx)
	if err != nil {
		return err
	}
	for _, t := range topics {
		if !slices.Contains(all, t) {
			return fmt.Errorf("redisdelay: topic %q is not known under prefix %q (no Publisher or Subscriber has used it); see \"redisdelay topics\"", t, e.opts.prefix)
		}
	}
	return nil
}

// knownGroup fails when the topic or the group is unknown, and returns the
// topic's stats.
func (e *env) knownGroup(topic, group string) (redisdelay.TopicStats, error) {
	if err := e.knownTopics(topic); err != nil {
		return redisdelay.TopicStats{}, err
	}
	st, err := e.insp.Stats(e.ctx, topic)
	if err != nil {
		return st, err
	}
	var names []string
	for _, g := range st.Groups {
		if g.Group == group {
			return st, nil
		}
		names = append(names, g.Group)
	}
	known := "it has none"
	if len(names) > 0 {
		slices.Sort(names)
		known = "its groups: " + strings.Join(names, ", ")
	}
	return st, fmt.Errorf("redisdelay: topic %q has no consumer group %q (%s)", topic, group, known)
}

func groupStats(st redisdelay.TopicStats, group string) redisdelay.GroupStats {
	for _, g := range st.Groups {
		if g.Group == group {
			return g
		}
	}
	return redisdelay.GroupStats{Group: group}
}

func cmdStats(e *env, topics []string) error {
	if len(topics) == 0 {
		var err error
		if topics, err = e.insp.Topics(e.ctx); err != nil {
			return err
		}
		if err := e.warnInvalidTopics(); err != nil {
			return err
		}
		slices.Sort(topics)
	} else if err := e.knownTopics(topics...); err != nil {
		return err
	}
	all := make([]topicStatus, 0, len(topics))
	for _, t := range topics {
		st, err := e.insp.Stats(e.ctx, t)
		if err != nil {
			return err
		}
		slices.SortFunc(st.Groups, func(a, b redisdelay.GroupStats) int { return strings.Compare(a.Group, b.Group) })
		ts := topicStatus{TopicStats: st}
		if st.Waiting > 0 {
			if ts.overdue, err = e.insp.Overdue(e.ctx, t); err != nil {
				return err
			}
		}
		all = append(all, ts)
	}
	defer e.warnStalled(all)
	if e.opts.json {
		out := make([]statsJSON, 0, len(all))
		for _, st := range all {
			out = append(out, toStatsJSON(st))
		}
		return writeJSON(e.stdout, out)
	}
	if len(all) == 0 {
		fmt.Fprintf(e.stdout, "no topics under prefix %q\n", e.opts.prefix)
		return nil
	}
	writeStatsTable(e.stdout, all)
	return nil
}
