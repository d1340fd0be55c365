//go:build !unix

package archive

import (
	"os"
	"time"
)

// lchtimes is a no-op where symlink times cannot be set without following
// the link: symlinks keep the time they were created.
func lchtimes(root *os.Root, name string, mtime time.Time) error { return nil }
