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
	if !debug.on.Load() {
		return
	}
	debug.mu.Lock()
	defer debug.mu.Unlock()
	if debug.out == nil {
		debug.out = map[*byte]bool{}
	}
	debug.out[&b[:1][0]] = true
}

func debugPut(b []byte) {
	if !debug.on.Load() {
		return
	}
	debug.mu.Lock()
	defer debug.mu.Unlock()
	if debug.out == nil {
		debug.out = map[*byte]bool{}
	}
	key := &b[:1][0]
	if out, known := debug.out[key]; known && !out {
		panic("execcodec: payload released twice")
	}
	debug.out[key] = false
	b = b[:cap(b)]
	for i := range b {
		b[i] = Poison
	}
}
