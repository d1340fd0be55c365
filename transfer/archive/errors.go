package archive

import (
	"errors"
	"fmt"
)

// Sentinels callers branch on. Every error out of Extract is an *EntryError
// whose cause wraps one of these (or an I/O error of the host's own
// filesystem, or ctx's error), so errors.Is and errors.As both work on it.
var (
	// ErrUnsafePath means an entry's name is absolute or has a ".."
	// component, or would be written through a symlink, or would swap the
	// type of a path the stream created earlier (a file over a directory, a
	// symlink over anything, anything over a symlink).
	ErrUnsafePath = errors.New("transfer: unsafe path")

	// ErrLinkEscape means a symlink would resolve outside the destination
	// (lexically, or through other symlinks of the stream), or a hard link
	// points at anything but a regular file extracted earlier from the same
	// stream. It is a kind of unsafe path: errors.Is(err, ErrUnsafePath) also
	// holds.
	ErrLinkEscape error = &kindError{msg: "transfer: link escapes the destination", kind: ErrUnsafePath}

	// ErrUnrequested means an entry lies outside every name the stream
	// was asked for (ExtractOptions.Names): a sandbox asked for "payload"
	// sent ".bashrc" too. It is a kind of unsafe path, since it would land
	// where the caller never meant to write: errors.Is(err, ErrUnsafePath)
	// also holds.
	ErrUnrequested error = &kindError{msg: "transfer: entry not requested", kind: ErrUnsafePath}

	// ErrLimit means the stream exceeds one of the Limits: total bytes,
	// entries, one file's size, a name's length, one entry's headers, or the
	// depth of a symlink chain.
	ErrLimit = errors.New("transfer: over limit")

	// ErrTruncated means the stream ended early: inside a header or a file's
	// data, or without the two zero blocks that end a tar archive.
	ErrTruncated = errors.New("transfer: truncated stream")

	// ErrUnsupported means an entry of a type the extractor never creates
	// (character or block device, FIFO, GNU incremental or multi-volume
	// entries, sparse files in the old GNU or any PAX format, unknown type
	// flags), or, for Writer, a source that is a socket, device or FIFO.
	ErrUnsupported = errors.New("transfer: unsupported entry type")

	// ErrShort means fewer entries arrived than the sender counted: a
	// stream that ended early but cleanly, between two entries.
	ErrShort = errors.New("transfer: short transfer")

	// ErrDigest means what arrived differs from what the sender's trailer
	// says was sent: a file's digest or size, or the stream's own.
	ErrDigest = errors.New("transfer: digest mismatch")
)

// kindError is a sentinel that also matches a broader sentinel.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

// EntryError names the archive entry at fault. Entry is the name as the
// archive spells it (before cleaning), so that `tar -t` finds it. When the
// header itself could not be read, Entry is the best guess from the raw
// header bytes, or "#N" for the N-th entry; at end of archive it is the
// last entry read.
type EntryError struct {
	Entry string
	Op    string // "extract", "read header", "end of archive", "symlink", "place"
	Err   error
}

func (e *EntryError) Error() string {
	if e.Entry == "" {
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s %q: %v", e.Op, clip(e.Entry), e.Err)
}

func (e *EntryError) Unwrap() error { return e.Err }

// clip shortens a hostile name for an error line; EntryError.Entry keeps
// the whole name.
func clip(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// errReplaced means a Writer found another file, or no regular file, at
// a path it had just listed as a regular file.
var errReplaced = errors.New("replaced while being read")
