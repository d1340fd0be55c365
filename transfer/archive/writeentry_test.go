package archive_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// TestWriteEntryRoundTrip writes a tree from metadata alone and checks that
// Extract rebuilds it with its modes, nanosecond mtimes, symlinks, empty
// directories and the root entry's mode.
func TestWriteEntryRoundTrip(t *testing.T) {
	mt := func(ns int64) time.Time { return time.Unix(1_600_000_000, ns) }
	var buf bytes.Buffer
	w := archive.NewWriter(&buf)
	w.HashFiles()
	ctx := context.Background()
	entries := []struct {
		h    archive.Header
		data string
	}{
		{archive.Header{Name: ".", Kind: archive.Dir, Mode: 0o700, ModTime: mt(1)}, ""},
		{archive.Header{Name: "d", Kind: archive.Dir, Mode: 0o750, ModTime: mt(2)}, ""},
		{archive.Header{Name: "d/f", Kind: archive.File, Mode: 0o640, ModTime: mt(3), Size: 5}, "hello"},
		{archive.Header{Name: "empty", Kind: archive.Dir, Mode: 0o755, ModTime: mt(4)}, ""},
		{archive.Header{Name: "zero", Kind: archive.File, Mode: 0o600, ModTime: mt(5)}, ""},
		{archive.Header{Name: "link", Kind: archive.Symlink, Mode: 0o777, ModTime: mt(6), Target: "d/f"}, ""},
	}
	for _, e := range entries {
		if err := w.WriteEntry(ctx, e.h, strings.NewReader(e.data)); err != nil {
			t.Fatalf("WriteEntry %s: %v", e.h.Name, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if want := (archive.Stats{Files: 2, Dirs: 2, Symlinks: 1, Bytes: 5}); w.Stats() != want {
		t.Errorf("Stats %+v, want %+v", w.Stats(), want)
	}
	if n := len(w.Digests()); n != 2 {
		t.Errorf("%d digests, want 2", n)
	}
	dest := filepath.Join(t.TempDir(), "out")
	if _, err := archive.Extract(ctx, &buf, dest, archive.ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p := filepath.Join(dest, e.h.Name)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); e.h.Kind != archive.Symlink && got != e.h.Mode {
			t.Errorf("%s: mode %v, want %v", e.h.Name, got, e.h.Mode)
		}
		if !fi.ModTime().Equal(e.h.ModTime) {
			t.Errorf("%s: mtime %v, want %v", e.h.Name, fi.ModTime(), e.h.ModTime)
		}
		switch e.h.Kind {
		case archive.File:
			if b, _ := os.ReadFile(p); string(b) != e.data {
				t.Errorf("%s: content %q, want %q", e.h.Name, b, e.data)
			}
		case archive.Symlink:
			if tg, _ := os.Readlink(p); tg != e.h.Target {
				t.Errorf("%s: target %q, want %q", e.h.Name, tg, e.h.Target)
			}
		}
	}
}

func TestWriteEntryRefusals(t *testing.T) {
	ctx := context.Background()
	w := archive.NewWriter(io.Discard)
	for _, h := range []archive.Header{
		{Name: "../x", Kind: archive.File},
		{Name: "/abs", Kind: archive.Dir},
		{Name: ".", Kind: archive.File},
		{Name: "l", Kind: archive.Symlink},
		{Name: "o", Kind: archive.Other},
	} {
		if err := w.WriteEntry(ctx, h, strings.NewReader("")); err == nil {
			t.Errorf("WriteEntry %+v succeeded", h)
		}
	}
	// Refusals of bad arguments do not break the archive; a short file does,
	// for good.
	if err := w.WriteEntry(ctx, archive.Header{Name: "ok", Kind: archive.Dir, Mode: 0o755}, nil); err != nil {
		t.Fatalf("after refusals: %v", err)
	}
	err := w.WriteEntry(ctx, archive.Header{Name: "short", Kind: archive.File, Size: 10}, strings.NewReader("abc"))
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "short") {
		t.Fatalf("short file: err = %v, want io.ErrUnexpectedEOF naming the entry", err)
	}
	if err2 := w.WriteEntry(ctx, archive.Header{Name: "next", Kind: archive.Dir}, nil); err2 != err {
		t.Errorf("after a broken entry: err = %v, want the sticky %v", err2, err)
	}
}
