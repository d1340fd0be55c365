//go:build unix

package archive

import (
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"
)

// lchtimes sets the mtime of name itself, a symlink in root; os.Root's
// Chtimes would follow it.
func lchtimes(root *os.Root, name string, mtime time.Time) error {
	dir, err := root.Open(parentDir(name))
	if err != nil {
		return err
	}
	defer dir.Close()
	rc, err := dir.SyscallConn()
	if err != nil {
		return err
	}
	// atime too: UTIME_OMIT is not defined everywhere, and nothing reads
	// a symlink's atime.
	t := unix.Timespec{Sec: mtime.Unix(), Nsec: int64(mtime.Nanosecond())}
	ts := []unix.Timespec{t, t}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.UtimesNanoAt(int(fd), path.Base(name), ts, unix.AT_SYMLINK_NOFOLLOW)
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "lutimes", Path: name, Err: serr}
	}
	return nil
}
