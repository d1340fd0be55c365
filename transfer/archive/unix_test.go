//go:build unix

package archive_test

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferry-dev/ferry/transfer/archive"
)

func fileUID(fi fs.FileInfo) int { return int(fi.Sys().(*syscall.Stat_t).Uid) }

func TestWriterRefusesSpecialFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(p string) error
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"socket", func(p string) error {
			l, err := net.Listen("unix", p)
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			if err := os.WriteFile(filepath.Join(src, "a"), []byte("a"), 0o644); err != nil {
				t.Fatal(err)
			}
			special := filepath.Join(src, "s")
			if err := tc.make(special); err != nil {
				t.Fatal(err)
			}
			w := archive.NewWriter(io.Discard)
			err := w.Add(context.Background(), src, ".")
			if !errors.Is(err, archive.ErrUnsupported) || !strings.Contains(err.Error(), special) {
				t.Fatalf("Add: %v, want ErrUnsupported naming %s", err, special)
			}
			// Sticky: the archive is broken.
			if err2 := w.Add(context.Background(), filepath.Join(src, "a"), "a"); err2 != err {
				t.Errorf("Add after the error: %v", err2)
			}
			if err2 := w.Close(); err2 != err {
				t.Errorf("Close after the error: %v", err2)
			}
		})
	}
}

func TestExtractChown(t *testing.T) {
	data := newBuilder().
		header(&tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644, Size: 1, Uid: 1234, Gid: 5678}, "f").
		header(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755, Uid: 1234, Gid: 5678}, "").
		header(&tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "f", Uid: 1234, Gid: 5678}, "").
		end()
	for _, chown := range []bool{false, true} {
		dest := filepath.Join(t.TempDir(), "out")
		if _, err := extract(t, data, dest, archive.ExtractOptions{Chown: chown}); err != nil {
			t.Fatal(err)
		}
		wantUID := os.Geteuid()
		if chown && os.Geteuid() == 0 {
			wantUID = 1234
		}
		for _, name := range []string{"f", "d", "l"} {
			fi, err := os.Lstat(filepath.Join(dest, name))
			if err != nil {
				t.Fatal(err)
			}
			if uid := fileUID(fi); uid != wantUID {
				t.Errorf("Chown=%v: %s belongs to %d, want %d", chown, name, uid, wantUID)
			}
		}
	}
}
