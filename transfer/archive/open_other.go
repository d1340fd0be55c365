//go:build !unix

package archive

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"time"
)

func openListed(p string, fi fs.FileInfo) (io.ReadCloser, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	if ofi, err := f.Stat(); err != nil {
		f.Close()
		return nil, err
	} else if !os.SameFile(fi, ofi) {
		f.Close()
		return nil, errReplaced
	}
	return f, nil
}

func createAt(dir *os.File, base string, perm uint32) (stagedFile, error) {
	r, err := os.OpenRoot(dir.Name())
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(perm))
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// osFile is a stagedFile whose mtime is set by path.
type osFile struct{ *os.File }

func (osFile) SetMtime(time.Time) error { return errors.ErrUnsupported }
