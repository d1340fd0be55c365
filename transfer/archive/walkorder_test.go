package archive_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// TestCompareWalk: sorting by CompareWalk gives fs.WalkDir's order of a
// real tree whose names put '/' between bytes below and above it.
func TestCompareWalk(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/x", "a/y/z", "a-b/c", "a.b", "a0", "b", "a/x-1", "a/x/q", "ab/c", "a b"} {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if filepath.Base(p) != "x" || p == "a/x/q" {
			if err := os.WriteFile(full, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var walk []string
	err := fs.WalkDir(os.DirFS(dir), ".", func(p string, _ fs.DirEntry, err error) error {
		if p != "." {
			walk = append(walk, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sorted := slices.Clone(walk)
	slices.Reverse(sorted)
	slices.SortFunc(sorted, archive.CompareWalk[string])
	if !slices.Equal(sorted, walk) {
		t.Fatalf("sorted by CompareWalk:\n%q\nwalk order:\n%q", sorted, walk)
	}
	for i := range walk {
		if c := archive.CompareWalk(walk[i], walk[i]); c != 0 {
			t.Errorf("CompareWalk(%q, itself) = %d", walk[i], c)
		}
		if i > 0 && archive.CompareWalk(walk[i], walk[i-1]) != 1 {
			t.Errorf("CompareWalk(%q, %q) != 1", walk[i], walk[i-1])
		}
	}
}
