//go:build unix

package fdfile

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// File is an open file. Its errors are *os.PathError naming it.
type File struct {
	fd   int // -1 once closed
	name string
}

// Open opens path with open(2)'s flags and perm; O_CLOEXEC is added.
func Open(path string, flags int, perm uint32) (*File, error) {
	var fd int
	err := retry(func() (err error) {
		fd, err = unix.Open(path, flags|unix.O_CLOEXEC, perm)
		return err
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &File{fd: fd, name: path}, nil
}

// OpenAt opens name, which should be one path element, in the open
// directory dir, with openat(2)'s flags and perm; O_CLOEXEC is added. The
// File is named name.
func OpenAt(dir *os.File, name string, flags int, perm uint32) (*File, error) {
	rc, err := dir.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var oerr error
	if err := rc.Control(func(dfd uintptr) {
		oerr = retry(func() (err error) {
			fd, err = unix.Openat(int(dfd), name, flags|unix.O_CLOEXEC, perm)
			return err
		})
	}); err != nil {
		return nil, err
	}
	if oerr != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: oerr}
	}
	return &File{fd: fd, name: name}, nil
}

// Fd is the descriptor, valid until Close.
func (f *File) Fd() int { return f.fd }

// Name is the name the File was opened by.
func (f *File) Name() string { return f.name }

func (f *File) Read(p []byte) (int, error) {
	if f.fd < 0 {
		return 0, os.ErrClosed
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := unix.Read(f.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, f.err("read", err)
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// ReadAt reads len(p) bytes at off, or fails: io.EOF when the file ends
// first.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if f.fd < 0 {
		return 0, os.ErrClosed
	}
	n := 0
	for n < len(p) {
		k, err := unix.Pread(f.fd, p[n:], off+int64(n))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return n, f.err("read", err)
		case k == 0:
			return n, io.EOF
		}
		n += k
	}
	return n, nil
}

// Write writes all of p or fails: a short write(2) (a signal, a full
// pipe) is resumed, as os.File's Write does.
func (f *File) Write(p []byte) (int, error) {
	if f.fd < 0 {
		return 0, os.ErrClosed
	}
	n := 0
	for n < len(p) {
		k, err := unix.Write(f.fd, p[n:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return n, f.err("write", err)
		case k <= 0:
			return n, f.err("write", io.ErrShortWrite)
		}
		n += k
	}
	return n, nil
}

// Stat is fstat(2) of the file.
func (f *File) Stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	if f.fd < 0 {
		return st, os.ErrClosed
	}
	if err := retry(func() error { return unix.Fstat(f.fd, &st) }); err != nil {
		return st, f.err("fstat", err)
	}
	return st, nil
}

// Chmod sets the file's mode to perm, unix bits (setuid, setgid and
// sticky at 0o4000, 0o2000 and 0o1000).
func (f *File) Chmod(perm uint32) error {
	if err := retry(func() error { return unix.Fchmod(f.fd, perm) }); err != nil {
		return f.err("chmod", err)
	}
	return nil
}

func (f *File) Chown(uid, gid int) error {
	if err := retry(func() error { return unix.Fchown(f.fd, uid, gid) }); err != nil {
		return f.err("chown", err)
	}
	return nil
}

func (f *File) Close() error {
	if f.fd < 0 {
		return os.ErrClosed
	}
	err := unix.Close(f.fd)
	f.fd = -1
	if err != nil && err != unix.EINTR {
		// After EINTR the descriptor is gone all the same on Linux.
		return f.err("close", err)
	}
	return nil
}

func (f *File) err(op string, err error) error {
	return &os.PathError{Op: op, Path: f.name, Err: err}
}

// retry calls fn until it fails with other than EINTR.
func retry(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}
