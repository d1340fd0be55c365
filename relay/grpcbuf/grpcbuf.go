// Package grpcbuf is a buffer pool for gRPC that does not zero what it hands
// out, and Field, which receives a bulk message's bytes into one of its
// buffers with a single copy.
//
// gRPC's default pool clears every buffer it returns, and rounds a 256 KiB
// message up to a 1 MiB buffer first: on the exec channel's bulk streams
// that clearing was a third of all CPU time (measured with BenchmarkExec in
// relay/gateway). Every buffer gRPC takes from a pool is written in full
// before it is read (a marshalled message, a frame read with ReadFull), so
// zeroing buys nothing there.
package grpcbuf

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

const (
	minShift = 8
	maxShift = 22 // 4 MiB: larger buffers are allocated and left to the GC
)

// Pool is a mem.BufferPool with one size class per power of two.
type Pool struct {
	classes [maxShift - minShift + 1]sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

func class(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minShift
}

// Get returns a buffer of length n whose contents are undefined.
func (p *Pool) Get(n int) *[]byte {
	c := class(n)
	if c >= len(p.classes) {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<(c+minShift))
	return &b
}

// Put returns a buffer obtained from Get.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minShift || c&(c-1) != 0 {
		return
	}
	k := bits.Len(uint(c)) - 1 - minShift
	if k < len(p.classes) {
		p.classes[k].Put(b)
	}
}

var install sync.Once

// Install makes a Pool gRPC's process-wide default. It is for mains (the
// ferry binary, benchmarks), not for libraries, which must not change a
// caller's gRPC settings.
func Install() {
	install.Do(func() { experimental.SetDefaultBufferPool(&Pool{}) })
}
