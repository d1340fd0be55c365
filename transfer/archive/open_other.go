//go:build !unix

package archive

import (
	"io/fs"
	"os"
)

func openListed(p string, fi fs.FileInfo) (*os.File, error) {
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

func createAt(dir *os.File, base string) (*os.File, error) {
	r, err := os.OpenRoot(dir.Name())
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}
