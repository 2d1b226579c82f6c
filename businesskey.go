package redisdelay

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// BusinessKeyPolicy is what Publish does with a message whose BusinessKey
// is held by another waiting message of its topic (the holder).
type BusinessKeyPolicy string

const (
	// RejectDuplicateKey (the default) fails the Publish call with
	// ErrDuplicateBusinessKey, storing nothing of it.
	RejectDuplicateKey BusinessKeyPolicy = "reject"
	// KeepFirst keeps the holder, its body and due time, and drops the new
	// message: Publish returns nil.
	KeepFirst BusinessKeyPolicy = "keep-first"
	// ReplaceWaiting removes the holder and stores the new message with its
	// own body and due time (an immediate one is sent at once).
	ReplaceWaiting BusinessKeyPolicy = "replace"
)

var (
	// ErrDuplicateBusinessKey is wrapped by Publish errors when a message's
	// BusinessKey is held by another waiting message of the topic under the
	// RejectDuplicateKey policy, or when two messages of one call share a
	// business key. Nothing of that call is stored.
	ErrDuplicateBusinessKey = errors.New("redisdelay: duplicate business key")
	// ErrQueueFull is wrapped by Publish errors when a call would take a
	// partition of the topic over PublisherConfig.MaxWaiting or MaxReady.
	// Nothing of that call is stored.
	ErrQueueFull = errors.New("redisdelay: queue full")
)

// policyLetter is how publish.lua names a policy.
func policyLetter(p BusinessKeyPolicy) (string, bool) {
	switch p {
	case "", RejectDuplicateKey:
		return "r", true
	case KeepFirst:
		return "k", true
	case ReplaceWaiting:
		return "x", true
	}
	return "", false
}

// businessKeyArg is the publish script's business key argument for msg:
// "" without a key, else the policy's letter and the key.
func businessKeyArg(msg *message.Message, topicPolicy BusinessKeyPolicy) (key, arg string, err error) {
	key = msg.Metadata.Get(BusinessKey)
	if key == "" || msg.Metadata.Get(AttemptKey) != "" {
		// A received message published again (forwarded, requeued,
		// poisoned) is a copy: holding the key would refuse the next
		// message with it, which is the one that matters.
		return "", "", nil
	}
	policy := topicPolicy
	if v := msg.Metadata.Get(BusinessKeyPolicyKey); v != "" {
		policy = BusinessKeyPolicy(v)
	}
	letter, ok := policyLetter(policy)
	if !ok {
		return "", "", fmt.Errorf("metadata %s=%q is not a business key policy: use %q, %q or %q",
			BusinessKeyPolicyKey, policy, RejectDuplicateKey, KeepFirst, ReplaceWaiting)
	}
	return key, letter + key, nil
}

// validatePolicies checks the business key policies of a PublisherConfig.
func validatePolicies(def BusinessKeyPolicy, perTopic map[string]BusinessKeyPolicy) error {
	if _, ok := policyLetter(def); !ok {
		return fmt.Errorf("redisdelay: PublisherConfig.BusinessKeyPolicy is %q: use %q (the default), %q or %q",
			def, RejectDuplicateKey, KeepFirst, ReplaceWaiting)
	}
	for topic, p := range perTopic {
		if pr := nameProblem("PublisherConfig.TopicBusinessKeyPolicy key", topic); pr != "" {
			return fmt.Errorf("%w: %s", ErrInvalidTopic, pr)
		}
		if _, ok := policyLetter(p); !ok {
			return fmt.Errorf("redisdelay: PublisherConfig.TopicBusinessKeyPolicy[%q] is %q: use %q, %q or %q",
				topic, p, RejectDuplicateKey, KeepFirst, ReplaceWaiting)
		}
	}
	return nil
}

// topicPolicy is the configured business key policy of a topic.
func topicPolicy(def BusinessKeyPolicy, perTopic map[string]BusinessKeyPolicy, topic string) BusinessKeyPolicy {
	if p, ok := perTopic[topic]; ok && p != "" {
		return p
	}
	return def
}

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

// CancelKey removes the waiting message holding businessKey in topic, so it
// is never delivered, and frees the key. It reports whether a message was
// waiting with that key; false means none holds it (never published,
// cancelled, or already due and on its way to subscribers). In a topic of
// several partitions it looks in the partition of the key first, then in
// the others (for a message published with a PartitionKey).
func (p *Publisher) CancelKey(ctx context.Context, topic, businessKey string) (bool, error) {
	if p.closed.Load() {
		return false, ErrClosed
	}
	parts := partitionCount(p.config.Partitions, p.config.TopicPartitions, topic)
	return recall(ctx, p.config.Client, p.keys, topic, parts, "key", businessKey)
}

// Cancel is Publisher.Cancel, for the partition count stored in Redis.
func (i *Inspector) Cancel(ctx context.Context, topic, messageUUID string) (bool, error) {
	return i.recall(ctx, topic, "uuid", messageUUID)
}

// CancelKey is Publisher.CancelKey, for the partition count stored in Redis.
func (i *Inspector) CancelKey(ctx context.Context, topic, businessKey string) (bool, error) {
	return i.recall(ctx, topic, "key", businessKey)
}

func (i *Inspector) recall(ctx context.Context, topic, by, value string) (bool, error) {
	if err := validateTopic(topic); err != nil {
		return false, err
	}
	parts, err := storedPartitions(ctx, i.client, i.keys, topic)
	if err != nil {
		return false, wrap(err, "cancel %s in topic %q", recallWhat(by, value), topic)
	}
	return recall(ctx, i.client, i.keys, topic, parts[0], by, value)
}

// recall removes a waiting message of topic found by its UUID (by "uuid")
// or business key (by "key"), looking first in the partition the value
// hashes to (where a message is unless a PartitionKey placed it), then in
// the others.
func recall(ctx context.Context, client redis.UniversalClient, k keys, topic string, parts int, by, value string) (bool, error) {
	if err := validateTopic(topic); err != nil {
		return false, err
	}
	if value == "" {
		what := map[string]string{"uuid": "message UUID", "key": "business key"}[by]
		return false, fmt.Errorf("%w: cancel in topic %q: the %s is empty", ErrInvalidMessage, topic, what)
	}
	home := partitionOf(value, parts)
	for i := range parts {
		sh := k.shard(topic, (home+i)%parts)
		n, err := cancelScript.Run(ctx, client, []string{sh.waiting(), sh.bodies(), sh.bkeys(), sh.bkeyOf(), sh.prio()}, by, value).Int()
		if err != nil {
			return false, wrap(err, "cancel %s in topic %q", recallWhat(by, value), topic)
		}
		if n == 1 {
			return true, nil
		}
	}
	return false, nil
}

// recallWhat names what a cancel looks for, in errors.
func recallWhat(by, value string) string {
	if by == "key" {
		return fmt.Sprintf("business key %q", value)
	}
	return fmt.Sprintf("message %q", value)
}
