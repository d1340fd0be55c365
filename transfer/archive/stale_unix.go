//go:build unix

package archive

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lockStage makes the marker of the fresh staging directory dir (still
// under its first name) and returns it locked; closing it releases the
// lock. The marker says whose it is, for a human who finds one; only its
// first line is checked.
func lockStage(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	host, _ := os.Hostname()
	if _, err := fmt.Fprintf(f, "%spid %d\nhost %s\nstart %s\n", stagingMagic, os.Getpid(), strconv.Quote(host), time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func flock(f *os.File, how int) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := sc.Control(func(fd uintptr) {
		for {
			ferr = unix.Flock(int(fd), how)
			if ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}

// staging is one candidate directory, opened without following symlinks.
type staging struct {
	dir  string
	dfd  int         // the directory
	fi   os.FileInfo // its Lstat
	lock *os.File    // its marker, nil when it has none
}

// openStaging opens dir if it is a real directory of this user's, and its
// marker if it has one. ok is false for anything else (left alone).
func openStaging(dir string) (s *staging, ok bool, err error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, err
	}
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !isStat || int(st.Uid) != os.Geteuid() {
		return nil, false, nil
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, false, nil
		}
		return nil, false, err
	}
	s = &staging{dir: dir, dfd: dfd, fi: fi}
	var dst unix.Stat_t
	if err := unix.Fstat(dfd, &dst); err != nil || uint64(dst.Dev) != uint64(st.Dev) || uint64(dst.Ino) != uint64(st.Ino) {
		s.close()
		return nil, false, err
	}
	lfd, err := unix.Openat(dfd, lockName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return s, true, nil
	case errors.Is(err, unix.ELOOP):
		// A symlink where the marker goes: not ferry's.
		s.close()
		return nil, false, nil
	case err != nil:
		s.close()
		return nil, false, err
	}
	s.lock = os.NewFile(uintptr(lfd), filepath.Join(dir, lockName))
	lfi, err := s.lock.Stat()
	if err != nil || !lfi.Mode().IsRegular() {
		s.close()
		return nil, false, err
	}
	head := make([]byte, len(stagingMagic))
	if n, _ := s.lock.ReadAt(head, 0); n != len(head) || !bytes.Equal(head, []byte(stagingMagic)) {
		s.close()
		return nil, false, nil
	}
	return s, true, nil
}

func (s *staging) close() {
	if s.lock != nil {
		s.lock.Close()
	}
	unix.Close(s.dfd)
}

// take locks s's marker without waiting. ok is false while its owner
// holds it, and when the marker is no longer s's (removed or replaced
// since it was opened: someone else removed the directory).
func (s *staging) take() (ok bool, err error) {
	if err := flock(s.lock, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		}
		return false, err
	}
	var now unix.Stat_t
	if err := unix.Fstatat(s.dfd, lockName, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	lfi, err := s.lock.Stat()
	if err != nil {
		return false, err
	}
	held, isStat := lfi.Sys().(*syscall.Stat_t)
	return isStat && uint64(now.Dev) == uint64(held.Dev) && uint64(now.Ino) == uint64(held.Ino), nil
}

// unmarkedStale reports whether s, which has no marker, holds only what
// a staging directory holds and has not changed for staleNoMarker.
func (s *staging) unmarkedStale(now time.Time) bool {
	if now.Sub(s.fi.ModTime()) < staleNoMarker {
		return false
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return false
	}
	defer d.Close()
	names, err := d.Readdirnames(8)
	if errors.Is(err, io.EOF) {
		return true // empty: a staging directory that never got further
	}
	if err != nil {
		return false
	}
	for _, n := range names {
		if n != "tree" {
			return false
		}
	}
	return true
}

// pidAlive reports whether a process pid exists (of any user's: one that
// is not ours to signal exists too) and is not a zombie: a process killed
// is one until its parent reaps it, and does nothing more.
func pidAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return (err == nil || errors.Is(err, unix.EPERM)) && !zombie(pid)
}

// removeIfOrphan removes dir, a staging directory under its first name,
// if its owner pid is gone. What proves it ferry's is its name, its owner
// and what it holds: a kill before the rename leaves at most the marker,
// written or not.
func removeIfOrphan(dir string, pid int) (bool, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !isStat || int(st.Uid) != os.Geteuid() || pidAlive(pid) {
		return false, nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	names, err := d.Readdirnames(4)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	for _, n := range names {
		if n != lockName {
			return false, nil
		}
	}
	if err := RemoveTree(dir); err != nil {
		return false, err
	}
	return true, nil
}

// removeIfStale removes dir if it is a stale staging directory.
func removeIfStale(dir string, now time.Time) (bool, error) {
	s, ok, err := openStaging(dir)
	if !ok {
		return false, err
	}
	defer s.close()
	if s.lock == nil {
		if !s.unmarkedStale(now) {
			return false, nil
		}
	} else if ok, err := s.take(); !ok {
		return false, err
	}
	// Removed while the marker is held: a live owner cannot have it, and
	// a second sweeper waits for it and then finds the marker gone.
	if err := RemoveTree(dir); err != nil {
		return false, err
	}
	return true, nil
}

// removeWhenFree removes dir once nobody holds its marker, and what is
// left of it under a first name whose owner is gone: done is false while
// an owner lives.
func removeWhenFree(dir string) (done bool, err error) {
	if done, err = removeNamedWhenFree(dir); !done || err != nil {
		return done, err
	}
	d, err := os.Open(filepath.Dir(dir))
	if err != nil {
		return false, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if final, pid, ok := stagingTemp(n); ok && final == filepath.Base(dir) {
			if pidAlive(pid) {
				done = false
				continue
			}
			if _, err := removeIfOrphan(filepath.Join(filepath.Dir(dir), n), pid); err != nil {
				return false, err
			}
		}
	}
	return done, nil
}

func removeNamedWhenFree(dir string) (done bool, err error) {
	s, ok, err := openStaging(dir)
	if err != nil {
		return false, err
	}
	if !ok {
		// Gone, or not a directory of ours: nothing of this name to wait for.
		if _, lerr := os.Lstat(dir); errors.Is(lerr, os.ErrNotExist) {
			return true, nil
		}
		return false, fmt.Errorf("%w: not a staging directory of this user's", ErrUnsafePath)
	}
	defer s.close()
	if s.lock != nil {
		ok, err := s.take()
		if err != nil {
			return false, err
		}
		if !ok {
			// Held, or removed since it was opened: look again.
			if _, lerr := os.Lstat(dir); errors.Is(lerr, os.ErrNotExist) {
				return true, nil
			}
			return false, nil
		}
	}
	return true, RemoveTree(dir)
}
