//go:build race

package redisdelay_test

// Watermill v1.5.1's TestReconnect appends to publishedMessages in one
// goroutine and reads it in another without synchronisation
// (pubsub/tests/test_pubsub.go:1086 and :1120), so the race detector fails it
// whatever the adapter does. It runs in the plain `go test ./...` instead.
const raceEnabled = true
