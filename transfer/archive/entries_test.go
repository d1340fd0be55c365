package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// entriesOf rewrites a tar as FormatEntries, entry for entry; ok is false
// when the tar does not read to its end or holds a type the format has
// no place for (its attack is then on tar itself).
func entriesOf(data []byte) (_ []byte, ok bool) {
	var out bytes.Buffer
	enc := archive.NewEntryEncoder(&out)
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			return nil, false
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			return nil, false
		}
		if len(h.PAXRecords) > 0 && h.PAXRecords["mtime"] == "" && h.PAXRecords["path"] == "" && h.PAXRecords["linkpath"] == "" {
			return nil, false // records the format drops: not the same archive
		}
		if err := enc.WriteHeader(h); err != nil {
			return nil, false
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(enc, tr); err != nil {
				return nil, false
			}
		}
	}
	if err := enc.Close(); err != nil {
		return nil, false
	}
	return out.Bytes(), true
}

// TestEntriesHostileFixtures runs the hostile tar fixtures, rewritten as
// FormatEntries, through Extract: the format reaches the same checks, so
// each must end as its tar does.
func TestEntriesHostileFixtures(t *testing.T) {
	// Attacks on tar's own end of archive, which the rewrite makes
	// whole: a cut entry stream is TestEntriesCut's.
	tarEnd := map[string]bool{"empty": true, "one-zero-block": true, "no-eoa": true}
	ran := 0
	for _, f := range fixtures {
		data, ok := entriesOf(readFixture(t, f.name))
		if !ok || tarEnd[f.name] {
			continue
		}
		ran++
		runFixtureEverywhere(t, f, data, archive.FormatEntries)
	}
	if ran < len(fixtures)/2 {
		t.Fatalf("only %d of %d fixtures rewritten as entries", ran, len(fixtures))
	}
	t.Logf("%d of %d fixtures", ran, len(fixtures))
}

// goodEntries is a small valid stream: a directory, a file, a symlink.
func goodEntries(t testing.TB) []byte {
	t.Helper()
	var out bytes.Buffer
	enc := archive.NewEntryEncoder(&out)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755, ModTime: oldTime},
		{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o644, ModTime: oldTime, Size: 6},
		{Typeflag: tar.TypeSymlink, Name: "d/l", Linkname: "f", ModTime: oldTime},
	} {
		if err := enc.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := enc.Write([]byte("hello\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestEntriesCut cuts a valid stream at every byte: each cut is
// ErrTruncated, names an entry, and leaves nothing behind.
func TestEntriesCut(t *testing.T) {
	data := goodEntries(t)
	for n := range len(data) {
		s := newSandbox(t, archive.PlaceNew)
		_, err := archive.Extract(context.Background(), bytes.NewReader(data[:n]), s.dest, archive.ExtractOptions{Place: archive.PlaceNew, Format: archive.FormatEntries})
		var ee *archive.EntryError
		if !errors.Is(err, archive.ErrTruncated) || !errors.As(err, &ee) {
			t.Fatalf("cut at %d of %d: %v, want an *EntryError of ErrTruncated", n, len(data), err)
		}
		s.checkUntouched(t, archive.PlaceNew)
	}
	s := newSandbox(t, archive.PlaceNew)
	if _, err := archive.Extract(context.Background(), bytes.NewReader(data), s.dest, archive.ExtractOptions{Place: archive.PlaceNew, Format: archive.FormatEntries}); err != nil {
		t.Fatalf("whole stream: %v", err)
	}
	wantFiles(t, s.dest, map[string]string{"d/f": "hello\n"})
}

// header builds one raw entry: its type, its header bytes as given.
func rawEntry(typ byte, hdr []byte) []byte {
	return append([]byte{typ, byte(len(hdr)), byte(len(hdr) >> 8)}, hdr...)
}

// hdrBytes is a header's fields, each a uvarint unless given as bytes.
func hdrBytes(fields ...any) []byte {
	var b []byte
	for _, f := range fields {
		switch v := f.(type) {
		case uint64:
			b = binary.AppendUvarint(b, v)
		case int:
			b = binary.AppendUvarint(b, uint64(v))
		case string:
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		case []byte:
			b = append(b, v...)
		}
	}
	return b
}

func TestEntriesMalformed(t *testing.T) {
	const magic = "ferry-entries/1\n"
	end := []byte{0, 0, 0}
	// mode, mtime (zigzag varint 2 = 1 s), nanoseconds, uid, gid, size, name, link
	file := func(size int, name string) []byte { return hdrBytes(0o644, 2, 0, 0, 0, size, name, "") }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name  string
		data  []byte
		want  error
		limit archive.Limits
	}{
		{"no magic", []byte("ferry-entries/2\n"), tar.ErrHeader, archive.Limits{}},
		{"a tar", readFixture(t, "dotdot"), tar.ErrHeader, archive.Limits{}},
		{"unknown type", cat([]byte(magic), rawEntry('3', file(0, "dev")), end), tar.ErrHeader, archive.Limits{}},
		{"end marker with a length", cat([]byte(magic), []byte{0, 1, 0, 0}), tar.ErrHeader, archive.Limits{}},
		{"header over the limit", cat([]byte(magic), []byte{'0', 0xff, 0xff}), archive.ErrLimit, archive.Limits{}},
		{"header over a small MaxHeaderSize", cat([]byte(magic), rawEntry('0', file(0, strings.Repeat("n", 2000))), end), archive.ErrLimit, archive.Limits{MaxHeaderSize: 1024}},
		{"bytes left in the header", cat([]byte(magic), rawEntry('0', append(file(0, "f"), 7)), end), tar.ErrHeader, archive.Limits{}},
		{"header cut inside a number", cat([]byte(magic), rawEntry('0', []byte{0x80}), end), tar.ErrHeader, archive.Limits{}},
		{"name longer than the header", cat([]byte(magic), rawEntry('0', hdrBytes(0o644, 2, 0, 0, 0, 0, []byte{50}, "f")), end), tar.ErrHeader, archive.Limits{}},
		{"mode over its bits", cat([]byte(magic), rawEntry('0', hdrBytes(uint64(1)<<30, 2, 0, 0, 0, 0, "f", "")), end), tar.ErrHeader, archive.Limits{}},
		{"uid over int32", cat([]byte(magic), rawEntry('0', hdrBytes(0o644, 2, 0, uint64(1)<<31, 0, 0, "f", "")), end), tar.ErrHeader, archive.Limits{}},
		{"gid over int32", cat([]byte(magic), rawEntry('0', hdrBytes(0o644, 2, 0, 0, uint64(1)<<40, 0, "f", "")), end), tar.ErrHeader, archive.Limits{}},
		{"mtime cut", cat([]byte(magic), rawEntry('0', hdrBytes(0o644, []byte{0xff, 0xff})), end), tar.ErrHeader, archive.Limits{}},
		{"link target longer than the header", cat([]byte(magic), rawEntry('2', hdrBytes(0o777, 2, 0, 0, 0, 0, "l", []byte{40}, "x")), end), tar.ErrHeader, archive.Limits{}},
		{"nanoseconds over a second", cat([]byte(magic), rawEntry('0', hdrBytes(0o644, 2, 1_000_000_000, 0, 0, 0, "f", "")), end), tar.ErrHeader, archive.Limits{}},
		{"a directory with data", cat([]byte(magic), rawEntry('5', hdrBytes(0o755, 2, 0, 0, 0, 4, "d/", "")), []byte("data"), end), tar.ErrHeader, archive.Limits{}},
		{"size over int64", cat([]byte(magic), rawEntry('0', hdrBytes(0o644, 2, 0, 0, 0, uint64(1)<<63, "f", "")), end), tar.ErrHeader, archive.Limits{}},
		{"size over MaxFileSize", cat([]byte(magic), rawEntry('0', file(1<<40, "f")), end), archive.ErrLimit, archive.Limits{}},
		{"size beyond the stream", cat([]byte(magic), rawEntry('0', file(100, "f")), []byte("short")), archive.ErrTruncated, archive.Limits{}},
		{"unsafe name", cat([]byte(magic), rawEntry('0', file(0, "../outside/victim")), end), archive.ErrUnsafePath, archive.Limits{}},
		{"absolute name", cat([]byte(magic), rawEntry('0', file(0, "/tmp/x")), end), archive.ErrUnsafePath, archive.Limits{}},
		{"symlink out", cat([]byte(magic), rawEntry('2', hdrBytes(0o777, 2, 0, 0, 0, 0, "l", "../outside")), end), archive.ErrLinkEscape, archive.Limits{}},
		{"entries over MaxEntries", cat([]byte(magic), rawEntry('0', file(0, "a")), rawEntry('0', file(0, "b")), end), archive.ErrLimit, archive.Limits{MaxEntries: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t, archive.PlaceNew)
			_, err := archive.Extract(context.Background(), bytes.NewReader(tc.data), s.dest, archive.ExtractOptions{Place: archive.PlaceNew, Limits: tc.limit, Format: archive.FormatEntries})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var ee *archive.EntryError
			if !errors.As(err, &ee) {
				t.Errorf("error %v is no *EntryError", err)
			}
			s.checkUntouched(t, archive.PlaceNew)
		})
	}
}

// The reader stops at the end marker: what follows is left for the
// stream's carrier to refuse (the agent's tree reader does).
func TestEntriesStopAtEnd(t *testing.T) {
	data := append(goodEntries(t), "trailing"...)
	r := bytes.NewReader(data)
	s := newSandbox(t, archive.PlaceNew)
	if _, err := archive.Extract(context.Background(), r, s.dest, archive.ExtractOptions{Place: archive.PlaceNew, Format: archive.FormatEntries}); err != nil {
		t.Fatal(err)
	}
	if r.Len() != len("trailing") {
		t.Fatalf("%d bytes left unread, want %d", r.Len(), len("trailing"))
	}
}

// The writer refuses what the format cannot hold and a file written
// short or long.
func TestEntryWriterRefuses(t *testing.T) {
	enc := archive.NewEntryEncoder(io.Discard)
	if err := enc.WriteHeader(&tar.Header{Typeflag: tar.TypeFifo, Name: "p"}); !errors.Is(err, archive.ErrUnsupported) {
		t.Errorf("fifo: %v, want ErrUnsupported", err)
	}
	if err := enc.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.Repeat("n", 13000)}); !errors.Is(err, archive.ErrLimit) {
		t.Errorf("long name: %v, want ErrLimit", err)
	}
	if err := enc.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "f", Size: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write([]byte("abc")); !errors.Is(err, tar.ErrWriteTooLong) {
		t.Errorf("long write: %v, want ErrWriteTooLong", err)
	}
	if err := enc.Close(); err == nil {
		t.Error("Close with the file's data missing succeeded")
	}
}

// FuzzExtractEntries is FuzzExtract for FormatEntries, seeded with the
// fixtures rewritten as entries and a valid stream.
func FuzzExtractEntries(f *testing.F) {
	f.Add(goodEntries(f))
	for _, fx := range fixtures {
		if data, ok := entriesOf(fx.build()); ok && len(data) <= maxSeed {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) { fuzzExtract(t, data, archive.FormatEntries) })
}

// A reader that returns its last bytes with io.EOF: a stream cut right
// after a file's data is missing its end marker, not part of the file.
func TestEntriesCutAfterData(t *testing.T) {
	var out bytes.Buffer
	enc := archive.NewEntryEncoder(&out)
	if err := enc.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644, ModTime: oldTime, Size: 6}); err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	data := out.Bytes() // no end marker
	s := newSandbox(t, archive.PlaceNew)
	_, err := archive.Extract(context.Background(), iotest.DataErrReader(bytes.NewReader(data)), s.dest, archive.ExtractOptions{Place: archive.PlaceNew, Format: archive.FormatEntries})
	if !errors.Is(err, archive.ErrTruncated) || !strings.Contains(err.Error(), "end marker") {
		t.Fatalf("err = %v, want ErrTruncated for the missing end marker", err)
	}
	s.checkUntouched(t, archive.PlaceNew)
}
