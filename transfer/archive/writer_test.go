package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// entries lists an archive's headers.
func entries(t *testing.T, data []byte) []*tar.Header {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	var hs []*tar.Header
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hs
		}
		if err != nil {
			t.Fatalf("read archive: %v", err)
		}
		hs = append(hs, h)
	}
}

func headerNames(hs []*tar.Header) []string {
	var ns []string
	for _, h := range hs {
		ns = append(ns, h.Name)
	}
	return ns
}

func TestWriterOrderAndHeaders(t *testing.T) {
	src := t.TempDir()
	mtime := time.Unix(1_500_000_000, 987654321)
	for _, p := range []string{"b/", "b/z", "b/a", "a", "B", "é", "a b/", "a b/c", "empty/"} {
		full := filepath.Join(src, p)
		if strings.HasSuffix(p, "/") {
			if err := os.Mkdir(full, 0o750); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(full, []byte(p), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("nowhere", filepath.Join(src, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"b/z", "b/a", "a", "B", "é", "a b/c", "empty", "b", "a b"} {
		if err := os.Chtimes(filepath.Join(src, p), time.Time{}, mtime); err != nil {
			t.Fatal(err)
		}
	}
	data, st := archiveOf(t, src)
	hs := entries(t, data)
	want := []string{"B", "a", "a b/", "a b/c", "b/", "b/a", "b/z", "dangling", "empty/", "é"}
	if got := headerNames(hs); !slices.Equal(got, want) {
		t.Fatalf("entries %q, want %q", got, want)
	}
	if want := (archive.Stats{Files: 6, Dirs: 3, Symlinks: 1, Bytes: 1 + 1 + 5 + 3 + 3 + 2}); st != want {
		t.Errorf("Stats %+v, want %+v", st, want)
	}
	for _, h := range hs {
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q, want 0:0 and no names", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		switch h.Typeflag {
		case tar.TypeSymlink:
			if h.Linkname != "nowhere" {
				t.Errorf("%s: link to %q", h.Name, h.Linkname)
			}
		case tar.TypeDir:
			if h.Mode != 0o750 || !h.ModTime.Equal(mtime) {
				t.Errorf("%s: mode %o mtime %v", h.Name, h.Mode, h.ModTime)
			}
		case tar.TypeReg:
			if h.Mode != 0o640 || !h.ModTime.Equal(mtime) {
				t.Errorf("%s: mode %o mtime %v", h.Name, h.Mode, h.ModTime)
			}
		}
	}
}

func TestWriterNames(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "d", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(src, "d", "sub", "f.txt")
	if err := os.WriteFile(file, []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(src, "link-to-d")
	if err := os.Symlink("d", link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src, name string
		want      []string
	}{
		{filepath.Join(src, "d"), "under/here", []string{"under/here/", "under/here/sub/", "under/here/sub/f.txt"}},
		{filepath.Join(src, "d"), "./x/", []string{"x/", "x/sub/", "x/sub/f.txt"}},
		{filepath.Join(src, "d"), ".", []string{"sub/", "sub/f.txt"}},
		{file, "", []string{"f.txt"}},
		{file, ".", []string{"f.txt"}},
		{file, "renamed", []string{"renamed"}},
		{link, "", []string{"link-to-d"}}, // stored as a link, not followed
	} {
		var buf bytes.Buffer
		w := archive.NewWriter(&buf)
		if err := w.Add(context.Background(), tc.src, tc.name); err != nil {
			t.Fatalf("Add(%s, %q): %v", tc.src, tc.name, err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got := headerNames(entries(t, buf.Bytes())); !slices.Equal(got, tc.want) {
			t.Errorf("Add(%s, %q) wrote %q, want %q", tc.src, tc.name, got, tc.want)
		}
	}

	// A bad name is refused before anything is written; the writer goes on.
	var buf bytes.Buffer
	w := archive.NewWriter(&buf)
	for _, bad := range []string{"../x", "a/../../x", "/abs", "nul\x00"} {
		if err := w.Add(context.Background(), file, bad); !errors.Is(err, archive.ErrUnsafePath) {
			t.Errorf("Add(%q): %v, want ErrUnsafePath", bad, err)
		}
	}
	if err := w.Add(context.Background(), file, "ok"); err != nil {
		t.Fatalf("Add after a refused name: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := headerNames(entries(t, buf.Bytes())); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("wrote %q", got)
	}
}

func TestWriterKeepsSpecialModeBits(t *testing.T) {
	src := t.TempDir()
	f := filepath.Join(src, "suid")
	if err := os.WriteFile(f, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f, 0o755|os.ModeSetuid|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(src, "tmp")
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	data, _ := archiveOf(t, src)
	modes := map[string]int64{}
	for _, h := range entries(t, data) {
		modes[h.Name] = h.Mode
	}
	if modes["suid"] != 0o6755 || modes["tmp/"] != 0o1777 {
		t.Errorf("modes %v", modes)
	}
}

func TestWriterHardLinksAsFiles(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a"), []byte("same"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(src, "a"), filepath.Join(src, "b")); err != nil {
		t.Fatal(err)
	}
	data, st := archiveOf(t, src)
	for _, h := range entries(t, data) {
		if h.Typeflag != tar.TypeReg || h.Size != 4 {
			t.Errorf("%s: type %q size %d", h.Name, h.Typeflag, h.Size)
		}
	}
	if st.Files != 2 || st.Bytes != 8 {
		t.Errorf("Stats %+v", st)
	}
}

func TestWriterContext(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := archive.NewWriter(io.Discard)
	if err := w.Add(ctx, src, "."); !errors.Is(err, context.Canceled) {
		t.Errorf("Add: %v, want context.Canceled", err)
	}
}

func TestWriterClose(t *testing.T) {
	var buf bytes.Buffer
	w := archive.NewWriter(&buf)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if !bytes.Equal(buf.Bytes(), make([]byte, 1024)) {
		t.Errorf("empty archive is %d bytes, want the two zero blocks", buf.Len())
	}
	if err := w.Add(context.Background(), t.TempDir(), "."); err == nil {
		t.Error("Add after Close succeeded")
	}
}

// failingWriter fails after n bytes.
type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		n := f.n
		f.n = 0
		return n, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

func TestWriterStickyWriteError(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a"), bytes.Repeat([]byte("x"), 10000), 0o644); err != nil {
		t.Fatal(err)
	}
	w := archive.NewWriter(&failingWriter{n: 2000})
	err := w.Add(context.Background(), src, ".")
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Add: %v", err)
	}
	if err2 := w.Close(); err2 != err {
		t.Errorf("Close: %v, want the first error", err2)
	}
}
