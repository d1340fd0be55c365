package execcodec

import (
	"sync"
	"sync/atomic"
)

// Poison is the byte Debug fills a released payload with.
const Poison = 0xA5

var debug struct {
	on atomic.Bool
	mu sync.Mutex
	// out is keyed by a payload's first byte: true while Unmarshal's
	// payload is handed out, false once a payload is released.
	out map[*byte]bool
}

// Debug turns checks on or off, process-wide, for tests: while on, Release
// fills a payload with Poison before it pools it, so that a read after
// Release sees Poison instead of the data, and panics on a payload
// released twice. It costs a memset of every payload.
func Debug(on bool) {
	debug.mu.Lock()
	defer debug.mu.Unlock()
	debug.on.Store(on)
	debug.out = nil
}

func debugGot(b []byte) {
	if debug.on.Load() {
		debugMark(b, true)
	}
}

func debugPut(b []byte) {
	if !debug.on.Load() {
		return
	}
	if out, known := debugMark(b, false); known && !out {
		panic("execcodec: payload released twice")
	}
	b = b[:cap(b)]
	for i := range b {
		b[i] = Poison
	}
}

// debugMark records whether payload b is handed out, and returns what was
// recorded before.
func debugMark(b []byte, out bool) (was, known bool) {
	debug.mu.Lock()
	defer debug.mu.Unlock()
	if debug.out == nil {
		debug.out = map[*byte]bool{}
	}
	key := &b[:1][0]
	was, known = debug.out[key]
	debug.out[key] = out
	return was, known
}
