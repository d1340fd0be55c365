package posix

import (
	"bytes"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
)

// fuzzTag is the tag of the fuzzed control streams: a hostile sandbox can
// learn the real one (it is an argument of the script its tar runs under).
const fuzzTag = "ferry-0123"

// FuzzControl feeds a script's stderr, as a hostile sandbox may write it,
// to control in writes of every size, and then parses the messages as
// Download and Upload do. Whatever the bytes: no panic; the messages are
// those of a plain line-by-line reading (lines up to maxLine that start
// with the tag, the last of a key winning), however the writes split the
// stream; values hold no newline; at most maxKeys keys are kept; what
// stderr() keeps stays bounded; every upload failure parses to an error.
func FuzzControl(f *testing.F) {
	for _, s := range []string{
		"",
		fuzzTag + " count 3\n" + fuzzTag + " tar 0\n",
		"banner\r\n" + fuzzTag + " fail missing 1\n",
		fuzzTag + " fail conflict 3 a/b c\n" + fuzzTag + " swept 2\n",
		fuzzTag + " ok 18446744073709551616\n",
		fuzzTag + " fail count 0 -5\nsome tar error\n" + fuzzTag + " tar",
		fuzzTag + " fail\n" + fuzzTag + " \n" + fuzzTag + "  x\n",
		fuzzTag + " count " + strings.Repeat("9", maxLine) + "\n" + fuzzTag + " tar 1\n",
		strings.Repeat("e\xff\xfe", 5000) + "\n" + fuzzTag + " ok 1\r\n",
		"ferry-012 ok 1\n" + fuzzTag + "ok 2\n",
		manyKeys(40),
	} {
		f.Add([]byte(s), uint16(1))
		f.Add([]byte(s), uint16(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, size uint16) {
		whole := newControl(fuzzTag)
		whole.Write(data)
		whole.done()
		split := newControl(fuzzTag)
		n := int(size)%512 + 1
		for b := data; len(b) > 0; {
			k := min(n, len(b))
			if w, err := split.Write(b[:k]); w != k || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			b = b[k:]
		}
		split.done()
		want := lineMessages(data)
		for _, c := range []*control{whole, split} {
			if !maps.Equal(c.msgs, want) {
				t.Fatalf("messages %q, want %q", c.msgs, want)
			}
			if c.wire.Load() != int64(len(data)) {
				t.Fatalf("wire %d, want %d", c.wire.Load(), len(data))
			}
		}
		if whole.stderr() != split.stderr() {
			t.Fatalf("stderr depends on how it was written: %q and %q", whole.stderr(), split.stderr())
		}
		// Each invalid byte may become a 3-byte U+FFFD.
		if got, bound := len(whole.stderr()), 3*(stderrHead+stderrTail)+64; got > bound {
			t.Fatalf("stderr kept %d bytes, at most %d", got, bound)
		}
		if len(whole.msgs) > maxKeys {
			t.Fatalf("%d keys kept", len(whole.msgs))
		}
		for k, v := range whole.msgs {
			if strings.ContainsAny(k, " \n") || strings.Contains(v, "\n") || len(v) > maxLine {
				t.Fatalf("message %q = %q", k, v)
			}
		}
		// What the callers make of them.
		if v, ok := whole.msg("fail"); ok {
			if err := uploadFailure("dest", v, 3, whole.stderr()); err == nil {
				t.Fatalf("upload failure %q is no error", v)
			}
		}
		for _, k := range []string{"count", "ok", "tar", "swept"} {
			if v, ok := whole.msg(k); ok {
				strconv.ParseInt(v, 10, 64)
			}
		}
	})
}

// lineMessages is control's reading of data, line by line.
func lineMessages(data []byte) map[string]string {
	msgs := map[string]string{}
	prefix := []byte(fuzzTag + " ")
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line = data[:i+1]
		}
		data = data[len(line):]
		if len(line) > maxLine {
			continue
		}
		if body, ok := bytes.CutPrefix(line, prefix); ok {
			k, v, _ := strings.Cut(strings.TrimRight(string(body), "\r\n"), " ")
			if _, known := msgs[k]; known || len(msgs) < maxKeys {
				msgs[k] = v
			}
		}
	}
	return msgs
}

// FuzzStreamWriter feeds a sandbox's stdout, banner and stream, to
// streamWriter in writes of every size: the stream is exactly what follows
// the first marker, and nothing is passed on without one.
func FuzzStreamWriter(f *testing.F) {
	const marker = fuzzTag + " stream\n"
	for _, s := range []string{
		"", marker, "banner\n" + marker + "data", "ferry-0123 strea" + marker + marker,
		strings.Repeat("ferry-01", 100) + marker + "\x00\x00", "no marker at all\n",
	} {
		f.Add([]byte(s), uint16(1))
		f.Add([]byte(s), uint16(5))
	}
	f.Fuzz(func(t *testing.T, data []byte, size uint16) {
		var out bytes.Buffer
		s := &streamWriter{marker: []byte(marker), w: &out}
		n := int(size)%512 + 1
		for b := data; len(b) > 0; {
			k := min(n, len(b))
			if w, err := s.Write(b[:k]); w != k || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			b = b[k:]
		}
		i := bytes.Index(data, []byte(marker))
		switch {
		case i < 0 && (s.found || out.Len() > 0):
			t.Fatalf("no marker, but found %v and passed on %q", s.found, out.Bytes())
		case i >= 0 && (!s.found || !bytes.Equal(out.Bytes(), data[i+len(marker):])):
			t.Fatalf("found %v, passed on %q, want %q", s.found, out.Bytes(), data[i+len(marker):])
		}
		if s.wire != int64(len(data)) {
			t.Fatalf("wire %d, want %d", s.wire, len(data))
		}
	})
}

// manyKeys is n control lines of distinct keys, then one of a key the
// scripts use.
func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s k%d v\n", fuzzTag, i)
	}
	return b.String() + fuzzTag + " count 1\n"
}

// TestControlBoundsKeys: a sandbox that writes control lines of ever new
// keys grows nothing past maxKeys; the lines are kept as (bounded) text.
func TestControlBoundsKeys(t *testing.T) {
	c := newControl(fuzzTag)
	for i := range 100000 {
		fmt.Fprintf(c, "%s k%d %s\n", fuzzTag, i, strings.Repeat("v", 100))
	}
	c.done()
	if len(c.msgs) != maxKeys {
		t.Fatalf("%d keys kept, want %d", len(c.msgs), maxKeys)
	}
	if n := len(c.head) + len(c.tail); n > stderrHead+2*stderrTail {
		t.Fatalf("%d bytes of text kept", n)
	}
	if !strings.Contains(c.stderr(), "bytes omitted") {
		t.Errorf("stderr %q does not say what it left out", c.stderr())
	}
}
