// Package redisdelay is a Watermill Pub/Sub on Redis in which any message can
// be delayed: published now, delivered at its due time.
//
// Delays come from Watermill's own metadata, so existing code needs no
// changes: delay.Message(msg, delay.For(d)), delay.Until(t),
// delay.NewPublisher and middleware.DelayOnError all work, and a delay put
// in a message's context with delay.WithContext (a CQRS CommandBus or
// EventBus, a Router handler's produced messages) is applied as
// delay.NewPublisher applies it, without wrapping the Publisher in it.
//
// # Delay rule
//
// Watermill's delay.Message writes a duration (_watermill_delayed_for) and
// the instant it ends, truncated to whole seconds (_watermill_delayed_until).
// A message is due at the earlier of: the duration after the moment Redis
// stores it, by Redis's clock, in milliseconds rounded up; and the end of
// its until second, by the publishing host's clock (the until instant
// itself when it has a fraction of a second, or comes without a duration).
// So a fresh message waits its duration to the millisecond, and one
// published late (an outbox forwarder behind) is due by its until second:
// never early, at most a second late. For an instant to the millisecond,
// use SetDueAt: delay.Until's duration, counted from its call, makes its
// message late by the time until Publish. No delay, or a due time in the past,
// is delivered at once. A value that does not parse, or a delay beyond
// PublisherConfig.MaxDelay or 100 years, makes Publish fail with
// ErrInvalidDelay, storing nothing.
//
// A delivered message carries in its until key, with milliseconds, an
// instant already reached and not before it was due, so a received message published again (forwarded,
// fanned in, requeued, poisoned) is due at once unless the handler set a
// new delay; and it does not hold its BusinessKey (see AttemptKey).
//
// # Data model
//
// Per topic: a waiting sorted set (score = due time) with the message bodies
// in a hash beside it, and a ready stream read through consumer groups. Per
// consumer group: a retry sorted set fed by Nack and a redelivery stream. The
// scheduler (a Manager, or the one each Subscriber runs by default) moves due
// messages with atomic Lua scripts, sleeping until the next due time; one
// scheduler per topic works at a time, holding a lease in Redis, and another
// takes over when it stops. All keys of a topic share the hash tag {topic},
// so Redis Cluster works.
//
// # Partitions and ordering
//
// A topic can be split into partitions (PublisherConfig.Partitions), each
// with keys of its own under its own hash tag, so a hot topic spreads over
// a cluster's nodes and its scheduling over Managers. The PartitionKey
// metadata places related messages in one partition. With
// SubscriberConfig.Ordered, one consumer of a group at a time owns each
// partition, so messages with the same PartitionKey are handled one at a
// time, in due order, and a Nack is retried before later messages.
//
// # Delivery
//
// At least once. Each group receives every message; subscribers of a group
// compete. A Nack redelivers to the same group only, after the delay the
// handler set (middleware.DelayOnError) or SubscriberConfig.RetryDelay
// (by default DefaultRetryDelay: 1s doubling to 10 minutes, with jitter).
// The attempt number is in the AttemptKey metadata. Snooze puts a message
// back for a while without spending an attempt; a message past its
// ExpiresAtKey deadline is never handed to a handler (dead letters, or
// dropped: SubscriberConfig.ExpiredMessages).
//
// A subscription hands out the next message as soon as the previous one is
// acked: acknowledgements are written to Redis in the background, many per
// round trip, within 5 ms (50 ms for a subscription waiting for new
// messages, whose next read carries them) and a round trip of the Ack
// (retried while Redis is unreachable; Close writes them before
// returning). A process that dies
// in between leaves those messages pending: they are delivered again, never
// lost. Nack is written before the next message is handed out.
//
// A message whose consumer died is reclaimed after
// SubscriberConfig.VisibilityTimeout as the next attempt; live subscriptions
// renew the lease of what they hold, so long handlers keep their message.
// After MaxAttempts, when it cannot be decoded, or when a Nack asks for a
// delay beyond 100 years, a message goes to its group's dead letters, where an Inspector lists, requeues and deletes it.
//
// # Operating it
//
// A BusinessKey metadata value is unique among a topic's waiting messages
// (reject, keep the first, or replace a duplicate, moving its due time or
// keeping it; recall with CancelKey); Reschedule and RescheduleKey move a
// waiting message's due time in place;
// MaxWaiting and MaxReady bound a topic (ErrQueueFull); PriorityKey makes a
// message overtake a backlog; the prommetrics subpackage exports
// Prometheus metrics (the core links none); Inspector.Health reports stuck
// groups and a scheduler behind; cmd/redisdelay does the Inspector's work
// from a shell. Publisher.Schedule publishes a message at every tick of a
// cron spec or interval, once per tick however many processes run (see
// Schedule).
package redisdelay
