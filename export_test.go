package redisdelay

import "time"

// SetClock replaces a Publisher's host clock, so tests can run it on a host
// whose clock is off. (Managers and subscribers read no wall clock: due
// times are compared by Redis's clock only.)
func SetClock(p *Publisher, now func() time.Time) {
	p.now = now
}
