package archive_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// The sandbox side of POSIX mode is the image's own tar, GNU or busybox:
// archives go both ways between them and this package.

// peer returns argv for a real tar implementation, skipping the test when
// it is missing outside CI (make deps installs both) and failing inside.
func peer(t *testing.T, name string) []string {
	t.Helper()
	var argv []string
	switch name {
	case "gnu":
		argv = []string{"tar"}
	case "busybox":
		argv = []string{"busybox", "tar"}
	}
	path, err := exec.LookPath(argv[0])
	if err == nil && name == "gnu" {
		out, _ := exec.Command(path, "--version").Output()
		if !bytes.Contains(out, []byte("GNU tar")) {
			err = exec.ErrNotFound
		}
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s tar: %v (make deps installs it)", name, err)
		}
		t.Skipf("%s tar not installed (make deps installs it): %v", name, err)
	}
	return argv
}

func run(t *testing.T, stdin []byte, argv ...string) []byte {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

func TestInteropWriterToPeer(t *testing.T) {
	for _, tc := range []struct {
		peer string
		args []string
		cmp  transfertest.Compare
	}{
		// GNU tar restores everything: PAX nanosecond mtimes, symlink
		// mtimes (lutimes), directory mtimes after their contents.
		{"gnu", []string{"-x", "-p", "--no-same-owner", "-f", "-"}, transfertest.Compare{}},
		// busybox 1.35 reads PAX names but takes whole seconds from the
		// header block, and restores no directory or symlink mtimes.
		{"busybox", []string{"-x", "-f", "-"}, transfertest.Compare{MtimeGranularity: time.Second, IgnoreDirMtimes: true, IgnoreSymlinkMtimes: true}},
	} {
		t.Run(tc.peer, func(t *testing.T) {
			argv := peer(t, tc.peer)
			src := t.TempDir()
			transfertest.RandomTree(t, src, 11, transfertest.TreeOptions{BigFiles: 1, BigFileSize: 1<<20 + 3})
			data, _ := archiveOf(t, src)
			out := t.TempDir()
			run(t, data, append(append(argv, tc.args...), "-C", out)...)
			tc.cmp.Equal(t, src, out)
		})
	}
}

func TestInteropPeerToExtract(t *testing.T) {
	for _, tc := range []struct {
		name, peer string
		args       []string
		cmp        transfertest.Compare
	}{
		{"gnu", "gnu", []string{"-c", "-f", "-"}, transfertest.Compare{MtimeGranularity: time.Second}},
		{"gnu-posix", "gnu", []string{"-c", "--format=posix", "-f", "-"}, transfertest.Compare{}},
		{"busybox", "busybox", []string{"-c", "-f", "-"}, transfertest.Compare{MtimeGranularity: time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv := peer(t, tc.peer)
			src := t.TempDir()
			transfertest.RandomTree(t, src, 12, transfertest.TreeOptions{BigFiles: 1, BigFileSize: 1<<20 + 3})
			// Hard links: the peers store the second as a link entry.
			if err := os.WriteFile(filepath.Join(src, "linked"), []byte("one inode\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(filepath.Join(src, "linked"), filepath.Join(src, "linked again")); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(src, 0o751); err != nil {
				t.Fatal(err)
			}
			data := run(t, nil, append(append(argv, tc.args...), "-C", src, ".")...)
			dest := filepath.Join(t.TempDir(), "out")
			if _, err := archive.Extract(context.Background(), bytes.NewReader(data), dest, archive.ExtractOptions{}); err != nil {
				t.Fatalf("Extract: %v", err)
			}
			tc.cmp.Equal(t, src, dest)
			a, _ := os.Stat(filepath.Join(dest, "linked"))
			b, _ := os.Stat(filepath.Join(dest, "linked again"))
			if a == nil || b == nil || !os.SameFile(a, b) {
				t.Error("the hard link came back as two files")
			}
			// The "./" entry gives dest the source root's mode.
			if fi, err := os.Stat(dest); err != nil || fi.Mode().Perm() != 0o751 {
				t.Errorf("dest mode %v, %v; want 0751", fi.Mode(), err)
			}
		})
	}
}
