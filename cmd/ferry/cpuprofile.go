package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a CPU profile of this process to path until the
// returned stop: FERRY_CPUPROFILE, for the benchmarks over an emulated
// link. A profile that cannot start is said on stderr and skipped: it
// must not change what the command does.
func startCPUProfile(path string) (stop func()) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry: FERRY_CPUPROFILE: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "ferry: FERRY_CPUPROFILE: %v\n", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
