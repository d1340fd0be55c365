// Package waitfor is what tests wait on: bounded polls, each failing the
// test with what did not happen.
package waitfor

import (
	"os"
	"testing"
	"time"
)

// File waits, up to within, for p to exist.
func File(t testing.TB, p string, within time.Duration) {
	t.Helper()
	const step = 50 * time.Millisecond
	for i := time.Duration(0); i <= within/step; i++ {
		if _, err := os.Stat(p); err == nil {
			return
		}
		time.Sleep(step)
	}
	t.Fatalf("%s did not appear within %s", p, within)
}
