package posix_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// TestFlavors checks that each flavor's sandbox really runs the tools it
// claims: busybox tar (and sh) where the profile puts them first.
func TestFlavors(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "")
			if v := b.exec(t, "tar --version"); !strings.Contains(v, f.tarVersion) {
				t.Fatalf("tar --version = %q, want %q", v, f.tarVersion)
			}
			// The scripts run under `sh` as PATH finds it.
			shell := strings.TrimSpace(b.exec(t, `x=$(readlink "/proc/$$/exe"); echo "$x"`))
			wantBusybox := strings.Contains(strings.Join(f.busybox, " "), "sh")
			if got := strings.HasSuffix(shell, "busybox"); got != wantBusybox {
				t.Fatalf("sh is %s, want busybox: %v", shell, wantBusybox)
			}
		})
	}
}

func TestStat(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "")
			mk := func(p string) string { return filepath.Join(b.dir, p) }
			if err := os.MkdirAll(mk("d i r/-sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(mk("d i r/it's ☃"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("d i r", mk("to-dir")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("nowhere", mk("dangling")); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(mk("fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				path         string
				kind, follow posix.Kind
			}{
				{"nope", posix.Missing, posix.Missing},
				{"d i r/nope/deeper", posix.Missing, posix.Missing},
				{"d i r", posix.Dir, posix.Dir},
				{"d i r/", posix.Dir, posix.Dir},
				{"d i r/-sub", posix.Dir, posix.Dir},
				{"-x", posix.Missing, posix.Missing},
				{"d i r/it's ☃", posix.File, posix.File},
				{mk("d i r/it's ☃"), posix.File, posix.File},
				{".", posix.Dir, posix.Dir},
				{"/", posix.Dir, posix.Dir},
				{"to-dir", posix.Symlink, posix.Dir},
				{"dangling", posix.Symlink, posix.Symlink},
				{"fifo", posix.Other, posix.Other},
			} {
				k, err := b.r.Stat(ctxFor(t), tc.path)
				if err != nil || k != tc.kind {
					t.Errorf("Stat(%q) = %v, %v; want %v", tc.path, k, err, tc.kind)
				}
				k, err = b.r.StatFollow(ctxFor(t), tc.path)
				if err != nil || k != tc.follow {
					t.Errorf("StatFollow(%q) = %v, %v; want %v", tc.path, k, err, tc.follow)
				}
			}
		})
	}
}

// TestInvalidPaths checks that bad paths are refused before any call,
// with errors that name them.
func TestInvalidPaths(t *testing.T) {
	x := &countingExecer{}
	r := posix.Remote{X: x, Sandbox: "box"}
	ctx := ctxFor(t)
	for _, p := range []string{"", "a\nb", "a\x00b", "a\rb"} {
		_, err := r.Stat(ctx, p)
		wantPathErr(t, err, posix.ErrInvalidPath, p)
		_, err = r.Upload(ctx, strings.NewReader(""), p, posix.PlaceNew, -1)
		wantPathErr(t, err, posix.ErrInvalidPath, p)
		_, err = r.Download(ctx, "d", []string{"ok", p}, io.Discard)
		wantPathErr(t, err, posix.ErrInvalidPath, p)
		if p != "" {
			_, err = r.Download(ctx, p, []string{"ok"}, io.Discard)
			wantPathErr(t, err, posix.ErrInvalidPath, p)
		}
	}
	for _, n := range []string{"/etc/passwd", "..", "../x", "a/../../x"} {
		_, err := r.Download(ctx, "d", []string{n}, io.Discard)
		wantPathErr(t, err, posix.ErrInvalidPath, n)
	}
	if _, err := r.Download(ctx, "d", nil, io.Discard); err == nil {
		t.Fatal("Download of no names succeeded")
	}
	if n := x.n.Load(); n != 0 {
		t.Fatalf("%d calls made for refused paths", n)
	}
	var pe *fs.PathError
	_, err := r.Stat(ctx, "a\nb")
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), `a`) {
		t.Fatalf("error %v does not name the path", err)
	}
}
