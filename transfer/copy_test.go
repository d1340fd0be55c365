package transfer

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// tarRemote is a sandbox in a local directory whose Download archives
// what it is asked for as the agent does, and counts the stats asked of
// it: each one is a round trip on a real link.
type tarRemote struct {
	dirRemote
	stats atomic.Int32
}

func (d *tarRemote) Stat(ctx context.Context, p string, f bool) (archive.Kind, error) {
	d.stats.Add(1)
	return d.dirRemote.Stat(ctx, p, f)
}

func (d *tarRemote) Download(ctx context.Context, spec DownloadSpec) (Stats, error) {
	dir := filepath.Join(d.root, spec.Dir)
	for _, n := range spec.Names {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			return Stats{}, &fs.PathError{Op: "get", Path: filepath.Join(spec.Dir, n), Err: fs.ErrNotExist}
		}
	}
	pr, pw := io.Pipe()
	go func() {
		w := archive.NewWriter(pw)
		var err error
		for _, n := range spec.Names {
			if n == "." {
				err = w.AddRoot(ctx, dir)
			} else {
				err = w.Add(ctx, filepath.Join(dir, n), n)
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			err = w.Close()
		}
		pw.CloseWithError(err)
	}()
	st, err := archive.Extract(ctx, pr, spec.Local, archive.ExtractOptions{Place: spec.Place, Names: spec.Names})
	pr.CloseWithError(io.ErrClosedPipe)
	return Stats{Files: st.Files, Dirs: st.Dirs, Symlinks: st.Symlinks, Bytes: st.Bytes}, err
}

// TestDownloadStats: one source to a directory or a missing path goes
// without a stat first, and counts what it moved as the copy of the
// contents does; where the source's kind decides, or the source is
// missing, the stat is made.
func TestDownloadStats(t *testing.T) {
	for _, tc := range []struct {
		name      string
		srcs      []string
		pre       string // "dir" or "file": what dst is before
		wantStats int32
		want      Stats
		wantErr   error
	}{
		{name: "dir to missing", srcs: []string{"tree"}, wantStats: 0, want: Stats{Files: 2, Dirs: 1, Bytes: 6}},
		{name: "contents to missing", srcs: []string{"tree/."}, wantStats: 1, want: Stats{Files: 2, Dirs: 1, Bytes: 6}},
		{name: "dir into dir", srcs: []string{"tree"}, pre: "dir", wantStats: 0, want: Stats{Files: 2, Dirs: 2, Bytes: 6}},
		{name: "file to missing", srcs: []string{"tree/a"}, wantStats: 0, want: Stats{Files: 1, Bytes: 3}},
		{name: "file over file", srcs: []string{"tree/a"}, pre: "file", wantStats: 1, want: Stats{Files: 1, Bytes: 3}},
		{name: "missing source", srcs: []string{"absent"}, wantStats: 1, wantErr: ErrNoSource},
		{name: "missing parent", srcs: []string{"absent/x"}, wantStats: 1, wantErr: ErrNoSource},
		{name: "dir over file", srcs: []string{"tree"}, pre: "file", wantStats: 1, wantErr: errAnyDownload},
		{name: "several", srcs: []string{"tree/a", "tree/sub"}, pre: "dir", wantStats: 2, want: Stats{Files: 2, Dirs: 1, Bytes: 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &tarRemote{dirRemote: dirRemote{root: t.TempDir()}}
			for p, c := range map[string]string{"tree/a": "aaa", "tree/sub/b": "bbb"} {
				full := filepath.Join(r.root, p)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dst := filepath.Join(t.TempDir(), "dst")
			switch tc.pre {
			case "dir":
				if err := os.Mkdir(dst, 0o755); err != nil {
					t.Fatal(err)
				}
			case "file":
				if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			st, err := Download(context.Background(), r, tc.srcs, dst, archive.Limits{})
			switch {
			case tc.wantErr == errAnyDownload && err == nil:
				t.Fatal("download succeeded, want an error")
			case tc.wantErr != nil && tc.wantErr != errAnyDownload && !errors.Is(err, tc.wantErr):
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && err != nil:
				t.Fatal(err)
			case tc.wantErr == nil && st != tc.want:
				t.Errorf("stats = %+v, want %+v", st, tc.want)
			}
			if got := r.stats.Load(); got != tc.wantStats {
				t.Errorf("%d stats asked, want %d", got, tc.wantStats)
			}
		})
	}
}

var errAnyDownload = errors.New("any error")
