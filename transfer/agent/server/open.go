package server

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fileOpener opens the regular files a scan or a chunk read reads, by
// their paths in root: one openat(2) of the last name in a held
// descriptor of its directory. os.Root.OpenFile opens every component
// from the root again and offers the file to the runtime's poller, which
// was two thirds of a scan of many small files. The directory is opened
// through the root, so nothing outside it is reached, and the last name
// is opened as POSIX mode's and the old scan's were: never through a
// symlink (ELOOP), never blocking on a FIFO swapped in (O_NONBLOCK, which
// reads of a regular file ignore).
type fileOpener struct {
	root *os.Root
	dir  *os.File
	rc   syscall.RawConn
	name string // dir's path in root
}

// open opens p, a path in root as fs.ValidPath has them.
func (o *fileOpener) open(p string) (*scanFile, error) {
	if !fs.ValidPath(p) || p == "." {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrInvalid}
	}
	dir, base := path.Split(p)
	dir = path.Clean(dir) // "." for none, and no trailing slash
	if o.dir == nil || o.name != dir {
		o.close()
		d, err := o.root.Open(dir)
		if err != nil {
			return nil, err
		}
		rc, err := d.SyscallConn()
		if err != nil {
			d.Close()
			return nil, err
		}
		o.dir, o.rc, o.name = d, rc, dir
	}
	fd := -1
	var oerr error
	if err := o.rc.Control(func(dfd uintptr) {
		for {
			fd, oerr = unix.Openat(int(dfd), base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
			if oerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return nil, err
	}
	if oerr != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: oerr}
	}
	return &scanFile{fd: fd, name: p}, nil
}

func (o *fileOpener) close() {
	if o.dir != nil {
		o.dir.Close()
		o.dir, o.rc = nil, nil
	}
}

// scanFile is an open file as a bare descriptor: no finalizer, no
// poller. Whoever opens one closes it.
type scanFile struct {
	fd   int // -1 once closed
	name string
}

func (f *scanFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := unix.Read(f.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// ReadAt reads len(p) bytes at off, or fails: io.EOF when the file ends
// first.
func (f *scanFile) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		k, err := unix.Pread(f.fd, p[n:], off+int64(n))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return n, &fs.PathError{Op: "read", Path: f.name, Err: err}
		case k == 0:
			return n, io.EOF
		}
		n += k
	}
	return n, nil
}

// stat is the open file's type, permission bits (with setuid, setgid and
// sticky, as os.FileMode has them) and mtime.
func (f *scanFile) stat() (regular bool, mode fs.FileMode, mtime time.Time, err error) {
	var st unix.Stat_t
	for {
		err = unix.Fstat(f.fd, &st)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return false, 0, time.Time{}, &fs.PathError{Op: "fstat", Path: f.name, Err: err}
	}
	mode = fs.FileMode(st.Mode & 0o777)
	for _, b := range []struct {
		bit uint32
		m   fs.FileMode
	}{{unix.S_ISUID, fs.ModeSetuid}, {unix.S_ISGID, fs.ModeSetgid}, {unix.S_ISVTX, fs.ModeSticky}} {
		if uint32(st.Mode)&b.bit != 0 {
			mode |= b.m
		}
	}
	return uint32(st.Mode)&unix.S_IFMT == unix.S_IFREG, mode, time.Unix(st.Mtim.Unix()), nil
}

func (f *scanFile) Close() error {
	if f.fd < 0 {
		return os.ErrClosed
	}
	err := unix.Close(f.fd)
	f.fd = -1
	if err != nil && !errors.Is(err, unix.EINTR) {
		return &fs.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}
