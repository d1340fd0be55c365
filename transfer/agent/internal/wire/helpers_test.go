package wire_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// hello is the hello most tests send.
var hello = wire.Hello{Version: wire.ProtocolVersion, Digest: [32]byte{
	0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
	13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28}}

// encoded is h as WriteHello writes it.
func encoded(t testing.TB, h wire.Hello) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := wire.WriteHello(&b, h); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// splitReader returns data in reads of random sizes from 1 to 50 bytes,
// drawn from seed, and counts what it has handed out.
type splitReader struct {
	data []byte
	off  int
	rng  *rand.Rand
}

func newSplitReader(data []byte, seed uint64) *splitReader {
	return &splitReader{data: data, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (r *splitReader) Read(p []byte) (int, error) {
	if r.off == len(r.data) {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data)-r.off, 1+r.rng.IntN(50))
	copy(p, r.data[r.off:r.off+n])
	r.off += n
	return n, nil
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// outcome is what ReadHello should do with a stream.
type outcome struct {
	hello      wire.Hello
	consumed   int  // exact bytes taken on success and on EOF
	noMagic    bool // *NoMagicError
	eof        bool // ... because the stream ended
	truncated  bool
	badVersion bool   // *VersionError ...
	version    uint16 // ... with this Got
}

// model is ReadHello's contract written the slow way: the first Magic in
// data, if it begins within maxSkip, starts the hello.
func model(data []byte, maxSkip int) outcome {
	i := bytes.Index(data, []byte(wire.Magic))
	if i < 0 || i > maxSkip {
		// The stream ends before ReadHello can know that no magic begins
		// within maxSkip when its end is a partial magic that does.
		partial := 0
		for k := len(wire.Magic) - 1; k > 0; k-- {
			if bytes.HasSuffix(data, []byte(wire.Magic[:k])) {
				partial = k
				break
			}
		}
		if len(data)-partial <= maxSkip {
			return outcome{noMagic: true, eof: true, consumed: len(data)}
		}
		return outcome{noMagic: true}
	}
	body := data[i+len(wire.Magic):]
	if len(body) < 2 {
		return outcome{truncated: true}
	}
	v := uint16(body[0])<<8 | uint16(body[1])
	if v != wire.ProtocolVersion {
		return outcome{badVersion: true, version: v}
	}
	if len(body) < wire.HelloLen-len(wire.Magic) {
		return outcome{truncated: true}
	}
	o := outcome{hello: wire.Hello{Version: v}, consumed: i + wire.HelloLen}
	copy(o.hello.Digest[:], body[2:])
	return o
}

// check runs ReadHello on data read in random pieces and holds it to model:
// the same outcome, never more than maxSkip+HelloLen bytes read, and on
// success exactly the hello taken from the stream.
func check(t *testing.T, data []byte, maxSkip int, seed uint64) {
	t.Helper()
	r := newSplitReader(data, seed)
	h, err := wire.ReadHello(r, maxSkip)
	maxSkip = max(maxSkip, 0) // as ReadHello takes it
	want := model(data, maxSkip)
	if r.off > maxSkip+wire.HelloLen {
		t.Fatalf("read %d bytes, bound is %d", r.off, maxSkip+wire.HelloLen)
	}
	var nm *wire.NoMagicError
	var ve *wire.VersionError
	switch {
	case want.noMagic:
		if !errors.As(err, &nm) || !errors.Is(err, wire.ErrNoMagic) || nm.EOF != want.eof {
			t.Fatalf("got %v, want no magic (eof %v)", err, want.eof)
		}
		if nm.Skipped != r.off || (want.eof && r.off != want.consumed) || (!want.eof && r.off > maxSkip+len(wire.Magic)) {
			t.Fatalf("Skipped %d, read %d of %q (maxSkip %d, want %+v)", nm.Skipped, r.off, data, maxSkip, want)
		}
	case want.truncated:
		if !errors.Is(err, wire.ErrHelloTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v, want truncated", err)
		}
	case want.badVersion:
		if !errors.As(err, &ve) || ve.Got != want.version || ve.Want != wire.ProtocolVersion || h.Version != want.version {
			t.Fatalf("got %v %v, want version %d", h, err, want.version)
		}
	default:
		if err != nil || h != want.hello || r.off != want.consumed {
			t.Fatalf("got %v %v after %d bytes, want %v after %d", h, err, r.off, want.hello, want.consumed)
		}
	}
}
