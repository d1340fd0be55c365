//go:build !linux

package archive

import (
	"errors"
	"time"
)

// futimens is not available here; the caller sets times by path.
func futimens(int, time.Time) error { return errors.ErrUnsupported }
