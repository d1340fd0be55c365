// Package linkemu is a TCP proxy on 127.0.0.1 that makes loopback behave
// like a slower, longer link: per direction, a token bucket limits the
// bandwidth and a delay queue holds each chunk until its arrival time
// (when it finished crossing the bandwidth, plus the one-way delay), so
// that a full bandwidth-delay product is in flight, as on a real link,
// and not one chunk at a time.
//
// It is test support for ferry's benchmarks, not part of the ferry binary.
//
// Limitations: it shapes application bytes only. TCP's own segments,
// acknowledgements and congestion control run on loopback on either side
// of the proxy, so slow start and loss are not emulated; what is emulated
// is what a protocol's own flow control and request/response turns cost
// over the link's rate and round-trip time. It counts bytes per direction
// and the turns of each connection (see Stats).
package linkemu
