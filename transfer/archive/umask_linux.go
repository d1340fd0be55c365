package archive

import (
	"bytes"
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// createMask reports the process's umask, and whether a file created in
// the directory tree (and in directories created below it) gets exactly
// the mode asked for less that umask. That holds unless the directory has
// a default ACL, whose mask applies instead of the umask. The umask comes
// from /proc (Linux 4.7 and later): reading it with umask(2) would set it
// for a moment, under the feet of any other goroutine creating a file. A
// umask the program changes during the extraction is not seen; ferry
// never changes it.
func createMask(tree string) (umask uint32, ok bool) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	_, rest, found := bytes.Cut(status, []byte("\nUmask:"))
	if !found {
		return 0, false
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	m, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 8, 32)
	if err != nil || m&^0o777 != 0 {
		return 0, false
	}
	_, err = unix.Getxattr(tree, "system.posix_acl_default", nil)
	if !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) {
		return 0, false // a default ACL, or no way to tell
	}
	return uint32(m), true
}
