package frame

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// cpuClock measures the CPU time fn takes on its thread, so that Auto
// weighs a codec by the work it does, not by how long the goroutine
// waited for a core on a busy machine (where the relay and the receiver
// compete for the same CPUs, and wall time would make every codec look
// slow). CLOCK_THREAD_CPUTIME_ID counts in nanoseconds; getrusage's
// RUSAGE_THREAD is sampled at the scheduler tick, too coarse for a block.
// Falls back to wall time if the kernel says no.
func cpuClock(fn func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var a, b unix.Timespec
	t0 := time.Now()
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &a) != nil {
		fn()
		return time.Since(t0)
	}
	fn()
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &b) != nil {
		return time.Since(t0)
	}
	return time.Duration(b.Nano() - a.Nano())
}
