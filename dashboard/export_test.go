package dashboard

import "time"

// SetDeadScan bounds a message search's scan (see handler.locate) to n
// entries per structure, until the returned function restores the bound.
func SetDeadScan(n int) (restore func()) {
	was := deadScan
	deadScan = n
	return func() { deadScan = was }
}

// SetSearchBounds makes a search page show at most page matches and call
// the Inspector at most calls times, until the returned function restores
// the bounds.
func SetSearchBounds(page, calls int) (restore func()) {
	wasPage, wasCalls := searchPage, searchCalls
	searchPage, searchCalls = page, calls
	return func() { searchPage, searchCalls = wasPage, wasCalls }
}

// SetSchedulerWait sets how long an action waits for a scheduler to hold
// the topic's lease before saying that none does, until the returned
// function restores it.
func SetSchedulerWait(d time.Duration) (restore func()) {
	was := schedulerWait
	schedulerWait = d
	return func() { schedulerWait = was }
}

// SetHeavy lets n pages that read messages run at once, each later one
// waiting at most wait for a slot, in the handlers made until the returned
// function restores the bounds.
func SetHeavy(n int, wait time.Duration) (restore func()) {
	was, wasWait := maxHeavy, heavyWait
	maxHeavy, heavyWait = n, wait
	return func() { maxHeavy, heavyWait = was, wasWait }
}

// SetMaxOffset sets the deepest offset of a topic's list of waiting
// messages until the returned function restores it.
func SetMaxOffset(n int) (restore func()) {
	was := maxOffset
	maxOffset = n
	return func() { maxOffset = was }
}

// FailDelay is the wait added to each failed login past the first few
// from one address.
func FailDelay() time.Duration { return failDelay }
