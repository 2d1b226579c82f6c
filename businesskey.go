package redisdelay

import (
	"fmt"
	"strings"

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

// businessKeyPolicies is the one list of the policies: validation, the
// error texts and the letter publish.lua matches (the first of its business
// key argument) all read it. The first is the default.
var businessKeyPolicies = []struct {
	policy BusinessKeyPolicy
	letter string
}{
	{RejectDuplicateKey, "r"},
	{KeepFirst, "k"},
	{ReplaceWaiting, "x"},
	{ReplaceKeepDue, "d"},
	{KeepLastIfActive, "l"},
}

// policyLetter is how publish.lua names a policy ("" is the default).
func policyLetter(p BusinessKeyPolicy) (string, bool) {
	if p == "" {
		p = businessKeyPolicies[0].policy
	}
	for _, bp := range businessKeyPolicies {
		if bp.policy == p {
			return bp.letter, true
		}
	}
	return "", false
}

// policyChoices lists the policies for an error message, e.g. `"reject",
// "keep-first" or "replace"`, the first marked as the default if asked.
func policyChoices(markDefault bool) string {
	var b strings.Builder
	for i, bp := range businessKeyPolicies {
		switch {
		case i == len(businessKeyPolicies)-1:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", bp.policy)
		if i == 0 && markDefault {
			b.WriteString(" (the default)")
		}
	}
	return b.String()
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
		return "", "", fmt.Errorf("metadata %s=%q is not a business key policy: use %s",
			BusinessKeyPolicyKey, policy, policyChoices(false))
	}
	return key, letter + key, nil
}

// validatePolicies checks the business key policies of a PublisherConfig.
func validatePolicies(def BusinessKeyPolicy, perTopic map[string]BusinessKeyPolicy) error {
	if _, ok := policyLetter(def); !ok {
		return fmt.Errorf("redisdelay: PublisherConfig.BusinessKeyPolicy is %q: use %s", def, policyChoices(true))
	}
	for topic, p := range perTopic {
		if pr := nameProblem("PublisherConfig.TopicBusinessKeyPolicy key", topic); pr != "" {
			return fmt.Errorf("%w: %s", ErrInvalidTopic, pr)
		}
		if _, ok := policyLetter(p); !ok {
			return fmt.Errorf("redisdelay: PublisherConfig.TopicBusinessKeyPolicy[%q] is %q: use %s", topic, p, policyChoices(false))
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
