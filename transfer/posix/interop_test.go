package posix_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// TestWithTransfer runs the pipeline the CLI builds: archive.Writer on
// the host, Upload with the writer's entry count, Download, and
// archive.Extract on the host; the tree comes back as it left.
func TestWithTransfer(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	src := t.TempDir()
	for _, e := range sampleTree {
		p := filepath.Join(src, filepath.FromSlash(e.name))
		var err error
		switch {
		case e.dir():
			err = os.MkdirAll(p, fs.FileMode(e.mode))
		case e.link:
			err = os.Symlink(e.body, p)
		default:
			err = os.WriteFile(p, []byte(e.body), fs.FileMode(e.mode))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Modes as the entries say (MkdirAll and WriteFile apply the umask),
	// mtimes as tree expects; directories last so that their mtimes stay.
	for i := len(sampleTree) - 1; i >= 0; i-- {
		e := sampleTree[i]
		p := filepath.Join(src, filepath.FromSlash(e.name))
		if !e.link {
			os.Chmod(p, fs.FileMode(e.mode))
			os.Chtimes(p, mtime, mtime)
		}
	}
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "")
			var arch bytes.Buffer
			tw := archive.NewWriter(&arch)
			if err := tw.Add(ctxFor(t), src, "."); err != nil {
				t.Fatal(err)
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			st := tw.Stats()
			n := st.Files + st.Dirs + st.Symlinks
			res, err := b.r.Upload(ctxFor(t), &arch, "up", posix.PlaceNew, n)
			if err != nil {
				t.Fatal(err)
			}
			if res.Entries != n {
				t.Fatalf("Entries %d, writer wrote %d", res.Entries, n)
			}
			sameTree(t, "uploaded", tree(t, filepath.Join(b.dir, "up")), wantTree(sampleTree))

			var back bytes.Buffer
			dres, err := b.r.Download(ctxFor(t), "up", []string{"."}, &back)
			if err != nil {
				t.Fatal(err)
			}
			dest := filepath.Join(t.TempDir(), "back")
			xst, err := archive.Extract(ctxFor(t), &back, dest, archive.ExtractOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if xst.Files+xst.Dirs+xst.Symlinks != n || dres.Entries != n {
				t.Fatalf("Extract counted %+v, Download %d, want %d entries", xst, dres.Entries, n)
			}
			sameTree(t, "round trip", tree(t, dest), wantTree(sampleTree))
		})
	}
}
