//go:build !race

package redisdelay_test

const raceEnabled = false
