package frame

import (
	"errors"
	"io"
)

// Sentinels callers branch on. Every error out of Reader wraps one of these
// (or an I/O error of the underlying reader), so errors.Is works on it.
var (
	// ErrTruncated means the stream ended before its trailer: inside the
	// stream header, a block header, a block's payload or the trailer, or
	// cleanly at a block boundary with no trailer at all. It also matches
	// io.ErrUnexpectedEOF, so code written for plain readers treats it as a
	// short stream.
	ErrTruncated error = &kindError{msg: "frame: truncated stream", kind: io.ErrUnexpectedEOF}

	// ErrCorrupt means the stream is not one a Writer produces: a bad magic
	// or version, an unknown block type, inconsistent lengths, a zstd
	// payload that does not decode to its declared length, or a trailer
	// whose byte count, block count or digest differs from what was read.
	ErrCorrupt = errors.New("frame: corrupt stream")

	// ErrLimit means a block header asks for more than ReaderOptions
	// allows: a plaintext length over MaxBlockSize, a compression ratio over
	// MaxRatio, or a running total over MaxTotal. It is reported before the
	// block is read or decoded.
	ErrLimit = errors.New("frame: over limit")
)

var errClosed = errors.New("frame: write after close")

// kindError is a sentinel that also matches a broader sentinel.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }
