package archive_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// archive writes the tree at src as the root of a tar stream.
func archiveOf(t testing.TB, src string) ([]byte, archive.Stats) {
	t.Helper()
	return archiveIn(t, src, archive.FormatTar)
}

// archiveIn is archiveOf in format f.
func archiveIn(t testing.TB, src string, f archive.Format) ([]byte, archive.Stats) {
	t.Helper()
	var buf bytes.Buffer
	w := archive.NewWriterFormat(&buf, f)
	if err := w.Add(context.Background(), src, "."); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return buf.Bytes(), w.Stats()
}

func TestRoundTripRandomTrees(t *testing.T) {
	seeds := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	for _, seed := range seeds {
		for _, f := range []archive.Format{archive.FormatTar, archive.FormatEntries} {
			t.Run(fmt.Sprintf("seed=%d/%v", seed, f), func(t *testing.T) {
				t.Parallel()
				src := t.TempDir()
				opts := transfertest.TreeOptions{}
				if seed == 1 {
					opts.BigFiles, opts.BigFileSize = 2, 12<<20 // several copy buffers, not block-aligned either
					opts.BigFileSize += 123
				}
				want := transfertest.RandomTree(t, src, seed, opts)
				data, ws := archiveIn(t, src, f)
				if ws != (archive.Stats{Files: want.Files, Dirs: want.Dirs, Symlinks: want.Symlinks, Bytes: want.Bytes}) {
					t.Errorf("Writer.Stats = %+v, tree has %+v", ws, want)
				}
				dest := filepath.Join(t.TempDir(), "out")
				st, err := archive.Extract(context.Background(), bytes.NewReader(data), dest, archive.ExtractOptions{Format: f})
				if err != nil {
					t.Fatalf("Extract: %v", err)
				}
				if st != ws {
					t.Errorf("Extract stats = %+v, Writer's %+v", st, ws)
				}
				transfertest.EqualTrees(t, src, dest)
				transfertest.CheckSafe(t, dest)

				// Deterministic: the same tree gives the same bytes.
				again, _ := archiveIn(t, src, f)
				if !bytes.Equal(data, again) {
					t.Error("two archives of the same tree differ")
				}
			})
		}
	}
}

// A tree streamed through a pipe (no io.Seeker, short reads) round-trips too.
func TestRoundTripPipe(t *testing.T) {
	src := t.TempDir()
	transfertest.RandomTree(t, src, 42, transfertest.TreeOptions{BigFiles: 1, BigFileSize: 1<<20 + 7})
	pr, pw := io.Pipe()
	go func() {
		w := archive.NewWriter(pw)
		err := w.Add(context.Background(), src, ".")
		if err == nil {
			err = w.Close()
		}
		pw.CloseWithError(err)
	}()
	dest := filepath.Join(t.TempDir(), "out")
	if _, err := archive.Extract(context.Background(), shortReader{pr, 509}, dest, archive.ExtractOptions{}); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	transfertest.EqualTrees(t, src, dest)
}

// shortReader returns at most n bytes per Read.
type shortReader struct {
	r io.Reader
	n int
}

func (o shortReader) Read(p []byte) (int, error) {
	if len(p) > o.n {
		p = p[:o.n]
	}
	return o.r.Read(p)
}

// Extracting the same tree again into the copy (PlaceInto) merges every
// directory and replaces every file and symlink, and changes nothing.
func TestRoundTripPlaceIntoSameTree(t *testing.T) {
	src := t.TempDir()
	transfertest.RandomTree(t, src, 9, transfertest.TreeOptions{})
	data, _ := archiveOf(t, src)
	dest := t.TempDir()
	for range 2 {
		if _, err := archive.Extract(context.Background(), bytes.NewReader(data), dest, archive.ExtractOptions{Place: archive.PlaceInto}); err != nil {
			t.Fatalf("Extract: %v", err)
		}
		transfertest.EqualTrees(t, src, dest)
	}
}

// TestRoundTripLentBuffer: into a frame.Writer, which lends its block
// buffer, the archive is byte for byte the one a plain writer gets, and
// the digests are the same.
func TestRoundTripLentBuffer(t *testing.T) {
	src := t.TempDir()
	transfertest.RandomTree(t, src, 3, transfertest.TreeOptions{BigFiles: 2, BigFileSize: 3<<20 + 77})
	plain := archive.NewWriter(io.Discard)
	plain.HashFiles()
	want, _ := archiveOf(t, src)

	var framed bytes.Buffer
	fw := frame.NewWriter(&framed, frame.WriterOptions{Compress: frame.S2, BlockSize: 64 << 10})
	w := archive.NewWriter(fw)
	w.HashFiles()
	for _, tw := range []*archive.Writer{plain, w} {
		if err := tw.Add(context.Background(), src, "."); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(frame.NewReader(&framed, frame.ReaderOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("archive through the lent buffer differs: %d bytes, want %d", len(got), len(want))
	}
	if !slices.Equal(w.Digests(), plain.Digests()) {
		t.Fatal("digests differ")
	}
}
