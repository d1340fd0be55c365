package wire_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// TestWire pins the hello's bytes: the magic, the version big-endian and the
// digest, 42 bytes. A change here is a protocol change.
func TestWire(t *testing.T) {
	got := hex.EncodeToString(encoded(t, wire.Hello{Version: 0x0102, Digest: hello.Digest}))
	want := "ff46455252590d0a" + "0102" + "deadbeef0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c"
	if got != want || wire.HelloLen != 42 {
		t.Fatalf("wire %s\nwant %s (HelloLen %d)", got, want, wire.HelloLen)
	}
	if s := hello.String(); s != "agent protocol 1, sha256:deadbeef0102" {
		t.Errorf("String %q", s)
	}
}

type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) - 1, nil }

func TestWriteHelloError(t *testing.T) {
	if err := wire.WriteHello(shortWriter{}, hello); !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("short write: %v", err)
	}
	pr, pw := io.Pipe()
	pr.CloseWithError(errBroken)
	if err := wire.WriteHello(pw, hello); !errors.Is(err, errBroken) {
		t.Errorf("broken pipe: %v", err)
	}
}

var errBroken = errors.New("broken")

// TestReadHello reads banner+hello+payload through readers that split it
// everywhere; each time the hello comes out and the payload is left in the
// reader, untouched.
func TestReadHello(t *testing.T) {
	long := strings.Repeat("Last login: Mon Jan  1 00:00:00 2026 from 10.0.0.1\n", 100)
	tests := []struct {
		name    string
		banner  string
		payload string
		maxSkip int
	}{
		{"no banner", "", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0},
		{"no payload", "motd\n", "", wire.DefaultMaxSkip},
		{"login banner", "Welcome to Ubuntu 24.04 LTS (GNU/Linux)\r\n\n * Documentation:  https://help.ubuntu.com\n\x1b[0m", "grpc", 1024},
		{"long banner", long, "grpc", len(long)},
		{"banner exactly maxSkip", "0123456789", "x", 10},
		{"partial magics", "\xffFERR\xffFERRY\r\xff\xffF\xffFERRY\n\xffFERRY\r", "grpc", 100},
		{"magic mangled by a pty", "\xffFERRY\r\r\n", "grpc", 100},
		{"utf-8 and binary", "h\u00e9llo \u2603 \U0001F600 \x00\x01\xfe\x80\xc0", "grpc", 100},
		{"payload holds a hello", "banner", "\xffFERRY\r\n\x00\x01" + strings.Repeat("z", 32), 100},
		{"payload is magic bytes", "", "\xff\xff\xffFERRY\r\n", 0},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	for _, tt := range tests {
		data := cat([]byte(tt.banner), encoded(t, hello), []byte(tt.payload))
		for rname, wrap := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				r := wrap(bytes.NewReader(data))
				h, err := wire.ReadHello(r, tt.maxSkip)
				if err != nil || h != hello {
					t.Fatalf("ReadHello: %v, %v", h, err)
				}
				rest, err := io.ReadAll(r)
				if err != nil || string(rest) != tt.payload {
					t.Fatalf("after the hello: %q, %v; want %q", rest, err, tt.payload)
				}
			})
		}
		t.Run(tt.name+"/random splits", func(t *testing.T) {
			for seed := range uint64(200) {
				r := newSplitReader(data, seed)
				h, err := wire.ReadHello(r, tt.maxSkip)
				if err != nil || h != hello || string(data[r.off:]) != tt.payload {
					t.Fatalf("seed %d: %v, %v, rest %q", seed, h, err, data[r.off:])
				}
				check(t, data, tt.maxSkip, seed)
			}
		})
	}
}

// TestNoMagic: output without a hello within maxSkip is a *NoMagicError
// that says why and shows what came, read no further than needed.
func TestNoMagic(t *testing.T) {
	tests := []struct {
		name     string
		data     string
		maxSkip  int
		eof      bool
		skipped  int // -1: at most maxSkip+len(Magic)
		contains []string
	}{
		{"empty", "", 100, true, 0, []string{"output ended after 0 bytes"}},
		{"not found", "sh: 1: /tmp/ferry-agent: not found\n", 100, true, 35,
			[]string{`output ended after 35 bytes: "sh: 1: /tmp/ferry-agent: not found\n"`}},
		{"magic one byte late", "0123456789\xffFERRY\r\n\x00\x01", 9, false, -1, []string{"none in the first"}},
		{"maxSkip 0", "x\xffFERRY\r\n", 0, false, -1, []string{`none in the first 8 bytes of output: "x\xffFERRY\r"`}},
		{"negative maxSkip", "x\xffFERRY\r\n", -5, false, -1, nil},
		{"cut inside the magic", "banner\xffFERRY\r", 100, true, 13, []string{`"banner\xffFERRY\r"`}},
		{"pty output (ONLCR)", strings.ReplaceAll("motd\n"+string(encoded(t, hello)), "\n", "\r\n"), 1000, true, -1, []string{`\r\r\n`}},
		{"pty input (ICRNL)", strings.ReplaceAll(string(encoded(t, hello)), "\r", "\n"), 1000, true, -1, []string{`FERRY\n\n`}},
		{"endless banner", strings.Repeat("y\n", 1<<20), 4096, false, -1, []string{`"y\ny\n`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &countReader{r: strings.NewReader(tt.data)}
			_, err := wire.ReadHello(r, tt.maxSkip)
			var nm *wire.NoMagicError
			if !errors.Is(err, wire.ErrNoMagic) || !errors.As(err, &nm) {
				t.Fatalf("got %v, want ErrNoMagic", err)
			}
			if nm.EOF != tt.eof || nm.Skipped != r.n {
				t.Errorf("EOF %v Skipped %d after reading %d, want EOF %v", nm.EOF, nm.Skipped, r.n, tt.eof)
			}
			if tt.skipped >= 0 && nm.Skipped != tt.skipped || nm.Skipped > max(tt.maxSkip, 0)+len(wire.Magic) {
				t.Errorf("Skipped %d, want %d", nm.Skipped, tt.skipped)
			}
			msg := err.Error()
			for _, s := range tt.contains {
				if !strings.Contains(msg, s) {
					t.Errorf("message %s\nlacks %s", msg, s)
				}
			}
			if len(msg) > 600 {
				t.Errorf("message of %d bytes", len(msg))
			}
		})
	}
}

// TestNoMagicTail: after a long banner, the message shows its beginning and
// its end, where a shell says why the agent did not start, escaped.
func TestNoMagicTail(t *testing.T) {
	data := "\x1b[1mWelcome\x1b[0m\n" + strings.Repeat("-", 5000) + "\nsh: 1: exec: /tmp/ferry-agent: Permission denied\n"
	_, err := wire.ReadHello(strings.NewReader(data), wire.DefaultMaxSkip)
	var nm *wire.NoMagicError
	if !errors.As(err, &nm) {
		t.Fatal(err)
	}
	if string(nm.Head) != data[:64] || string(nm.Tail) != data[len(data)-64:] {
		t.Errorf("Head %q Tail %q", nm.Head, nm.Tail)
	}
	msg := err.Error()
	for _, s := range []string{`"\x1b[1mWelcome\x1b[0m\n---`, `Permission denied\n"`, "after 5066 bytes"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %s\nlacks %s", msg, s)
		}
	}
	// A tail that overlaps the head shows only what the head does not.
	data = strings.Repeat("a", 64) + "bcd"
	_, err = wire.ReadHello(strings.NewReader(data), 1000)
	if !errors.As(err, &nm) || string(nm.Tail) != "bcd" {
		t.Errorf("Tail %q: %v", nm.Tail, err)
	}
}

// TestTruncated cuts the hello at every byte after the magic.
func TestTruncated(t *testing.T) {
	data := cat([]byte("banner"), encoded(t, hello))
	for cut := 6 + len(wire.Magic); cut < len(data); cut++ {
		_, err := wire.ReadHello(iotest.OneByteReader(bytes.NewReader(data[:cut])), 100)
		if !errors.Is(err, wire.ErrHelloTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d: %v", cut, err)
		}
	}
}

// TestVersion: a hello of another version is a *VersionError as soon as the
// version is in, even when the peer sends nothing after it and keeps the
// stream open (a hello of a future version may be shorter).
func TestVersion(t *testing.T) {
	for _, v := range []uint16{0, 2, 0xffff} {
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte("banner\n"))
			pw.Write(encoded(t, wire.Hello{Version: v})[:len(wire.Magic)+2])
		}()
		h, err := readHelloTimeout(t, pr, 100)
		pr.Close()
		var ve *wire.VersionError
		if !errors.As(err, &ve) || ve.Got != v || ve.Want != wire.ProtocolVersion || h.Version != v {
			t.Errorf("version %d: %v, %v", v, h, err)
		}
		if err != nil && err.Error() != "agent: protocol version "+strconv.Itoa(int(v))+", want 1" {
			t.Errorf("message %q", err)
		}
	}
}

// TestNoReadPastHello: over a pipe that stays open after the hello,
// ReadHello returns (it asks for no byte after the hello), and what the
// peer writes next is there to read, byte for byte.
func TestNoReadPastHello(t *testing.T) {
	data := cat([]byte("\xffFERR\xffbanner\n"), encoded(t, hello))
	for seed := range uint64(50) {
		pr, pw := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			rng := rand.New(rand.NewPCG(seed, 1))
			for p := data; len(p) > 0; {
				n := min(len(p), 1+rng.IntN(20))
				if _, err := pw.Write(p[:n]); err != nil {
					return
				}
				p = p[n:]
			}
		}()
		h, err := readHelloTimeout(t, pr, 100)
		if err != nil || h != hello {
			t.Fatalf("seed %d: %v, %v", seed, h, err)
		}
		<-done
		go func() {
			pw.Write([]byte("payload"))
			pw.Close()
		}()
		if rest, err := io.ReadAll(pr); err != nil || string(rest) != "payload" {
			t.Fatalf("seed %d: after the hello %q, %v", seed, rest, err)
		}
	}
}

func readHelloTimeout(t *testing.T, r io.Reader, maxSkip int) (wire.Hello, error) {
	t.Helper()
	type result struct {
		h   wire.Hello
		err error
	}
	c := make(chan result, 1)
	go func() {
		h, err := wire.ReadHello(r, maxSkip)
		c <- result{h, err}
	}()
	select {
	case res := <-c:
		return res.h, res.err
	case <-time.After(10 * time.Second):
		t.Fatal("ReadHello hangs")
		return wire.Hello{}, nil
	}
}

// TestReaderErrors: the reader's own errors come back wrapped, before and
// after the magic, and a reader that makes no progress ends the read.
func TestReaderErrors(t *testing.T) {
	_, err := wire.ReadHello(iotest.ErrReader(errBroken), 100)
	if !errors.Is(err, errBroken) || errors.Is(err, wire.ErrNoMagic) {
		t.Errorf("before the magic: %v", err)
	}
	r := io.MultiReader(bytes.NewReader(encoded(t, hello)[:20]), iotest.ErrReader(errBroken))
	_, err = wire.ReadHello(r, 100)
	if !errors.Is(err, errBroken) || errors.Is(err, wire.ErrHelloTruncated) {
		t.Errorf("after the magic: %v", err)
	}
	_, err = wire.ReadHello(stuckReader{}, 100)
	if !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("stuck reader: %v", err)
	}
	r = io.MultiReader(bytes.NewReader(encoded(t, hello)[:9]), stuckReader{})
	_, err = wire.ReadHello(r, 100)
	if !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("stuck reader after the magic: %v", err)
	}
}

type stuckReader struct{}

func (stuckReader) Read([]byte) (int, error) { return 0, nil }

// TestAgainstIndex holds ReadHello to the slow model on random streams
// built from the magic's own bytes, so that partial magics, magics in the
// banner and hellos cut anywhere are common.
func TestAgainstIndex(t *testing.T) {
	alphabet := []byte(wire.Magic + "x\x00\x01")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		n := rng.IntN(120)
		data := make([]byte, n)
		for j := range data {
			data[j] = alphabet[rng.IntN(len(alphabet))]
		}
		if rng.IntN(2) == 0 {
			data = cat(data, encoded(t, hello)[:rng.IntN(wire.HelloLen+1)], []byte("payload"))
		}
		check(t, data, rng.IntN(130)-5, uint64(i))
	}
}
