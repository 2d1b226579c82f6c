package redisdelay

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts are the specification of the data model: each opens with
// the keys and arguments it takes and what it returns.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// loadScript returns an embedded script, with the helper functions of
// lib.lua in front when it uses them.
func loadScript(name string, withLib bool) *redis.Script {
	src := readScript(name)
	if withLib {
		src = readScript("lib") + src
	}
	return redis.NewScript(src)
}

func readScript(name string) string {
	src, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic("redisdelay: missing embedded script " + name)
	}
	return string(src)
}

var (
	publishScript   = loadScript("publish", false)
	promoteScript   = loadScript("promote", false)
	unleaseScript   = loadScript("unlease", false)
	nackScript      = loadScript("nack", true)
	ackScript       = loadScript("ack", false)
	releaseScript   = loadScript("release", true)
	reclaimScript   = loadScript("reclaim", true)
	extendScript    = loadScript("extend", false)
	requeueScript   = loadScript("requeue", false)
	cancelScript    = loadScript("cancel", false)
	initScript      = loadScript("init", false)
	trimScript      = loadScript("trim", false)
	dropGroupScript = loadScript("dropgroup", false)
)

// keys is the key layout, in one place. Every key of a topic carries the
// hash tag {topic}, so each script touches a single Redis Cluster slot.
//
//	<prefix>:{<topic>}:waiting          zset    UUID -> due score
//	<prefix>:{<topic>}:bodies           hash    UUID -> encoded message
//	<prefix>:{<topic>}:seq              string  FIFO tie-break counter
//	<prefix>:{<topic>}:stream           stream  ready messages
//	<prefix>:{<topic>}:groups           set     consumer groups
//	<prefix>:{<topic>}:g:<group>:retry  zset    retry member -> due score
//	<prefix>:{<topic>}:g:<group>:rbody  hash    retry member -> encoded message
//	<prefix>:{<topic>}:g:<group>:redo   stream  redeliveries for the group
//	<prefix>:{<topic>}:g:<group>:dead   stream  dead letters (fields m, a, r)
//	<prefix>:{<topic>}:g:<group>:meta   hash    group policy and counters
//	<prefix>:{<topic>}:lease            string  owner of the topic's scheduling (expires)
//	<prefix>:{<topic>}:wake             pub/sub channel that wakes schedulers
//	<prefix>:topics                     set     known topics (for Managers)
type keys struct {
	prefix string
}

func (k keys) tag(topic string) string { return k.prefix + ":{" + topic + "}" }

func (k keys) waiting(topic string) string { return k.tag(topic) + ":waiting" }
func (k keys) bodies(topic string) string  { return k.tag(topic) + ":bodies" }
func (k keys) seq(topic string) string     { return k.tag(topic) + ":seq" }
func (k keys) stream(topic string) string  { return k.tag(topic) + ":stream" }
func (k keys) groups(topic string) string  { return k.tag(topic) + ":groups" }
func (k keys) wake(topic string) string    { return k.tag(topic) + ":wake" }
func (k keys) lease(topic string) string   { return k.tag(topic) + ":lease" }
func (k keys) topics() string              { return k.prefix + ":topics" }

func (k keys) group(topic, group string) string { return k.tag(topic) + ":g:" + group }
func (k keys) retry(topic, group string) string { return k.group(topic, group) + ":retry" }
func (k keys) retryBodies(topic, group string) string {
	return k.group(topic, group) + ":rbody"
}
func (k keys) redelivery(topic, group string) string { return k.group(topic, group) + ":redo" }
func (k keys) dead(topic, group string) string       { return k.group(topic, group) + ":dead" }
func (k keys) meta(topic, group string) string       { return k.group(topic, group) + ":meta" }

// wakePattern matches the wake channel of every topic.
func (k keys) wakePattern() string { return k.prefix + ":{*}:wake" }

// topicOfWake returns the topic of a wake channel name.
func (k keys) topicOfWake(channel string) (string, bool) {
	rest, ok := strings.CutPrefix(channel, k.prefix+":{")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "}:wake")
}
