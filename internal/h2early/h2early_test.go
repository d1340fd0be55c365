package h2early

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// h2Frame is an HTTP/2 frame of type typ, flags and stream, with payload.
func h2Frame(typ, flags byte, stream uint32, payload []byte) []byte {
	n := len(payload)
	b := []byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags, byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream)}
	return append(b, payload...)
}

// writeSink is the far side of a connection's writes.
type writeSink struct {
	net.Conn
	got bytes.Buffer
}

func (w *writeSink) Write(p []byte) (int, error) { return w.got.Write(p) }

func TestEarlyConnWrite(t *testing.T) {
	preface := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	ack := h2Frame(h2TypeSettings, h2FlagAck, 0, nil)
	settings := h2Frame(h2TypeSettings, 0, 0, []byte{0, 4, 0, 1, 0, 0})
	window := h2Frame(0x8, 0, 0, []byte{0, 0x0f, 0, 0})
	headers := h2Frame(0x1, 0x4, 1, []byte("header block"))
	// A DATA frame whose payload holds an ACK's bytes: only frame
	// headers are ACKs.
	data := h2Frame(0x0, 0, 1, append(append([]byte("x"), ack...), ack...))
	// Not the ACK: flags other than ACK, a payload, or another stream.
	settingsOnStream := h2Frame(h2TypeSettings, h2FlagAck, 1, nil)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	for _, tc := range []struct {
		name    string
		in, out []byte
	}{
		{"AckFirst", cat(preface, settings, window, ack, headers, data, ack), cat(preface, settings, window, headers, data, ack)},
		{"AckAfterCall", cat(preface, settings, headers, data, ack, headers), cat(preface, settings, headers, data, headers)},
		{"LookalikesPass", cat(preface, settings, data, settingsOnStream, ack, ack), cat(preface, settings, data, settingsOnStream, ack)},
		{"NoAck", cat(preface, settings, headers), cat(preface, settings, headers)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Every split of the stream into two writes, and one byte a write.
			for cut := 0; cut <= len(tc.in); cut++ {
				sink := &writeSink{}
				e := newEarlyConn(sink)
				for _, p := range [][]byte{tc.in[:cut], tc.in[cut:]} {
					if n, err := e.Write(p); n != len(p) || err != nil {
						t.Fatalf("cut %d: Write = %d, %v; want %d, nil", cut, n, err, len(p))
					}
				}
				if !bytes.Equal(sink.got.Bytes(), tc.out) {
					t.Fatalf("cut %d: wrote\n%x\nwant\n%x", cut, sink.got.Bytes(), tc.out)
				}
			}
			sink := &writeSink{}
			e := newEarlyConn(sink)
			for i := range tc.in {
				e.Write(tc.in[i : i+1])
			}
			if !bytes.Equal(sink.got.Bytes(), tc.out) {
				t.Fatalf("byte at a time: wrote\n%x\nwant\n%x", sink.got.Bytes(), tc.out)
			}
		})
	}
}

func TestEarlyConnRead(t *testing.T) {
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	fromServer := h2Frame(h2TypeSettings, 0, 0, []byte{0, 3, 0, 0, 0, 100})
	go func() {
		server.Write(fromServer)
		server.Close()
	}()
	e := newEarlyConn(client)
	var got []byte
	b := make([]byte, 4) // less than a frame header: the empty SETTINGS comes in pieces
	for range 64 {
		n, err := e.Read(b)
		got = append(got, b[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := append(h2Frame(h2TypeSettings, 0, 0, nil), fromServer...)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %x, want %x (an empty SETTINGS, then the server's bytes)", got, want)
	}
}
