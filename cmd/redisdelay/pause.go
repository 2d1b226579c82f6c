// The commands on a consumer group's flow: pause and resume.

package main

import (
	"fmt"
	"strings"
)

func cmdPause(e *env, pos []string) error {
	topic, group := pos[0], pos[1]
	// As Inspector.Pause, a group may be paused before its first
	// subscriber starts (docs/flow-control.md), but only when asked: a
	// typo would otherwise pause nothing that runs, and say done.
	if _, err := e.knownGroup(topic, group); err != nil {
		if !e.flags.create {
			return notFoundf("%v: give --create to pause it before its first subscriber starts", err)
		}
		fmt.Fprintf(e.stderr, "redisdelay: note: %s; it is paused all the same (--create), before its first subscriber starts\n",
			strings.TrimPrefix(err.Error(), "redisdelay: "))
	}
	was, err := e.insp.Paused(e.ctx, topic, group)
	if err != nil {
		return err
	}
	if err := e.insp.Pause(e.ctx, topic, group); err != nil {
		return err
	}
	if e.opts.json {
		return writeJSON(e.stdout, pauseJSON{Topic: topic, Group: group, Paused: true, WasPaused: was})
	}
	if was {
		fmt.Fprintf(e.stdout, "group %q of topic %q was already paused\n", group, topic)
		return nil
	}
	fmt.Fprintf(e.stdout, "paused group %q of topic %q: its messages accumulate until \"redisdelay resume %s %s\"\n", group, topic, topic, group)
	return nil
}

func cmdResume(e *env, pos []string) error {
	topic, group := pos[0], pos[1]
	if err := e.knownTopics(topic); err != nil {
		return err
	}
	was, err := e.insp.Resume(e.ctx, topic, group)
	if err != nil {
		return err
	}
	if e.opts.json {
		return writeJSON(e.stdout, pauseJSON{Topic: topic, Group: group, Paused: false, WasPaused: was})
	}
	if !was {
		fmt.Fprintf(e.stdout, "group %q of topic %q was not paused\n", group, topic)
		return nil
	}
	fmt.Fprintf(e.stdout, "resumed group %q of topic %q\n", group, topic)
	return nil
}
