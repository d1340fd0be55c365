package posix

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestStreamWriter writes a banner, the marker and a stream in every
// split: byte by byte, all at once, and the marker torn in two.
func TestStreamWriter(t *testing.T) {
	marker := "ferry-abc stream\n"
	stream := "\x00tar\nstream ferry-abc stream\n bytes"
	for _, banner := range []string{"", "WELCOME\n", "ferry-abc strea", strings.Repeat("ferry-ab", 1000)} {
		all := banner + marker + stream
		for _, size := range []int{1, 3, len(marker) - 1, len(all)} {
			var out bytes.Buffer
			s := &streamWriter{marker: []byte(marker), w: &out}
			for b := []byte(all); len(b) > 0; {
				n := min(size, len(b))
				if k, err := s.Write(b[:n]); err != nil || k != n {
					t.Fatalf("Write = %d, %v", k, err)
				}
				b = b[n:]
			}
			if !s.found || out.String() != stream || s.wire != int64(len(all)) {
				t.Fatalf("banner %q, writes of %d: found %v, stream %q, wire %d", banner, size, s.found, out.String(), s.wire)
			}
		}
	}
}

func TestStreamWriterLimits(t *testing.T) {
	s := &streamWriter{marker: []byte("m stream\n"), w: io.Discard}
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	var err error
	for i := 0; i < 20 && err == nil; i++ {
		_, err = s.Write(chunk)
	}
	if !errors.Is(err, errNoMarker) {
		t.Fatalf("err = %v after %d bytes", err, s.skipped)
	}
	if _, err2 := s.Write([]byte("m stream\n")); !errors.Is(err2, errNoMarker) {
		t.Fatal("error not sticky")
	}
	// A failing destination stops the stream, stickily.
	s = &streamWriter{marker: []byte("m\n"), w: failWriter{}}
	if _, err := s.Write([]byte("m\nabc")); err == nil {
		t.Fatal("write error lost")
	}
	if _, err := s.Write([]byte("def")); err == nil {
		t.Fatal("error not sticky")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestControl(t *testing.T) {
	c := newControl("T")
	in := "banner\nT kind dir\nT fail conflict 0 a b/c\r\nnoise T kind file\n" + strings.Repeat("y", 3*maxLine) + "T kind other\nT tar 2"
	for b := []byte(in); len(b) > 0; {
		n := min(7, len(b))
		c.Write(b[:n])
		b = b[n:]
	}
	c.done()
	if v, _ := c.msg("kind"); v != "dir" {
		t.Fatalf("kind = %q (a control word inside a long line counted?)", v)
	}
	if v, _ := c.msg("fail"); v != "conflict 0 a b/c" {
		t.Fatalf("fail = %q", v)
	}
	if v, _ := c.msg("tar"); v != "2" {
		t.Fatalf("tar = %q (last line without newline lost?)", v)
	}
	s := c.stderr()
	if !strings.HasPrefix(s, "banner\nnoise T kind file") || !strings.Contains(s, "bytes omitted") || len(s) > stderrHead+stderrTail+100 {
		t.Fatalf("stderr: %d bytes: %.200q", len(s), s)
	}
	if c.wire.Load() != int64(len(in)) {
		t.Fatalf("wire = %d, want %d", c.wire.Load(), len(in))
	}
}

func TestEndCheck(t *testing.T) {
	block := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"Empty", nil, false},
		{"OnlyEnd", block(0, 1024), true},
		{"Proper", append(block(1, 512), block(0, 1024+8192)...), true},
		{"OneZeroBlock", append(block(1, 512), block(0, 512)...), false},
		{"Unaligned", append(block(1, 100), block(0, 1024)...), false},
		{"NoEnd", block(1, 2048), false},
		{"ZerosThenData", append(block(0, 4096), block(1, 512)...), false},
	} {
		for _, r := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.DataErrReader} {
			e := &endCheck{r: r(bytes.NewReader(tc.in))}
			b, err := io.ReadAll(e)
			if tc.ok != (err == nil) || !bytes.Equal(b, tc.in) && tc.ok {
				t.Fatalf("%s: err = %v", tc.name, err)
			}
			if !tc.ok && !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s: err = %v, want ErrTruncated", tc.name, err)
			}
			if e.n.Load() != int64(len(tc.in)) {
				t.Fatalf("%s: counted %d", tc.name, e.n.Load())
			}
		}
	}
}

func TestScriptRule(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a line without a terminator passed")
		}
	}()
	checkLines("bad.sh", "a=1;\necho x\necho y;\n")
}
