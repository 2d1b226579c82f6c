package redisdelay

import (
	"fmt"
)

// bound is a capacity limit of a topic as it applies to one partition.
type bound struct {
	perPart int    // ceil(limit / partitions); 0: none
	limit   int    // the configured value
	name    string // the setting: MaxWaiting or MaxReady
	topic   string // the topic, when the per-topic setting applies
}

// field names the setting in errors.
func (b bound) field() string {
	if b.topic != "" {
		return fmt.Sprintf("PublisherConfig.Topic%s[%q]", b.name, b.topic)
	}
	return "PublisherConfig." + b.name
}

// validateLimit checks one capacity limit of a PublisherConfig.
func validateLimit(name string, def int, perTopic map[string]int) error {
	if def < 0 {
		return fmt.Errorf("redisdelay: PublisherConfig.%s is %d: use 0 (no bound) or more", name, def)
	}
	for topic, n := range perTopic {
		if pr := nameProblem("PublisherConfig.Topic"+name+" key", topic); pr != "" {
			return fmt.Errorf("%w: %s", ErrInvalidTopic, pr)
		}
		if n < 0 {
			return fmt.Errorf("redisdelay: PublisherConfig.Topic%s[%q] is %d: use 0 (no bound) or more", name, topic, n)
		}
	}
	return nil
}

// topicBound is the limit name (MaxWaiting, MaxReady) of topic over parts
// partitions: the per-topic value when there is one (0 included), else
// the default.
func topicBound(name string, def int, perTopic map[string]int, topic string, parts int) bound {
	b := bound{limit: def, name: name}
	if n, ok := perTopic[topic]; ok {
		b = bound{limit: n, name: name, topic: topic}
	}
	b.perPart = (b.limit + parts - 1) / parts
	return b
}

// fullError is the error of a call that would take its partition over a bound.
func fullError(c *pubCall, which string, count, added int64) error {
	b, what := c.maxWaiting, "waiting messages (delayed, not yet due)"
	if which == "ready" {
		b, what = c.maxReady, "ready stream entries (due, not yet trimmed)"
	}
	limit := fmt.Sprintf("%s is %d", b.field(), b.limit)
	if c.parts > 1 {
		limit = fmt.Sprintf("%d per partition: %s over %d partitions", b.perPart, limit, c.parts)
	}
	return fmt.Errorf("%w: %s holds %d %s and the call adds %d, over its bound (%s): nothing of the call is stored",
		ErrQueueFull, c.where(), count, what, added, limit)
}
