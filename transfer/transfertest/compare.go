package transfertest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Compare says how strictly two trees must match. The zero value is exact.
type Compare struct {
	// MtimeGranularity, when set, compares mtimes truncated to it
	// (time.Second for archivers that store whole seconds).
	MtimeGranularity time.Duration
	// IgnoreDirMtimes and IgnoreSymlinkMtimes skip those mtimes, for
	// archivers that do not restore them.
	IgnoreDirMtimes, IgnoreSymlinkMtimes bool
}

// EqualTrees fails t unless the trees under want and got hold the same
// names with the same types, permission bits (setuid, setgid and sticky
// included), nanosecond mtimes, symlink targets and file contents. The two
// roots themselves are not compared.
func EqualTrees(t testing.TB, want, got string) {
	t.Helper()
	Compare{}.Equal(t, want, got)
}

// Equal is EqualTrees with c's tolerances.
func (c Compare) Equal(t testing.TB, want, got string) {
	t.Helper()
	w, err := list(want)
	if err != nil {
		t.Fatalf("list %s: %v", want, err)
	}
	g, err := list(got)
	if err != nil {
		t.Fatalf("list %s: %v", got, err)
	}
	var diffs []string
	for name, wi := range w {
		gi, ok := g[name]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%q: missing", name))
			continue
		}
		if d := c.diff(name, filepath.Join(want, name), filepath.Join(got, name), wi, gi); d != "" {
			diffs = append(diffs, d)
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%q: unexpected", name))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		if len(diffs) > 20 {
			diffs = append(diffs[:20], fmt.Sprintf("... and %d more", len(diffs)-20))
		}
		t.Errorf("trees %s and %s differ:\n%s", want, got, strings.Join(diffs, "\n"))
	}
}

const modeBits = fs.ModeType | fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

func (c Compare) diff(name, wp, gp string, wi, gi fs.FileInfo) string {
	if wm, gm := wi.Mode()&modeBits, gi.Mode()&modeBits; wm != gm {
		return fmt.Sprintf("%q: mode %v, want %v", name, gm, wm)
	}
	checkTime := true
	switch {
	case wi.IsDir():
		checkTime = !c.IgnoreDirMtimes
	case wi.Mode()&fs.ModeSymlink != 0:
		checkTime = !c.IgnoreSymlinkMtimes
		wt, err1 := os.Readlink(wp)
		gt, err2 := os.Readlink(gp)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Sprintf("%q: %v", name, err)
		}
		if wt != gt {
			return fmt.Sprintf("%q: link to %q, want %q", name, gt, wt)
		}
	case wi.Mode().IsRegular():
		if wi.Size() != gi.Size() {
			return fmt.Sprintf("%q: %d bytes, want %d", name, gi.Size(), wi.Size())
		}
		if err := sameContent(wp, gp); err != nil {
			return fmt.Sprintf("%q: %v", name, err)
		}
	}
	if checkTime {
		wt, gt := wi.ModTime(), gi.ModTime()
		if c.MtimeGranularity > 0 {
			wt, gt = wt.Truncate(c.MtimeGranularity), gt.Truncate(c.MtimeGranularity)
		}
		if !wt.Equal(gt) {
			return fmt.Sprintf("%q: mtime %v, want %v", name, gi.ModTime().UTC(), wi.ModTime().UTC())
		}
	}
	return ""
}

func sameContent(a, b string) error {
	fa, err := os.Open(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return err
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for off := int64(0); ; {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return fmt.Errorf("contents differ after byte %d", off)
		}
		off += int64(na)
		if erra != nil || errb != nil {
			if (erra == io.EOF || erra == io.ErrUnexpectedEOF) && (errb == io.EOF || errb == io.ErrUnexpectedEOF) {
				return nil
			}
			return errors.Join(erra, errb)
		}
	}
}

// list maps every path under root (slash-separated, root excluded) to its
// Lstat.
func list(root string) (map[string]fs.FileInfo, error) {
	m := map[string]fs.FileInfo{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(root, p)
		m[filepath.ToSlash(r)] = fi
		return nil
	})
	return m, err
}
