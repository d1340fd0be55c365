//go:build !linux

package archive

import (
	"errors"
	"os"
	"time"
)

// setFileTimes is not available here; the caller sets times by path.
func setFileTimes(*os.File, time.Time) error { return errors.ErrUnsupported }
