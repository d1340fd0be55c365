package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

func extract(t *testing.T, data []byte, dest string, opts archive.ExtractOptions) (archive.Stats, error) {
	t.Helper()
	return archive.Extract(context.Background(), bytes.NewReader(data), dest, opts)
}

func TestPlaceIntoMerges(t *testing.T) {
	dest := t.TempDir()
	mustWrite(t, filepath.Join(dest, "keep"), "keep\n")
	mustWrite(t, filepath.Join(dest, "d", "old"), "old\n")
	mustWrite(t, filepath.Join(dest, "f"), "old f\n")
	if err := os.Symlink("keep", filepath.Join(dest, "l")); err != nil {
		t.Fatal(err)
	}
	dMtime := time.Unix(1_400_000_000, 42)
	data := newBuilder().
		header(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o750, ModTime: dMtime}, "").
		file("d/new", "new\n").
		file("f", "new f\n").
		file("l", "was a link\n").
		file("n/deep/x", "x\n").
		end()
	st, err := extract(t, data, dest, archive.ExtractOptions{Place: archive.PlaceInto})
	if err != nil {
		t.Fatal(err)
	}
	if want := (archive.Stats{Files: 4, Dirs: 1, Bytes: 4 + 6 + 11 + 2}); st != want {
		t.Errorf("Stats %+v, want %+v", st, want)
	}
	wantFiles(t, dest, map[string]string{"keep": "keep\n", "d/old": "old\n", "d/new": "new\n", "f": "new f\n", "l": "was a link\n", "n/deep/x": "x\n"})
	wantModes(t, dest, map[string]os.FileMode{"l": 0o644, "d": os.ModeDir | 0o750})
	if fi, err := os.Stat(filepath.Join(dest, "d")); err != nil || !fi.ModTime().Equal(dMtime) {
		t.Errorf("d: mtime %v, want the entry's %v", fi.ModTime(), dMtime)
	}
	if got := names(t, dest); !slices.Equal(got, []string{"d", "f", "keep", "l", "n"}) {
		t.Errorf("dest holds %q", got)
	}
}

func TestPlaceIntoConflicts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(dest string)
		data  []byte
		entry string
	}{
		{"file over dir", func(dest string) { mustWrite(t, filepath.Join(dest, "x", "in"), "in\n") },
			newBuilder().file("a-first", "a\n").file("x", "file\n").end(), "x"},
		{"dir over file", func(dest string) { mustWrite(t, filepath.Join(dest, "x"), "file\n") },
			newBuilder().file("a-first", "a\n").file("x/in", "in\n").end(), "x"},
		{"dir over symlink to dir", func(dest string) {
			mustWrite(t, filepath.Join(dest, "real", "in"), "in\n")
			if err := os.Symlink("real", filepath.Join(dest, "x")); err != nil {
				t.Fatal(err)
			}
		}, newBuilder().file("a-first", "a\n").dir("x/").file("x/in", "pwned\n").end(), "x/"},
		{"deep", func(dest string) { mustWrite(t, filepath.Join(dest, "d", "e", "f"), "f\n") },
			newBuilder().file("a-first", "a\n").file("d/e/f/g", "g\n").end(), "d/e/f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			tc.setup(dest)
			before := t.TempDir()
			copyTree(t, dest, before)
			_, err := extract(t, tc.data, dest, archive.ExtractOptions{Place: archive.PlaceInto})
			var ee *archive.EntryError
			if !errors.Is(err, fs.ErrExist) || !errors.As(err, &ee) || ee.Entry != tc.entry {
				t.Fatalf("Extract: %v, want fs.ErrExist naming %q", err, tc.entry)
			}
			// Found before anything moved: a-first is not placed either.
			transfertest.EqualTrees(t, before, dest)
		})
	}
}

// copyTree copies dir's tree into the empty directory to, through the
// package's own writer and extractor.
func copyTree(t *testing.T, dir, to string) {
	t.Helper()
	data, _ := archiveOf(t, dir)
	if _, err := extract(t, data, to, archive.ExtractOptions{Place: archive.PlaceInto}); err != nil {
		t.Fatal(err)
	}
}

func TestPlaceNewRefusesExisting(t *testing.T) {
	dest := t.TempDir()
	data := newBuilder().file("a", "a\n").end()
	if _, err := extract(t, data, dest, archive.ExtractOptions{}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Extract over an existing dir: %v, want fs.ErrExist", err)
	}
	if got := names(t, dest); len(got) != 0 {
		t.Errorf("dest holds %q", got)
	}
	if _, err := extract(t, data, filepath.Join(dest, "no", "parent"), archive.ExtractOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Extract under a missing parent: %v, want fs.ErrNotExist", err)
	}
}

func TestPlaceAs(t *testing.T) {
	parent := t.TempDir()
	file := newBuilder().header(&tar.Header{Typeflag: tar.TypeReg, Name: "remote-name.txt", Mode: 0o600, Size: 3}, "new").end()
	tree := newBuilder().dir("d/").file("d/x", "x\n").end()
	two := newBuilder().file("a", "a").file("b", "b").end()

	dst := filepath.Join(parent, "local.txt")
	if _, err := extract(t, file, dst, archive.ExtractOptions{Place: archive.PlaceAs}); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, parent, map[string]string{"local.txt": "new"})
	mustWrite(t, dst, "old")
	if _, err := extract(t, file, dst, archive.ExtractOptions{Place: archive.PlaceAs}); err != nil {
		t.Fatalf("replacing a file: %v", err)
	}
	wantFiles(t, parent, map[string]string{"local.txt": "new"})
	wantModes(t, parent, map[string]os.FileMode{"local.txt": 0o600})

	dd := filepath.Join(parent, "tree")
	if _, err := extract(t, tree, dd, archive.ExtractOptions{Place: archive.PlaceAs}); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, dd, map[string]string{"x": "x\n"})
	if _, err := extract(t, tree, dd, archive.ExtractOptions{Place: archive.PlaceAs}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("a directory over a directory: %v, want fs.ErrExist", err)
	}
	if _, err := extract(t, tree, dst, archive.ExtractOptions{Place: archive.PlaceAs}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("a directory over a file: %v, want fs.ErrExist", err)
	}
	if _, err := extract(t, two, filepath.Join(parent, "two"), archive.ExtractOptions{Place: archive.PlaceAs}); err == nil {
		t.Error("two top-level entries accepted")
	}
	if got := names(t, parent); !slices.Equal(got, []string{"local.txt", "tree"}) {
		t.Errorf("parent holds %q", got)
	}
}

func TestSelect(t *testing.T) {
	data := newBuilder().
		file("keep/a", "a\n").
		dir("skip/").
		file("skip/b", "b\n").
		file("skip/keep-me", "k\n").
		symlink("skip/l", "b").
		file("top", "t\n").
		end()
	dest := filepath.Join(t.TempDir(), "out")
	var asked []string
	st, err := extract(t, data, dest, archive.ExtractOptions{Select: func(name string) bool {
		asked = append(asked, name)
		return strings.HasPrefix(name, "keep/") || name == "skip/keep-me"
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"keep/a", "skip", "skip/b", "skip/keep-me", "skip/l", "top"}; !slices.Equal(asked, want) {
		t.Errorf("Select asked about %q, want %q", asked, want)
	}
	wantFiles(t, dest, map[string]string{"keep/a": "a\n", "skip/keep-me": "k\n"})
	if got := names(t, filepath.Join(dest, "skip")); !slices.Equal(got, []string{"keep-me"}) {
		t.Errorf("skip/ holds %q", got)
	}
	if got := names(t, dest); !slices.Equal(got, []string{"keep", "skip"}) {
		t.Errorf("dest holds %q", got)
	}
	if st != (archive.Stats{Files: 2, Bytes: 4}) {
		t.Errorf("Stats %+v", st)
	}

	// Skipped entries are still checked.
	for _, bad := range [][]byte{
		newBuilder().file("../evil", "x").end(),
		newBuilder().header(&tar.Header{Typeflag: tar.TypeFifo, Name: "p"}, "").end(),
	} {
		_, err := extract(t, bad, filepath.Join(t.TempDir(), "out"), archive.ExtractOptions{Select: func(string) bool { return false }})
		if err == nil {
			t.Error("a skipped hostile entry passed")
		}
	}
	// A hard link to a skipped file has nothing to point at.
	hl := newBuilder().file("a", "a").hardlink("h", "a").end()
	_, err = extract(t, hl, filepath.Join(t.TempDir(), "out"), archive.ExtractOptions{Select: func(n string) bool { return n == "h" }})
	if !errors.Is(err, archive.ErrLinkEscape) {
		t.Errorf("hard link to a skipped file: %v", err)
	}
}

// cancelReader cancels ctx once n bytes have been read.
type cancelReader struct {
	r      io.Reader
	n      int
	cancel func()
}

func (c *cancelReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= n; c.n <= 0 {
		c.cancel()
	}
	return n, err
}

func TestExtractCancel(t *testing.T) {
	src := t.TempDir()
	transfertest.RandomTree(t, src, 3, transfertest.TreeOptions{BigFiles: 1})
	data, _ := archiveOf(t, src)
	for _, at := range []int{1, 1000, len(data) / 2} {
		parent := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		r := &cancelReader{r: bytes.NewReader(data), n: at, cancel: cancel}
		_, err := archive.Extract(ctx, shortReader{r, 4096}, filepath.Join(parent, "out"), archive.ExtractOptions{})
		cancel()
		var ee *archive.EntryError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &ee) {
			t.Errorf("cancelled after %d bytes: %v", at, err)
		}
		if got := names(t, parent); len(got) != 0 {
			t.Errorf("left %q", got)
		}
	}
}

func TestExtractStopsAtEndOfArchive(t *testing.T) {
	data := newBuilder().file("a", "a").end()
	r := bytes.NewReader(append(slices.Clone(data), "TRAILER"...))
	if _, err := archive.Extract(context.Background(), r, filepath.Join(t.TempDir(), "out"), archive.ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "TRAILER" {
		t.Errorf("left %q unread, want the trailer", rest)
	}
}

func TestExtractStaging(t *testing.T) {
	for _, place := range []archive.Placement{archive.PlaceNew, archive.PlaceInto} {
		t.Run(place.String(), func(t *testing.T) {
			parent := t.TempDir()
			dest := filepath.Join(parent, "dest")
			stageIn := parent
			if place == archive.PlaceInto {
				if err := os.Mkdir(dest, 0o755); err != nil {
					t.Fatal(err)
				}
				stageIn = dest
			}
			data := newBuilder().file("a", "a").file("b", "b").end()
			var seen []string
			peek := &peekReader{r: bytes.NewReader(data), at: 700, peek: func() {
				es, _ := os.ReadDir(stageIn)
				for _, e := range es {
					fi, _ := e.Info()
					seen = append(seen, e.Name()+" "+fi.Mode().String())
				}
			}}
			if _, err := archive.Extract(context.Background(), peek, dest, archive.ExtractOptions{Place: place}); err != nil {
				t.Fatal(err)
			}
			var staging []string
			for _, s := range seen {
				if strings.HasPrefix(s, ".ferry-staging-") {
					staging = append(staging, s)
				}
			}
			if len(staging) != 1 || !strings.HasSuffix(staging[0], " drwx------") {
				t.Errorf("mid-stream %s held %q, want one hidden 0700 staging directory", stageIn, seen)
			}
			if got := names(t, dest); !slices.Equal(got, []string{"a", "b"}) {
				t.Errorf("dest holds %q", got)
			}
		})
	}
}

// peekReader calls peek once, when at bytes have been read.
type peekReader struct {
	r    io.Reader
	at   int
	peek func()
}

func (p *peekReader) Read(b []byte) (int, error) {
	if p.at <= 0 && p.peek != nil {
		p.peek()
		p.peek = nil
	}
	if len(b) > 100 {
		b = b[:100]
	}
	n, err := p.r.Read(b)
	p.at -= n
	return n, err
}

func TestExtractModesExact(t *testing.T) {
	// Not reduced by the umask, and read-only directories are filled
	// before they become read-only.
	data := newBuilder().
		header(&tar.Header{Typeflag: tar.TypeDir, Name: "ro/", Mode: 0o555}, "").
		header(&tar.Header{Typeflag: tar.TypeReg, Name: "ro/f", Mode: 0o777, Size: 1}, "f").
		header(&tar.Header{Typeflag: tar.TypeDir, Name: "open/", Mode: 0o777}, "").
		header(&tar.Header{Typeflag: tar.TypeReg, Name: "none", Mode: 0o000, Size: 1}, "n").
		end()
	for _, place := range []archive.Placement{archive.PlaceNew, archive.PlaceInto} {
		dest := filepath.Join(t.TempDir(), "out")
		if place == archive.PlaceInto {
			if err := os.Mkdir(dest, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := extract(t, data, dest, archive.ExtractOptions{Place: place}); err != nil {
			t.Fatal(err)
		}
		wantModes(t, dest, map[string]os.FileMode{"ro": os.ModeDir | 0o555, "ro/f": 0o777, "open": os.ModeDir | 0o777, "none": 0})
		if err := os.Chmod(filepath.Join(dest, "ro"), 0o755); err != nil { // for t.TempDir's cleanup
			t.Fatal(err)
		}
	}
}

func TestExtractBadLimits(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "out")
	_, err := extract(t, newBuilder().end(), dest, archive.ExtractOptions{Limits: archive.Limits{MaxEntries: -1}})
	if err == nil {
		t.Error("negative limit accepted")
	}
	if _, err := os.Lstat(dest); err == nil {
		t.Error("dest created")
	}
}

func TestExtractEmptyArchive(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "out")
	st, err := extract(t, newBuilder().end(), dest, archive.ExtractOptions{})
	if err != nil || st != (archive.Stats{}) {
		t.Fatalf("Extract: %+v, %v", st, err)
	}
	if got := names(t, dest); len(got) != 0 {
		t.Errorf("dest holds %q", got)
	}
}

// TestStagingName: a caller-chosen staging directory is used as named, and
// a name that is not one StagingPrefix element is refused before anything
// is written.
func TestStagingName(t *testing.T) {
	var stream bytes.Buffer
	tw := tar.NewWriter(&stream)
	tw.WriteHeader(&tar.Header{Name: "a", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("A"))
	tw.Close()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{archive.StagingPrefix + "0123abcd", true},
		{"plain", false},
		{archive.StagingPrefix, false},
		{archive.StagingPrefix + "notes", false}, // not hex: no sweep would know it
		{archive.StagingPrefix + "x/../../evil", false},
		{"../" + archive.StagingPrefix + "x", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			_, err := archive.Extract(context.Background(), bytes.NewReader(stream.Bytes()), filepath.Join(parent, "dest"),
				archive.ExtractOptions{Place: archive.PlaceNew, Staging: tc.name})
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			ents, _ := os.ReadDir(parent)
			if want := map[bool]int{true: 1, false: 0}[tc.ok]; len(ents) != want {
				t.Fatalf("left %v in the parent, want %d entries", ents, want)
			}
		})
	}
}
