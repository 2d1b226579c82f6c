package redisdelay

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
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
	// own body and due time (an immediate one is sent at once): each new
	// message moves the due time, so a burst is delivered once, after the
	// last message's delay (debounce).
	ReplaceWaiting BusinessKeyPolicy = "replace"
	// ReplaceKeepDue removes the holder and stores the new message with its
	// own UUID and body but the holder's due time (an immediate one waits
	// for it too): a burst is delivered once, with the last body, when the
	// first message was due (throttle). Without a holder the message keeps
	// its own due time.
	ReplaceKeepDue BusinessKeyPolicy = "replace-keep-due"
	// KeepLastIfActive debounces across deliveries: while waiting it acts
	// as ReplaceWaiting, and a message that falls due while the previous
	// one of its key is being handled, in a consumer group, becomes that
	// group's one follow-up: it is delivered after the running one is
	// settled (acked, or out of attempts), carrying the latest body of
	// those published meanwhile. Per key and consumer group, at most one
	// message is handled at a time and one waits behind it; none is lost.
	// The business key is the message's group (see GroupKey), with a
	// concurrency of 1 and room for one queued message.
	KeepLastIfActive BusinessKeyPolicy = "keep-last-if-active"
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
	case ReplaceKeepDue:
		return "d", true
	case KeepLastIfActive:
		return "l", true
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
		return "", "", fmt.Errorf("metadata %s=%q is not a business key policy: use %q, %q, %q, %q or %q",
			BusinessKeyPolicyKey, policy, RejectDuplicateKey, KeepFirst, ReplaceWaiting, ReplaceKeepDue, KeepLastIfActive)
	}
	return key, letter + key, nil
}

// validatePolicies checks the business key policies of a PublisherConfig.
func validatePolicies(def BusinessKeyPolicy, perTopic map[string]BusinessKeyPolicy) error {
	if _, ok := policyLetter(def); !ok {
		return fmt.Errorf("redisdelay: PublisherConfig.BusinessKeyPolicy is %q: use %q (the default), %q, %q, %q or %q",
			def, RejectDuplicateKey, KeepFirst, ReplaceWaiting, ReplaceKeepDue, KeepLastIfActive)
	}
	for topic, p := range perTopic {
		if pr := nameProblem("PublisherConfig.TopicBusinessKeyPolicy key", topic); pr != "" {
			return fmt.Errorf("%w: %s", ErrInvalidTopic, pr)
		}
		if _, ok := policyLetter(p); !ok {
			return fmt.Errorf("redisdelay: PublisherConfig.TopicBusinessKeyPolicy[%q] is %q: use %q, %q, %q, %q or %q",
				topic, p, RejectDuplicateKey, KeepFirst, ReplaceWaiting, ReplaceKeepDue, KeepLastIfActive)
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
