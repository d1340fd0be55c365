package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

const blockSize = 512

// errHeaderLimit is what streamReader returns to archive/tar when one
// entry's headers run past Limits.MaxHeaderSize.
var errHeaderLimit = errors.New("transfer: headers over limit")

// streamReader sits between the caller's reader and archive/tar. It checks
// ctx on every read, bounds the bytes that one call to tar.Reader.Next may
// consume (archive/tar itself only bounds each extended header, not a chain
// of them), keeps the first bytes of the headers being read to name an entry
// whose header fails to parse, and records whether Next's last bytes were
// zeros: archive/tar reports io.EOF both after the two zero blocks that end
// an archive and when the stream simply stops at a block boundary, and only
// the first is a complete archive.
type streamReader struct {
	r   io.Reader
	ctx context.Context
	off int64 // bytes read so far

	inHeader bool
	hdrStart int64  // block-aligned offset where the current headers start
	hdrMax   int64  // bytes allowed from hdrStart
	zeroTail int64  // trailing zero bytes read since beginHeader
	capture  []byte // the first captureSize bytes from hdrStart
}

const captureSize = 4 * blockSize

func (s *streamReader) beginHeader(maxSize int) {
	s.inHeader = true
	s.hdrStart = (s.off + blockSize - 1) &^ (blockSize - 1)
	s.hdrMax = int64(maxSize)
	s.zeroTail = 0
	s.capture = s.capture[:0]
}

func (s *streamReader) endHeader() { s.inHeader = false }

// completeEOA reports whether the headers read since beginHeader ended in
// the two zero blocks of a proper end of archive. Padding of the previous
// entry (at most 511 bytes) is zeros too, so 1024 trailing zeros cannot be
// padding plus one block.
func (s *streamReader) completeEOA() bool { return s.zeroTail >= 2*blockSize }

func (s *streamReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	if s.inHeader {
		left := s.hdrStart + s.hdrMax - s.off
		if left <= 0 {
			return 0, errHeaderLimit
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := s.r.Read(p)
	if s.inHeader && n > 0 {
		s.note(p[:n])
	}
	s.off += int64(n)
	return n, err
}

// note records header bytes read at s.off.
func (s *streamReader) note(b []byte) {
	if j := lastNonZero(b); j < 0 {
		s.zeroTail += int64(len(b))
	} else {
		s.zeroTail = int64(len(b) - 1 - j)
	}
	start := s.off
	if skip := s.hdrStart - start; skip > 0 {
		if skip >= int64(len(b)) {
			return
		}
		b = b[skip:]
	}
	if room := captureSize - len(s.capture); room > 0 {
		s.capture = append(s.capture, b[:min(room, len(b))]...)
	}
}

func lastNonZero(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

// guessName extracts a name for an entry whose headers failed to parse,
// from the first bytes of those headers: a PAX "path" record, a GNU long
// name, or the block's own name field with the PaxHeaders component that
// archivers add dropped. It is for error messages only.
func guessName(raw []byte) string {
	if len(raw) < 100 {
		return ""
	}
	name := cString(raw[:100])
	if len(raw) >= 500 && string(raw[257:262]) == "ustar" {
		if prefix := cString(raw[345:500]); prefix != "" {
			name = prefix + "/" + name
		}
	}
	var typ byte
	if len(raw) > 156 {
		typ = raw[156]
	}
	data := raw[min(len(raw), blockSize):]
	switch typ {
	case 'x':
		for rec := range strings.SplitSeq(string(data), "\n") {
			if _, kv, ok := strings.Cut(rec, " "); ok {
				if v, ok := strings.CutPrefix(kv, "path="); ok {
					return v
				}
			}
		}
		var parts []string
		for c := range strings.SplitSeq(name, "/") {
			if !strings.HasPrefix(c, "PaxHeaders") {
				parts = append(parts, c)
			}
		}
		return strings.Join(parts, "/")
	case 'L':
		if len(data) > 0 {
			return cString(data)
		}
	}
	return name
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// headerError turns an error from tar.Reader.Next into an EntryError
// naming the entry as well as the raw header bytes allow.
func (s *streamReader) headerError(err error, index int64) error {
	entry := guessName(s.capture)
	if entry == "" {
		entry = fmt.Sprintf("#%d", index)
	}
	switch {
	case errors.Is(err, errHeaderLimit):
		err = fmt.Errorf("%w: headers of one entry over %d bytes", ErrLimit, s.hdrMax)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		err = fmt.Errorf("%w: inside the header", ErrTruncated)
	case errors.Is(err, tar.ErrFieldTooLong):
		err = fmt.Errorf("%w: %w", ErrLimit, err)
	}
	return &EntryError{Entry: entry, Op: "read header", Err: err}
}
