package testkit

import (
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// CaptureLogger records what is logged through it, like watermill's
// CaptureLoggerAdapter, and may be read while components still log:
// watermill's Captured hands out its map, which the next line logged
// writes to (a data race under -race).
type CaptureLogger struct {
	mu     *sync.Mutex
	lines  *[]watermill.CapturedMessage
	fields watermill.LogFields
}

// NewCaptureLogger returns an empty CaptureLogger.
func NewCaptureLogger() *CaptureLogger {
	return &CaptureLogger{mu: &sync.Mutex{}, lines: &[]watermill.CapturedMessage{}}
}

func (c *CaptureLogger) capture(level watermill.LogLevel, msg string, err error, fields watermill.LogFields) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.lines = append(*c.lines, watermill.CapturedMessage{Level: level, Time: time.Now(), Fields: c.fields.Add(fields), Msg: msg, Err: err})
}

// Error records an error line.
func (c *CaptureLogger) Error(msg string, err error, fields watermill.LogFields) {
	c.capture(watermill.ErrorLogLevel, msg, err, fields)
}

// Info records an info line.
func (c *CaptureLogger) Info(msg string, fields watermill.LogFields) {
	c.capture(watermill.InfoLogLevel, msg, nil, fields)
}

// Debug records a debug line.
func (c *CaptureLogger) Debug(msg string, fields watermill.LogFields) {
	c.capture(watermill.DebugLogLevel, msg, nil, fields)
}

// Trace records a trace line.
func (c *CaptureLogger) Trace(msg string, fields watermill.LogFields) {
	c.capture(watermill.TraceLogLevel, msg, nil, fields)
}

// With returns a logger adding fields to its lines, recording into the
// same place.
func (c *CaptureLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return &CaptureLogger{mu: c.mu, lines: c.lines, fields: c.fields.Copy().Add(fields)}
}

// Captured returns a copy of the lines logged at level so far.
func (c *CaptureLogger) Captured(level watermill.LogLevel) []watermill.CapturedMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []watermill.CapturedMessage
	for _, l := range *c.lines {
		if l.Level == level {
			out = append(out, l)
		}
	}
	return out
}

// Has tells whether a line equal to msg (see CapturedMessage.ContentEquals)
// was logged.
func (c *CaptureLogger) Has(msg watermill.CapturedMessage) bool {
	for _, l := range c.Captured(msg.Level) {
		if l.ContentEquals(msg) {
			return true
		}
	}
	return false
}
