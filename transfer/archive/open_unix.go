//go:build unix

package archive

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The files a Writer reads and the extractor creates are bare
// descriptors (fdFile), not *os.File. os.Open offers every file to the
// runtime's poller (on Linux four fcntl(2) and a failing epoll_ctl(2) per
// regular file), and an *os.File costs a finalizer and the poller's
// bookkeeping on close: together as much again as the open, the copy and
// the close themselves, which on many small files is most of the time.
// A regular file is never pollable, so plain blocking syscalls are what
// os.File would end up making for it anyway.

// openListed opens the regular file p that a listing found as fi, for
// reading, and fails with errReplaced when p is no longer that file.
// O_NONBLOCK, which reads of a regular file ignore, makes a FIFO put in
// the file's place open at once (and be refused) rather than hang the
// open until a writer comes.
func openListed(p string, fi fs.FileInfo) (io.ReadCloser, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	want, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Dev) != uint64(want.Dev) || uint64(st.Ino) != uint64(want.Ino) {
		unix.Close(fd)
		return nil, errReplaced
	}
	return &fdFile{fd: fd, name: p}, nil
}

// createAt creates the regular file base (one path element) in the open
// directory dir, exclusively and without following a symlink there, mode
// 0600, for writing.
func createAt(dir *os.File, base string) (stagedFile, error) {
	rc, err := dir.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var oerr error
	if err := rc.Control(func(dfd uintptr) {
		for {
			fd, oerr = unix.Openat(int(dfd), base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0o600)
			if oerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return nil, err
	}
	if oerr != nil {
		return nil, &os.PathError{Op: "openat", Path: base, Err: oerr}
	}
	return &fdFile{fd: fd, name: base}, nil
}

// fdFile is an open regular file as a bare descriptor. It has no
// finalizer: whoever opens one closes it.
type fdFile struct {
	fd   int // -1 once closed
	name string
}

func (f *fdFile) Read(p []byte) (int, error) {
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
			return 0, &os.PathError{Op: "read", Path: f.name, Err: err}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write writes all of p or fails: a short write(2) (a signal, a full
// pipe) is resumed, as os.File's Write does.
func (f *fdFile) Write(p []byte) (int, error) {
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
			return n, &os.PathError{Op: "write", Path: f.name, Err: err}
		case k <= 0:
			return n, &os.PathError{Op: "write", Path: f.name, Err: io.ErrShortWrite}
		}
		n += k
	}
	return n, nil
}

func (f *fdFile) Close() error {
	if f.fd < 0 {
		return os.ErrClosed
	}
	err := unix.Close(f.fd)
	f.fd = -1
	if err != nil && err != unix.EINTR {
		// After EINTR the descriptor is gone all the same on Linux.
		return &os.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}

func (f *fdFile) Chmod(mode fs.FileMode) error {
	if err := ignoringEINTR(func() error { return unix.Fchmod(f.fd, uint32(ModeBits(mode))) }); err != nil {
		return &os.PathError{Op: "chmod", Path: f.name, Err: err}
	}
	return nil
}

func (f *fdFile) Chown(uid, gid int) error {
	if err := ignoringEINTR(func() error { return unix.Fchown(f.fd, uid, gid) }); err != nil {
		return &os.PathError{Op: "chown", Path: f.name, Err: err}
	}
	return nil
}

func (f *fdFile) SetMtime(mtime time.Time) error {
	err := ignoringEINTR(func() error { return futimens(f.fd, mtime) })
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return &os.PathError{Op: "futimens", Path: f.name, Err: err}
	}
	return err
}

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}
