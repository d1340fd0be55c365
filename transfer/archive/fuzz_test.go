package archive_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// FuzzExtract feeds arbitrary streams to Extract. Whatever the bytes: no
// panic; an error is an *EntryError and leaves nothing at dest and no
// staging directory; success leaves a tree with nothing special, no setuid
// bit and no symlink out; the directory beside dest is never touched. The
// seed corpus in testdata/fuzz/FuzzExtract is the small fixtures of
// ../../testdata/archives and a few good archives (go test -run TestFixtures
// -update rewrites it); the fixtures are added here too so that a new one
// seeds the fuzzer before the corpus is rewritten.
func FuzzExtract(f *testing.F) {
	paths, err := filepath.Glob(filepath.Join(archivesDir, "*.tar"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if len(data) <= maxSeed {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) { fuzzExtract(t, data, archive.FormatTar) })
}

// fuzzExtract is a fuzz target's body: data, in format, extracted under
// small limits, either refused with nothing left behind or a safe tree.
func fuzzExtract(t *testing.T, data []byte, format archive.Format) {
	limits := archive.Limits{MaxTotalBytes: 4 << 20, MaxEntries: 1000, MaxFileSize: 1 << 20, MaxHeaderSize: 64 << 10}
	place := archive.PlaceNew
	if len(data)%2 == 1 {
		place = archive.PlaceInto
	}
	s := newSandbox(t, place)
	_, err := archive.Extract(context.Background(), bytes.NewReader(data), s.dest, archive.ExtractOptions{Place: place, Limits: limits, Format: format})
	if err != nil {
		var ee *archive.EntryError
		if !errors.As(err, &ee) {
			t.Errorf("error %v is no *EntryError", err)
		}
		s.checkUntouched(t, place)
		return
	}
	transfertest.EqualTrees(t, s.reference, s.outside)
	if got := names(t, s.parent); !slices.Equal(got, []string{"dest", "outside"}) {
		t.Errorf("beside dest: %q", got)
	}
	transfertest.CheckSafe(t, s.dest)
}
