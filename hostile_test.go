package ferry_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/transfer"
)

// refused are the fixtures in testdata/archives that a hostile sandbox's
// tar may send and that ferry must refuse (transfer's fixture tests map
// each to its sentinel and entry; here they come through the real path).
var refused = []string{
	"dotdot", "dotdot-inner", "absolute", "pax-path-dotdot", "gnu-longname-dotdot", "root-file", "root-symlink",
	"symlink-escape-write-through", "symlink-absolute", "symlink-write-through", "symlink-chain-escape",
	"symlink-chain-late", "symlink-chain-dotdot", "symlink-loop", "symlink-outside-overwrite", "symlink-swap",
	"file-then-symlink", "dir-then-file-swap", "dir-then-symlink-swap", "file-then-dir", "file-as-parent",
	"hardlink-outside", "hardlink-absolute", "hardlink-forward", "hardlink-through-symlink", "hardlink-to-dir",
	"hardlink-to-symlink", "chardev", "blockdev", "fifo", "unknown-type", "gnu-dumpdir",
	"long-name", "long-linkname", "huge-pax", "pax-chain", "huge-gnu-longname", "huge-file",
	"truncated", "truncated-header", "truncated-pax", "no-eoa", "one-zero-block", "bad-checksum",
}

// TestHostileSandboxTar replaces the sandbox's tar, through its login
// profile, with one that sends a crafted archive, and downloads: CLI-side
// library → gateway → sandbox → back. Every archive must fail the copy,
// leave nothing at the destination, and touch nothing beside it.
func TestHostileSandboxTar(t *testing.T) {
	e := newEnv(t, ferry.ModePOSIX)
	fixtures, err := filepath.Abs(filepath.Join("testdata", "archives"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, e.root, map[string]string{"x/file": "real content", "bin/": ""})
	if err := os.WriteFile(filepath.Join(e.root, ".profile"), []byte("export PATH=\"$HOME/bin:$PATH\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range refused {
		t.Run(name, func(t *testing.T) {
			archive := filepath.Join(fixtures, name+".tar")
			if _, err := os.Stat(archive); err != nil {
				t.Fatal(err)
			}
			fake := "#!/bin/sh\nexec cat '" + archive + "'\n"
			if err := os.WriteFile(filepath.Join(e.root, "bin", "tar"), []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
			parent := t.TempDir()
			write(t, parent, map[string]string{"outside/victim": "victim", "existing/keep": "keep"})
			before := tree(t, parent)
			for _, dst := range []string{filepath.Join(parent, "new"), filepath.Join(parent, "existing")} {
				_, err := ferry.Download(ctx(t), e.sb, []string{"x"}, dst, transfer.Limits{})
				if err == nil {
					t.Fatalf("download into %s succeeded", dst)
				}
				var ee *transfer.EntryError
				if !errors.As(err, &ee) && !errors.Is(err, transfer.ErrTruncated) {
					t.Fatalf("err = %v, want a transfer.EntryError naming the entry", err)
				}
			}
			sameTree(t, tree(t, parent), before)
		})
	}
}

// TestShortTarIsCaught: a sandbox tar that sends a well-formed archive
// holding less than was asked for (a stream that ended early but cleanly)
// must not pass for the whole tree.
func TestShortTarIsCaught(t *testing.T) {
	e := newEnv(t, ferry.ModePOSIX)
	write(t, e.root, map[string]string{"x/a": "1", "x/b": "2", "x/c": "3", "bin/": ""})
	// One entry of the three, with proper end blocks.
	var short bytes.Buffer
	tw := tar.NewWriter(&short)
	tw.WriteHeader(&tar.Header{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "x/a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("1"))
	tw.Close()
	archive := filepath.Join(t.TempDir(), "short.tar")
	if err := os.WriteFile(archive, short.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, ".profile"), []byte("export PATH=\"$HOME/bin:$PATH\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := "#!/bin/sh\nexec cat '" + archive + "'\n"
	if err := os.WriteFile(filepath.Join(e.root, "bin", "tar"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "got")
	if _, err := ferry.Download(ctx(t), e.sb, []string{"x"}, dst, transfer.Limits{}); !errors.Is(err, ferry.ErrShort) {
		t.Fatalf("short archive: err = %v, want ErrShort", err)
	}
	if _, err := os.Lstat(dst); !os.IsNotExist(err) {
		t.Fatalf("a short archive was placed at %s (%v)", dst, err)
	}
}
