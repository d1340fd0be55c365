//go:build unix

package archive

import (
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ferry-dev/ferry/internal/fdfile"
)

// The files a Writer reads and the extractor creates are bare
// descriptors (package fdfile), not *os.File: on many small files the
// poller's part of an *os.File is as much again as the work.

// openListed opens the regular file p that a listing found as fi, for
// reading, and fails with errReplaced when p is no longer that file.
// O_NONBLOCK, which reads of a regular file ignore, makes a FIFO put in
// the file's place open at once (and be refused) rather than hang the
// open until a writer comes.
func openListed(p string, fi fs.FileInfo) (io.ReadCloser, error) {
	f, err := fdfile.Open(p, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	want, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Dev) != uint64(want.Dev) || uint64(st.Ino) != uint64(want.Ino) {
		f.Close()
		return nil, errReplaced
	}
	return f, nil
}

// createAt creates the regular file base (one path element) in the open
// directory dir, exclusively and without following a symlink there, mode
// perm less the umask, for writing.
func createAt(dir *os.File, base string, perm uint32) (stagedFile, error) {
	f, err := fdfile.OpenAt(dir, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NOCTTY, perm)
	if err != nil {
		return nil, err
	}
	return fdFile{f}, nil
}

// fdFile is the stagedFile of a bare descriptor: its Chmod takes an
// fs.FileMode.
type fdFile struct{ *fdfile.File }

func (f fdFile) Chmod(mode fs.FileMode) error { return f.File.Chmod(uint32(ModeBits(mode))) }
