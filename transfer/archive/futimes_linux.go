package archive

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futimens sets the mtime of the open file fd, leaving its atime: through
// the descriptor, not the path, which spares a walk of the path through
// os.Root per file (a fifth of extraction time on many small files).
func futimens(fd int, mtime time.Time) error {
	ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime.UnixNano())}
	// utimensat with a NULL path acts on fd itself: futimens(3).
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
