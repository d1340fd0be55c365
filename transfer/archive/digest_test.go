package archive_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// fileDigests hashes the regular files under dir the slow way, in the
// order Writer writes them.
func fileDigests(t *testing.T, dir string) []archive.FileDigest {
	t.Helper()
	var out []archive.FileDigest
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, archive.FileDigest{Name: filepath.ToSlash(rel), Size: int64(len(b)), Sum: archive.DigestOf(b)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDigestsWriterToExtract(t *testing.T) {
	src := t.TempDir()
	transfertest.RandomTree(t, src, 11, transfertest.TreeOptions{BigFiles: 1, BigFileSize: 600<<10 + 7})
	want := fileDigests(t, src)

	var buf bytes.Buffer
	w := archive.NewWriter(&buf)
	w.HashFiles()
	if err := w.Add(context.Background(), src, "."); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// WalkDir's lexical order is Writer's byte-wise order.
	if got := w.Digests(); !slices.Equal(got, want) {
		t.Fatalf("Writer digests differ from the files':\n got %v\nwant %v", got, want)
	}

	var got []archive.FileDigest
	verified := false
	dest := filepath.Join(t.TempDir(), "out")
	_, err := archive.Extract(context.Background(), bytes.NewReader(buf.Bytes()), dest, archive.ExtractOptions{
		OnFile: func(d archive.FileDigest) error { got = append(got, d); return nil },
		Verify: func(archive.Stats) error {
			verified = slices.Equal(got, want)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !verified {
		t.Fatalf("Extract digests before Verify differ:\n got %v\nwant %v", got, want)
	}
	transfertest.EqualTrees(t, src, dest)
}

func TestDigestsOnlyWhenAsked(t *testing.T) {
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "f"), "data")
	var buf bytes.Buffer
	w := archive.NewWriter(&buf)
	if err := w.Add(context.Background(), src, "."); err != nil {
		t.Fatal(err)
	}
	if d := w.Digests(); d != nil {
		t.Errorf("Digests without HashFiles = %v", d)
	}
}

func TestExtractOnFileRefuses(t *testing.T) {
	data := newBuilder().file("a", "a").file("b", "bad").end()
	dest := filepath.Join(t.TempDir(), "out")
	errBad := errors.New("bad file")
	_, err := extract(t, data, dest, archive.ExtractOptions{OnFile: func(d archive.FileDigest) error {
		if d.Name == "b" {
			return errBad
		}
		return nil
	}})
	var ee *archive.EntryError
	if !errors.Is(err, errBad) || !errors.As(err, &ee) || ee.Entry != "b" {
		t.Fatalf("err = %v, want the hook's error naming b", err)
	}
	if _, err := os.Lstat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dest: %v, want nothing placed", err)
	}
}

func TestAddRoot(t *testing.T) {
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "f"), "data")
	mtime := time.Unix(1_500_000_000, 123456789)
	if err := os.Chmod(src, 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(src, time.Time{}, mtime); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := archive.NewWriter(&buf)
	if err := w.AddRoot(context.Background(), link); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st != (archive.Stats{Files: 1, Bytes: 4}) {
		t.Errorf("Stats %+v: the root is not counted", st)
	}
	dest := filepath.Join(t.TempDir(), "out")
	st, err := extract(t, buf.Bytes(), dest, archive.ExtractOptions{})
	if err != nil || st != w.Stats() {
		t.Fatalf("Extract: %+v, %v", st, err)
	}
	fi, err := os.Stat(dest)
	if err != nil || fi.Mode().Perm() != 0o751 || !fi.ModTime().Equal(mtime) {
		t.Fatalf("dest: %v %v, want src's mode and mtime", fi, err)
	}
	transfertest.EqualTrees(t, src, dest)

	w = archive.NewWriter(&bytes.Buffer{})
	if err := w.AddRoot(context.Background(), filepath.Join(src, "f")); err == nil {
		t.Error("AddRoot of a file: no error")
	}
}
