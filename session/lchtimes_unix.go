//go:build unix

package session

import (
	"time"

	"golang.org/x/sys/unix"
)

// lchtimes sets the mtime (and atime) of the symlink path itself.
func lchtimes(path string, mtime time.Time) error {
	t := unix.NsecToTimespec(mtime.UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
}
