package server

import (
	"bytes"
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// h2Frame is an HTTP/2 frame of type typ, flags and stream, with payload,
// as x/net/http2's framer writes it, lookalikes included.
func h2Frame(typ http2.FrameType, flags http2.Flags, stream uint32, payload []byte) []byte {
	var b bytes.Buffer
	if err := http2.NewFramer(&b, nil).WriteRawFrame(typ, flags, stream, payload); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// TestRTTFromSettingsAck: the agent's round trip ends at the first
// SETTINGS ACK in the host's stream, wherever the reads cut it, and not
// at bytes that only look like one: an ACK inside a payload, one on a
// stream, one with a payload, or the host's own SETTINGS.
func TestRTTFromSettingsAck(t *testing.T) {
	var hello bytes.Buffer
	if err := wire.WriteHello(&hello, wire.Hello{Version: wire.ProtocolVersion}); err != nil {
		t.Fatal(err)
	}
	preface := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	ack := h2Frame(http2.FrameSettings, http2.FlagSettingsAck, 0, nil)
	settings := h2Frame(http2.FrameSettings, 0, 0, []byte{0, 4, 0, 1, 0, 0})
	headers := h2Frame(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 1, []byte("header block"))
	data := h2Frame(http2.FrameData, 0, 1, append([]byte("x"), ack...))
	lookalikes := bytes.Join([][]byte{data, h2Frame(http2.FrameSettings, http2.FlagSettingsAck, 1, nil), h2Frame(http2.FrameSettings, http2.FlagSettingsAck, 0, []byte{0, 0, 0, 0, 0, 0})}, nil)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name string
		in   []byte
		at   int // bytes of in after which the ACK has been read; -1 never
	}{
		{"ack after a call", cat(preface, settings, headers, data, ack, headers), len(cat(preface, settings, headers, data, ack))},
		{"ack first", cat(preface, ack, settings), len(preface) + len(ack)},
		{"lookalikes", cat(preface, settings, lookalikes, headers), -1},
		{"lookalikes then ack", cat(preface, lookalikes, ack), len(cat(preface, lookalikes, ack))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for cut := 0; cut <= len(tc.in); cut++ {
				stream := io.MultiReader(bytes.NewReader(hello.Bytes()), bytes.NewReader(tc.in[:cut]), bytes.NewReader(tc.in[cut:]))
				h := newHelloReader(stream, time.Now().Add(-time.Second))
				read, wasKnown := 0, false
				buf := make([]byte, 7)
				for {
					n, err := h.Read(buf)
					read += n
					known := false
					select {
					case <-h.known:
						known = true
					default:
					}
					if known != (h.rtt() > 0) {
						t.Fatalf("cut %d: known %v with rtt %v", cut, known, h.rtt())
					}
					if tc.at >= 0 && read >= tc.at && !known {
						t.Fatalf("cut %d: %d bytes read, ACK at %d, round trip not known", cut, read, tc.at)
					}
					if known && !wasKnown && (tc.at < 0 || read-n >= tc.at) {
						t.Fatalf("cut %d: round trip known after %d bytes, ACK at %d", cut, read, tc.at)
					}
					wasKnown = known
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatalf("cut %d: %v", cut, err)
					}
				}
				if read != len(tc.in) {
					t.Fatalf("cut %d: read %d bytes, want %d", cut, read, len(tc.in))
				}
				if got := h.rtt(); tc.at >= 0 && got < time.Second {
					t.Fatalf("cut %d: rtt %v, want at least the second since the hello", cut, got)
				}
			}
		})
	}
}
