package posix

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// Sentinels callers branch on. Path errors come as *fs.PathError whose Err
// is one of these; ErrNotExist and ErrExist also match fs.ErrNotExist and
// fs.ErrExist.
var (
	// ErrNotExist means a path in the sandbox is missing: a Download
	// source or its directory, or PlaceInto's destination.
	ErrNotExist = fmt.Errorf("posix: %w", fs.ErrNotExist)
	// ErrExist means something is in the way: PlaceNew's destination
	// exists, PlaceAs's is a directory (or anything, for a directory
	// entry), or PlaceInto would put a directory where a non-directory is
	// or the other way round.
	ErrExist = fmt.Errorf("posix: %w", fs.ErrExist)
	// ErrNotDir means a path that must be a directory is not one:
	// PlaceInto's destination, or Download's dir.
	ErrNotDir = errors.New("posix: not a directory")
	// ErrInvalidPath means a path or name was refused before any call:
	// empty, holding NUL, newline or carriage return, or (for a Download
	// name) absolute or leading out of its directory.
	ErrInvalidPath = errors.New("posix: invalid path")
	// ErrEntryCount means the sandbox extracted a different number of
	// entries than the caller said the archive holds. It matches
	// archive.ErrShort, as agent mode's count mismatch does.
	ErrEntryCount = fmt.Errorf("posix: entry count mismatch: %w", archive.ErrShort)
	// ErrTruncated means the archive given to Upload ended without the
	// two zero blocks that end a tar stream. Both GNU and busybox tar
	// accept such a stream silently when it stops between entries, so
	// Upload refuses it on the host and the relay kills the extraction.
	// It matches archive.ErrTruncated, as the host's extractor's refusal
	// of such a stream does.
	ErrTruncated = fmt.Errorf("posix: archive ends without end-of-archive blocks: %w", archive.ErrTruncated)
)

// ExitError reports a command in the sandbox that failed: tar, or a step
// of the placement (mkdir, mv), or the shell itself.
type ExitError struct {
	// Op is the failing command, such as "tar -x" or "mv".
	Op string
	// Code is its exit status.
	Code int
	// Stderr is what the script wrote to stderr, trimmed and bounded
	// (a login shell's banner included).
	Stderr string
}

func (e *ExitError) Error() string {
	if e.Stderr == "" {
		return fmt.Sprintf("posix: %s exited %d", e.Op, e.Code)
	}
	return fmt.Sprintf("posix: %s exited %d: %s", e.Op, e.Code, e.Stderr)
}
