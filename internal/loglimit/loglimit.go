// Package loglimit holds back repeats of the same error in logs: while
// Redis is down every loop fails in the same way.
package loglimit

import (
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// errorLogEvery is how often one kind of error is logged again while it
// repeats: while Redis is down every loop of every topic fails in the same
// way, and a line per failure (about 1.4/s per topic and component) buries
// the logs.
const errorLogEvery = 15 * time.Second

// Limiter lets one line per kind of error through every errorLogEvery,
// whatever the topic, and counts the repeats it holds back. A Subscriber
// and a Manager (with its scheduler) have one each.
type Limiter struct {
	mu    sync.Mutex
	every time.Duration
	kinds map[string]*logKind
}

type logKind struct {
	last       time.Time
	suppressed int
}

// New returns a Limiter letting one line per kind through every
// errorLogEvery.
func New() *Limiter {
	return &Limiter{every: errorLogEvery, kinds: map[string]*logKind{}}
}

// Errorf logs msg with err and fields unless the same message with the same
// kind of error was logged less than every ago; a line that follows held
// back repeats says how many there were.
func (l *Limiter) Errorf(logger watermill.LoggerAdapter, msg string, err error, fields watermill.LogFields) {
	key := msg + "\x00" + errorKind(err)
	now := time.Now()
	l.mu.Lock()
	k := l.kinds[key]
	if k == nil {
		if len(l.kinds) >= 1000 { // kinds are few; stay bounded all the same
			clear(l.kinds)
		}
		k = &logKind{}
		l.kinds[key] = k
	} else if now.Sub(k.last) < l.every {
		k.suppressed++
		l.mu.Unlock()
		return
	}
	k.last = now
	suppressed := k.suppressed
	k.suppressed = 0
	l.mu.Unlock()
	if suppressed > 0 {
		fields = fields.Add(watermill.LogFields{"repeats_not_logged": suppressed, "repeats_over": l.every.String()})
	}
	logger.Error(msg, err, fields)
}

// errorKind is an error's text without its numbers (ports of connections,
// counts), so the same failure on different connections is one kind.
func errorKind(err error) string {
	if err == nil {
		return ""
	}
	var b strings.Builder
	digit := false
	for _, r := range err.Error() {
		isDigit := r >= '0' && r <= '9'
		if !isDigit {
			b.WriteRune(r)
		} else if !digit {
			b.WriteByte('#')
		}
		digit = isDigit
	}
	return b.String()
}
