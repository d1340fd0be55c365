package server

import (
	"io/fs"
	"path"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-dev/ferry/internal/fdfile"
)

// fileOpener opens the regular files a scan or a chunk read reads, by
// their paths in root: one openat(2) of the last name in a held
// descriptor of its directory, as a bare descriptor (package fdfile).
// os.Root.OpenFile opens every component from the root again and offers
// the file to the runtime's poller, which was two thirds of a scan of
// many small files. The directory is opened through the root, so nothing
// outside it is reached, and the last name is opened as POSIX mode's and
// the old scan's were: never through a symlink (ELOOP), never blocking on
// a FIFO swapped in (O_NONBLOCK, which reads of a regular file ignore).
type fileOpener struct{ dir fdfile.HeldDir }

// open opens p, a path in root as fs.ValidPath has them. The file is
// named p in its errors.
func (o *fileOpener) open(p string) (*scanFile, error) {
	if !fs.ValidPath(p) || p == "." {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrInvalid}
	}
	dir, base := path.Split(p)
	dir = path.Clean(dir) // "." for none, and no trailing slash
	d, err := o.dir.Open(dir)
	if err != nil {
		return nil, err
	}
	f, err := fdfile.OpenAt(d, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		if pe, ok := err.(*fs.PathError); ok {
			pe.Path = p
		}
		return nil, err
	}
	return &scanFile{f}, nil
}

func (o *fileOpener) close() { o.dir.Close() }

// scanFile is a file the opener opened.
type scanFile struct{ *fdfile.File }

// stat is the open file's type, mode bits as the wire has them (the
// permissions with setuid, setgid and sticky: archive.ModeBits) and mtime.
func (f *scanFile) stat() (regular bool, mode uint32, mtime time.Time, err error) {
	st, err := f.Stat()
	if err != nil {
		return false, 0, time.Time{}, err
	}
	return uint32(st.Mode)&unix.S_IFMT == unix.S_IFREG, uint32(st.Mode) & 0o7777, time.Unix(st.Mtim.Unix()), nil
}
