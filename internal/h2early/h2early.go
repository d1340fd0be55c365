// Package h2early lets a grpc-go client send its first call without
// waiting a round trip for the server's HTTP/2 SETTINGS.
//
// grpc-go's client (newHTTP2Client) sends no call until the server's
// SETTINGS have come. HTTP/2 does not ask a client to wait (RFC 9113
// section 3.4: it may send frames right after its preface, under the
// protocol's defaults), and other clients, the h2 crate under OpenShell's
// own CLI among them, do not. A connection Wrap returns hands grpc an
// empty SETTINGS frame first, which is what the defaults are, and drops
// the one SETTINGS ACK grpc answers it with: the server never sent those
// settings, and a server may end a connection with PROTOCOL_ERROR on an
// ACK of settings it has not sent (hyper's h2 does). The server's own
// SETTINGS follow on the wire, and grpc applies and acknowledges them as
// any later SETTINGS.
//
// ferry's gateway connection uses it under TLS, and the host's end of an
// agent connection under the agent's hello.
package h2early

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
)

const (
	h2PrefaceLen   = 24 // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	h2HeaderLen    = 9
	h2TypeSettings = 0x4
	h2FlagAck      = 0x1
)

// earlySettings is an empty SETTINGS frame on stream 0.
var earlySettings = [h2HeaderLen]byte{3: h2TypeSettings}

// earlyConn is the connection Wrap returns.
type earlyConn struct {
	net.Conn

	read atomic.Bool // earlySettings handed out
	rmu  sync.Mutex
	rest []byte // of earlySettings, not yet read

	sent atomic.Bool // the ACK of earlySettings dropped: writes pass
	wmu  sync.Mutex
	pre  int // bytes of the client preface still to pass
	hdr  [h2HeaderLen]byte
	nhdr int    // bytes of a frame header held in hdr
	body uint32 // bytes of the current frame's payload still to pass
}

// Wrap returns c for a grpc-go client whose first call should leave
// with its preface (see the package doc). c must be fresh: nothing read
// from it or written to it yet.
func Wrap(c net.Conn) net.Conn { return newEarlyConn(c) }

func newEarlyConn(c net.Conn) *earlyConn {
	e := &earlyConn{Conn: c, pre: h2PrefaceLen}
	e.rest = earlySettings[:]
	return e
}

func (e *earlyConn) Read(p []byte) (int, error) {
	if e.read.Load() {
		return e.Conn.Read(p)
	}
	e.rmu.Lock()
	defer e.rmu.Unlock()
	if len(e.rest) == 0 {
		return e.Conn.Read(p)
	}
	n := copy(p, e.rest)
	if e.rest = e.rest[n:]; len(e.rest) == 0 {
		e.read.Store(true)
	}
	return n, nil
}

// Write passes p on, less the first SETTINGS ACK the client sends. It
// follows the client's frames by their headers until then; a header split
// across writes is held until its last byte comes, which the client's
// framer writes without waiting for the server.
func (e *earlyConn) Write(p []byte) (int, error) {
	if e.sent.Load() {
		return e.Conn.Write(p)
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	out := make([]byte, 0, len(p)+h2HeaderLen)
	for i := 0; i < len(p); {
		switch {
		case e.sent.Load():
			out, i = append(out, p[i:]...), len(p)
		case e.pre > 0:
			n := min(e.pre, len(p)-i)
			out, i, e.pre = append(out, p[i:i+n]...), i+n, e.pre-n
		case e.body > 0:
			n := int(min(e.body, uint32(len(p)-i)))
			out, i, e.body = append(out, p[i:i+n]...), i+n, e.body-uint32(n)
		default:
			n := copy(e.hdr[e.nhdr:], p[i:])
			i, e.nhdr = i+n, e.nhdr+n
			if e.nhdr < h2HeaderLen {
				continue
			}
			e.nhdr = 0
			length := uint32(e.hdr[0])<<16 | uint32(e.hdr[1])<<8 | uint32(e.hdr[2])
			if e.hdr[3] == h2TypeSettings && e.hdr[4]&h2FlagAck != 0 && length == 0 && binary.BigEndian.Uint32(e.hdr[5:])&0x7fffffff == 0 {
				e.sent.Store(true)
				continue
			}
			out, e.body = append(out, e.hdr[:]...), length
		}
	}
	if len(out) > 0 {
		if _, err := e.Conn.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
