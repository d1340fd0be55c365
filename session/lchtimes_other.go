//go:build !unix

package session

import "time"

// lchtimes is a no-op where symlink times cannot be set.
func lchtimes(path string, mtime time.Time) error { return nil }
