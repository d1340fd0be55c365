package archive_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

var oldTime = time.Unix(1_234_567_890, 123456789)

// sandbox is the directory an extraction runs in: dest, and beside it a
// directory of files an attack would like to overwrite.
type sandbox struct {
	parent, dest, outside, reference string
}

func newSandbox(t *testing.T, place archive.Placement) *sandbox {
	t.Helper()
	s := &sandbox{parent: t.TempDir(), reference: t.TempDir()}
	s.dest = filepath.Join(s.parent, "dest")
	s.outside = filepath.Join(s.parent, "outside")
	for _, dir := range []string{s.outside, s.reference} {
		mustWrite(t, filepath.Join(dir, "victim"), "victim\n")
	}
	if place == archive.PlaceInto {
		if err := os.Mkdir(s.dest, 0o755); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(s.dest, "existing"), "original\n")
	}
	return s
}

func mustWrite(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, oldTime, oldTime); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ns []string
	for _, e := range es {
		ns = append(ns, e.Name())
	}
	return ns
}

// checkUntouched asserts that a refused extraction left no trace: nothing
// outside, no staging directory, dest as it was.
func (s *sandbox) checkUntouched(t *testing.T, place archive.Placement) {
	t.Helper()
	transfertest.EqualTrees(t, s.reference, s.outside)
	want := []string{"outside"}
	if place == archive.PlaceInto {
		want = []string{"dest", "outside"}
		if got := names(t, s.dest); !slices.Equal(got, []string{"existing"}) {
			t.Errorf("dest holds %q, want only existing", got)
		}
		data, err := os.ReadFile(filepath.Join(s.dest, "existing"))
		if err != nil || string(data) != "original\n" {
			t.Errorf("dest/existing: %q, %v", data, err)
		}
		if fi, err := os.Stat(filepath.Join(s.dest, "existing")); err == nil && !fi.ModTime().Equal(oldTime) {
			t.Errorf("dest/existing: mtime %v changed", fi.ModTime())
		}
	}
	if got := names(t, s.parent); !slices.Equal(got, want) {
		t.Errorf("beside dest: %q, want %q", got, want)
	}
	for _, p := range []string{absTarget, filepath.Join("/tmp", absLinkVictim)} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists", p)
		}
	}
}

func TestHostileArchives(t *testing.T) {
	for _, f := range fixtures {
		runFixtureEverywhere(t, f, readFixture(t, f.name), archive.FormatTar)
	}
}

// runFixtureEverywhere runs a fixture's stream with each placement: an
// attack must fail however its archive is placed.
func runFixtureEverywhere(t *testing.T, f fixture, data []byte, format archive.Format) {
	places := []archive.Placement{archive.PlaceNew, archive.PlaceInto}
	if f.want != nil {
		places = append(places, archive.PlaceAs)
	}
	for _, place := range places {
		t.Run(fmt.Sprintf("%s/%v%s", f.name, place, limitsLabel(f.limits)), func(t *testing.T) {
			t.Parallel()
			runFixture(t, f, data, place, format)
		})
	}
}

// runFixture extracts a fixture's stream, data in format, and checks that
// it ends as the fixture says: accepted with its tree, or refused naming
// the entry and leaving nothing behind.
func runFixture(t *testing.T, f fixture, data []byte, place archive.Placement, format archive.Format) {
	t.Helper()
	s := newSandbox(t, place)
	st, err := archive.Extract(context.Background(), bytes.NewReader(data), s.dest,
		archive.ExtractOptions{Place: place, Limits: f.limits, Names: f.names, Format: format})
	if f.want == nil {
		if err != nil {
			t.Fatalf("Extract: %v", err)
		}
		transfertest.CheckSafe(t, s.dest)
		f.check(t, s.dest, place)
		if place == archive.PlaceInto {
			wantFiles(t, s.dest, map[string]string{"existing": "original\n"})
		}
		transfertest.EqualTrees(t, s.reference, s.outside)
		return
	}
	if err == nil {
		t.Fatalf("Extract accepted it (%+v)", st)
	}
	if !errors.Is(err, f.want) {
		t.Errorf("error %v, want %v", err, f.want)
	}
	var ee *archive.EntryError
	switch {
	case !errors.As(err, &ee):
		t.Errorf("error %v is no *EntryError", err)
	case f.entryPrefix && !strings.HasPrefix(ee.Entry, f.entry):
		t.Errorf("error names %q, want a name starting %q", ee.Entry, f.entry)
	case !f.entryPrefix && ee.Entry != f.entry:
		t.Errorf("error names %q, want %q", clipped(ee.Entry), clipped(f.entry))
	}
	if len(err.Error()) > 1024 {
		t.Errorf("error line is %d bytes", len(err.Error()))
	}
	s.checkUntouched(t, place)
}

func clipped(s string) string {
	if len(s) > 60 {
		return fmt.Sprintf("%s...(%d bytes)", s[:60], len(s))
	}
	return s
}

// limitsLabel names the limits a fixture row sets, for its subtest.
func limitsLabel(l archive.Limits) string {
	var set []string
	for _, f := range strings.Fields(strings.Trim(fmt.Sprintf("%+v", l), "{}")) {
		if !strings.HasSuffix(f, ":0") {
			set = append(set, f)
		}
	}
	if len(set) == 0 {
		return ""
	}
	return "/" + strings.Join(set, ",")
}
