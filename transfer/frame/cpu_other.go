//go:build !linux

package frame

import "time"

// cpuClock measures fn's wall time where per-thread CPU time is not at
// hand.
func cpuClock(fn func()) time.Duration {
	t0 := time.Now()
	fn()
	return time.Since(t0)
}
