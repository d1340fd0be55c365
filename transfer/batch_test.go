package transfer

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// dirRemote is a sandbox in a local directory, placed as the agent
// places: it counts its batched stats and its Puts, and how many Puts
// ran at once.
type dirRemote struct {
	root            string
	statAlls, puts  atomic.Int32
	mu              sync.Mutex
	inflight, most  int
	putWait         time.Duration
	withoutStatAlls bool
}

func (d *dirRemote) Target() Target       { return Target{Name: "box"} }
func (d *dirRemote) Mode() Mode           { return ModeAgent }
func (d *dirRemote) Agent() *agent.Client { return nil }
func (d *dirRemote) Close() error         { return nil }

func (d *dirRemote) Stat(_ context.Context, p string, _ bool) (archive.Kind, error) {
	fi, err := os.Stat(filepath.Join(d.root, p))
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return archive.Missing, nil
	case err != nil:
		return 0, err
	case fi.IsDir():
		return archive.Dir, nil
	case fi.Mode().IsRegular():
		return archive.File, nil
	}
	return archive.Other, nil
}

func (d *dirRemote) statAll(ctx context.Context, paths []string) ([]archive.Kind, error) {
	d.statAlls.Add(1)
	out := make([]archive.Kind, len(paths))
	for i, p := range paths {
		k, err := d.Stat(ctx, p, true)
		if err != nil {
			return nil, err
		}
		out[i] = k
	}
	return out, nil
}

func (d *dirRemote) Upload(ctx context.Context, spec UploadSpec, fill Fill) (Stats, error) {
	d.puts.Add(1)
	d.mu.Lock()
	d.inflight++
	d.most = max(d.most, d.inflight)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.inflight--
		d.mu.Unlock()
	}()
	time.Sleep(d.putWait)
	dest := filepath.Join(d.root, spec.Dest)
	if spec.IntoIfDir {
		// As the agent decides it.
		if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
			spec.Place = archive.PlaceInto
		}
	}
	if spec.Place != archive.PlaceInto {
		if err := os.MkdirAll(filepath.Dir(filepath.Clean(dest)), 0o777); err != nil {
			return Stats{}, err
		}
	}
	pr, pw := io.Pipe()
	go func() {
		w := archive.NewWriter(pw)
		err := fill(w)
		if err == nil {
			err = w.Close()
		}
		pw.CloseWithError(err)
	}()
	st, err := archive.Extract(ctx, pr, dest, archive.ExtractOptions{Place: spec.Place})
	pr.CloseWithError(io.ErrClosedPipe)
	return Stats{Files: st.Files, Dirs: st.Dirs, Bytes: st.Bytes}, err
}

func (d *dirRemote) Download(context.Context, DownloadSpec) (Stats, error) {
	return Stats{}, errors.New("no download here")
}

func (d *dirRemote) Present(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("no present here")
}

// autoRemote is a dirRemote that places as UploadSpec.IntoIfDir says,
// as the agent does.
type autoRemote struct{ *dirRemote }

func (autoRemote) intoIfDir() {}

// noBatch is a dirRemote without batched stats: POSIX mode's path.
type noBatch struct{ d *dirRemote }

func (n noBatch) Target() Target       { return n.d.Target() }
func (n noBatch) Mode() Mode           { return ModePOSIX }
func (n noBatch) Agent() *agent.Client { return nil }
func (n noBatch) Close() error         { return nil }
func (n noBatch) Stat(ctx context.Context, p string, f bool) (archive.Kind, error) {
	return n.d.Stat(ctx, p, f)
}
func (n noBatch) Upload(ctx context.Context, s UploadSpec, f Fill) (Stats, error) {
	return n.d.Upload(ctx, s, f)
}
func (n noBatch) Download(ctx context.Context, s DownloadSpec) (Stats, error) {
	return n.d.Download(ctx, s)
}
func (n noBatch) Present(ctx context.Context, dir string, names []string) ([]string, error) {
	return n.d.Present(ctx, dir, names)
}

// TestUploadSteps: a batch of uploads lands as the same uploads one by
// one do (Upload's cp semantics, each against what the ones before it
// left), with one batched stat where the model of the sandbox knows the
// answers, the uploads into one directory in one Put, and Puts to
// unrelated paths at once.
func TestUploadSteps(t *testing.T) {
	type job struct{ src, dst string }
	for _, tc := range []struct {
		name     string
		sandbox  map[string]string // "dir/" is a directory
		jobs     []job
		statAlls int32
		puts     int32
		most     int  // Puts at once
		failStep int  // -1: none
		auto     bool // every job single, unrelated: placed by the agent
	}{
		{"run dir", nil, []job{{"instructions.md", "work/instructions.md"}, {"context", "work/context"}}, 1, 1, 1, -1, true},
		{"into an existing dir", map[string]string{"work/": "", "work/old": "old"}, []job{{"instructions.md", "work/instructions.md"}, {"context", "work/context"}, {"context", "work/"}}, 1, 2, 1, -1, false},
		{"unrelated", nil, []job{{"instructions.md", "a/x"}, {"context", "b/ctx"}}, 1, 2, 2, -1, true},
		{"inside an uploaded tree", nil, []job{{"context", "work"}, {"instructions.md", "work/sub/new.md"}, {"instructions.md", "work/sub"}}, 2, 2, 1, -1, false},
		{"one name twice", nil, []job{{"instructions.md", "work/a"}, {"other.md", "work/a"}}, 1, 2, 1, -1, false},
		{"a dir into the dir it made", nil, []job{{"context", "out"}, {"context", "out"}}, 1, 2, 1, -1, false},
		{"contents", map[string]string{"w/": ""}, []job{{"context/.", "w"}, {"instructions.md", "w/i.md"}}, 1, 2, 1, -1, false},
		{"over a file", map[string]string{"x": "file"}, []job{{"instructions.md", "y/i.md"}, {"other.md", "x/o.md"}}, 1, 1, 1, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := t.TempDir()
			if err := os.MkdirAll(filepath.Join(local, "context", "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			transfertest.RandomTree(t, filepath.Join(local, "context"), 7, transfertest.TreeOptions{Entries: 12})
			for name, body := range map[string]string{"instructions.md": "do it\n", "other.md": "other\n"} {
				if err := os.WriteFile(filepath.Join(local, name), []byte(body), 0o640); err != nil {
					t.Fatal(err)
				}
			}
			sandbox := func() string {
				dir := t.TempDir()
				for p, body := range tc.sandbox {
					full := filepath.Join(dir, p)
					if strings.HasSuffix(p, "/") {
						if err := os.MkdirAll(full, 0o755); err != nil {
							t.Fatal(err)
						}
						continue
					}
					if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
					if err := os.Chtimes(full, time.Unix(1e9, 0), time.Unix(1e9, 0)); err != nil {
						t.Fatal(err)
					}
				}
				return dir
			}
			ctx := context.Background()
			want := &dirRemote{root: sandbox()}
			wantFail := -1
			src := func(p string) string { return local + "/" + p } // keeps "dir/."
			for i, j := range tc.jobs {
				if _, err := Upload(ctx, want, []string{src(j.src)}, j.dst); err != nil {
					wantFail = i
					break
				}
			}
			if wantFail != tc.failStep {
				t.Fatalf("one by one, step %d failed, want %d", wantFail, tc.failStep)
			}
			for _, how := range []string{"batched", "one by one", "auto"} {
				batched := how != "one by one"
				d := &dirRemote{root: sandbox(), putWait: 20 * time.Millisecond}
				var r Remote = d
				switch how {
				case "one by one":
					r = noBatch{d}
				case "auto":
					r = autoRemote{d}
				}
				var steps []Step
				for _, j := range tc.jobs {
					st, err := UploadStep("box", []string{src(j.src)}, j.dst)
					if err != nil {
						t.Fatal(err)
					}
					steps = append(steps, st)
				}
				_, err := UploadSteps(ctx, r, steps)
				var se *StepError
				switch {
				case tc.failStep < 0 && err != nil:
					t.Fatalf("batched %v: %v", batched, err)
				case tc.failStep >= 0 && (!errors.As(err, &se) || len(se.Steps) != 1 || se.Steps[0] != tc.failStep):
					t.Fatalf("batched %v: err %v, want step %d's", batched, err, tc.failStep)
				}
				// The directories the uploads made are stamped when made;
				// those that are a source's have its mtime.
				transfertest.Compare{IgnoreDirMtimes: true}.Equal(t, want.root, d.root)
				sameDirMtimes(t, filepath.Join(local, "context"), want.root, d.root)
				if !batched {
					continue
				}
				statAlls, puts, most := tc.statAlls, tc.puts, tc.most
				if how == "auto" && tc.auto {
					// The agent places each: no stat, one Put each, at once.
					statAlls, puts, most = 0, int32(len(tc.jobs)), len(tc.jobs)
				}
				if got := d.statAlls.Load(); got != statAlls {
					t.Errorf("%s: %d batched stats, want %d", how, got, statAlls)
				}
				if got := d.puts.Load(); got != puts {
					t.Errorf("%s: %d Puts, want %d", how, got, puts)
				}
				if d.most != most {
					t.Errorf("%s: %d Puts at once, want %d", how, d.most, most)
				}
			}
		})
	}
}

// sameDirMtimes fails unless every directory of want that has the mtime
// of the local directory src has it in got too.
func sameDirMtimes(t *testing.T, src, want, got string) {
	t.Helper()
	sfi, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(want, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return err
		}
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Equal(sfi.ModTime()) {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		gfi, err := os.Stat(filepath.Join(got, rel))
		if err != nil || !gfi.ModTime().Equal(sfi.ModTime()) {
			t.Errorf("%s: %v, %v; want the mtime of its source %v", rel, gfi.ModTime(), err, sfi.ModTime())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
