//go:build unix && !linux

package fdfile

import (
	"errors"
	"time"
)

// SetMtime is not available here (no futimens with UTIME_OMIT in
// x/sys/unix's portable set): errors.ErrUnsupported, and the caller sets
// the mtime by path.
func (f *File) SetMtime(time.Time) error { return errors.ErrUnsupported }
