//go:build unix

package transfertest

import (
	"time"

	"golang.org/x/sys/unix"
)

// Lchtimes sets the mtime (and atime) of path itself, not of what a
// symlink at path points at.
func Lchtimes(path string, mtime time.Time) error {
	// atime too: UTIME_OMIT is not defined everywhere, and nothing reads
	// a symlink's atime.
	t := unix.Timespec{Sec: mtime.Unix(), Nsec: int64(mtime.Nanosecond())}
	ts := []unix.Timespec{t, t}
	return unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, unix.AT_SYMLINK_NOFOLLOW)
}
