//go:build unix

package archive

import (
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openListed opens the regular file p that a listing found as fi, for
// reading, and fails with errReplaced when p is no longer that file.
//
// os.Open offers every file to the runtime's poller: on Linux that is
// four fcntl(2) and a failing epoll_ctl(2) per regular file, as many
// syscalls again as the open and the read, which on many small files is
// most of a Writer's time. os.NewFile offers only a non-blocking
// descriptor; O_NONBLOCK, which reads of a regular file ignore, costs
// that one epoll_ctl but makes a FIFO put in the file's place open at
// once (and be refused) rather than hang the open until a writer comes.
func openListed(p string, fi fs.FileInfo) (*os.File, error) {
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
	return os.NewFile(uintptr(fd), p), nil
}

// createAt creates the regular file base (one path element) in the open
// directory dir, exclusively and without following a symlink there, mode
// 0600, for writing; see openRead for why not through os.
func createAt(dir *os.File, base string) (*os.File, error) {
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
	return os.NewFile(uintptr(fd), base), nil
}
