package posix_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// cutReader gives the first n bytes of b, then end.
type cutReader struct {
	r   *bytes.Reader
	end error
}

func cut(b []byte, n int, end error) io.Reader {
	return &cutReader{r: bytes.NewReader(b[:n]), end: end}
}

func (c *cutReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if errors.Is(err, io.EOF) {
		return n, c.end
	}
	return n, err
}

// TestUploadTruncated feeds archives that stop short: in the middle of a
// file, between two entries (which both tars would accept), and with a
// read error. Each is an error, no temp dir stays, dest is not created.
func TestUploadTruncated(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	arch := tarOf(t, true, sampleTree)
	// The offset just after "a/hello.txt": the next header starts there.
	boundary := len(tarOf(t, true, sampleTree[:2])) - 1024
	cases := []struct {
		name string
		r    func() io.Reader
		want error
	}{
		{"MidFile", func() io.Reader { return cut(arch, len(arch)-100<<10, io.EOF) }, posix.ErrTruncated},
		{"Boundary", func() io.Reader { return cut(arch, boundary, io.EOF) }, posix.ErrTruncated},
		{"ReadError", func() io.Reader { return cut(arch, len(arch)/2, io.ErrUnexpectedEOF) }, io.ErrUnexpectedEOF},
		{"Empty", func() io.Reader { return strings.NewReader("") }, posix.ErrTruncated},
	}
	for _, f := range flavors {
		for _, tc := range cases {
			for _, place := range []posix.Placement{posix.PlaceNew, posix.PlaceInto} {
				t.Run(f.name+"/"+tc.name+"/"+place.String(), func(t *testing.T) {
					// Each waits out the cleanup's grace for a script
					// that was killed before it made its temp dir.
					t.Parallel()
					b := newBox(t, g, c, f, "")
					dest := "new"
					if place == posix.PlaceInto {
						dest = "into"
						os.MkdirAll(filepath.Join(b.dir, dest), 0o755)
					}
					before := snapshot(t, b.dir)
					_, err := b.r.Upload(ctxFor(t), tc.r(), dest, place, -1)
					if !errors.Is(err, tc.want) {
						t.Fatalf("err = %v, want %v", err, tc.want)
					}
					// One sentinel for a truncated stream, whatever the
					// mode or side that found it.
					if tc.want == posix.ErrTruncated && !errors.Is(err, archive.ErrTruncated) {
						t.Fatalf("err = %v, want it to match archive.ErrTruncated", err)
					}
					if after := snapshot(t, b.dir); after != before {
						t.Fatalf("sandbox changed (err %v):\n%s\nwas\n%s", err, after, before)
					}
					noLeftovers(t, b.dir)
				})
			}
		}
	}
}

// TestUploadCorrupt gives tar an archive that ends properly but is no tar
// stream: tar's own failure, with its stderr.
func TestUploadCorrupt(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	bad := append(bytes.Repeat([]byte("not a tar header "), 512/16*2)[:1024], make([]byte, 1024)...)
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "")
			_, err := b.r.Upload(ctxFor(t), bytes.NewReader(bad), "new", posix.PlaceNew, -1)
			var ee *posix.ExitError
			if !errors.As(err, &ee) || ee.Op != "tar -x" || ee.Code == 0 || !strings.Contains(ee.Stderr, "tar") {
				t.Fatalf("err = %v, want a tar -x ExitError with tar's stderr", err)
			}
			if _, err := os.Lstat(filepath.Join(b.dir, "new")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("dest created: %v", err)
			}
			noLeftovers(t, b.dir)
		})
	}
}

func TestUploadEntryCount(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "")
			for _, want := range []int64{0, int64(len(sampleTree)) - 1, int64(len(sampleTree)) + 1} {
				_, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, sampleTree)), "new", posix.PlaceNew, want)
				if !errors.Is(err, posix.ErrEntryCount) || !errors.Is(err, archive.ErrShort) {
					t.Fatalf("want %d: err = %v, want ErrEntryCount matching archive.ErrShort", want, err)
				}
				if _, err := os.Lstat(filepath.Join(b.dir, "new")); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("dest created: %v", err)
				}
				noLeftovers(t, b.dir)
			}
		})
	}
}

func TestDownloadMissing(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "")
			os.MkdirAll(filepath.Join(b.dir, "src dir"), 0o755)
			os.WriteFile(filepath.Join(b.dir, "src dir/here"), []byte("x"), 0o644)
			os.Symlink("nowhere", filepath.Join(b.dir, "src dir/dangling"))
			for _, tc := range []struct {
				dir   string
				names []string
				path  string
				err   error
			}{
				{"src dir", []string{"here", "-gone"}, "src dir/-gone", posix.ErrNotExist},
				{"src dir", []string{"gone/deeper"}, "src dir/gone/deeper", posix.ErrNotExist},
				{"no dir", []string{"here"}, "no dir", posix.ErrNotExist},
				{"src dir/here", []string{"x"}, "src dir/here", posix.ErrNotDir},
			} {
				var out bytes.Buffer
				_, err := b.r.Download(ctxFor(t), tc.dir, tc.names, &out)
				wantPathErr(t, err, tc.err, tc.path)
				if out.Len() != 0 {
					t.Fatalf("%d bytes written for a refused download", out.Len())
				}
			}
			// A dangling symlink is there: tar archives the link.
			var out bytes.Buffer
			if _, err := b.r.Download(ctxFor(t), "src dir", []string{"dangling"}, &out); err != nil {
				t.Fatal(err)
			}
			if got := untar(t, out.Bytes()); !got["dangling"].link {
				t.Fatalf("downloaded %v", got)
			}
			_, err := b.r.Download(ctxFor(t), "no dir", []string{"x"}, &out)
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%v is not fs.ErrNotExist", err)
			}
		})
	}
}

// TestTarFails puts a tar that fails first on PATH: both directions report
// its exit status and its stderr.
func TestTarFails(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	b := newBox(t, g, c, flavors[0], "")
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "tar"), []byte("#!/bin/sh\necho 'tar: disk on fire' >&2\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, ".profile"), []byte("export PATH="+bin+":$PATH\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(b.dir, "src"), 0o755)
	for _, op := range []string{"tar -c", "tar -x"} {
		var err error
		if op == "tar -c" {
			_, err = b.r.Download(ctxFor(t), "src", []string{"."}, io.Discard)
		} else {
			_, err = b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, sampleTree)), "new", posix.PlaceNew, -1)
		}
		var ee *posix.ExitError
		if !errors.As(err, &ee) || ee.Op != op || ee.Code != 2 || ee.Stderr != "tar: disk on fire" {
			t.Fatalf("%s: err = %#v (%v)", op, ee, err)
		}
	}
	noLeftovers(t, b.dir)
}
