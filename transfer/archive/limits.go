package archive

import (
	"fmt"
)

// Limits bound what Extract accepts from a stream. A zero field takes
// DefaultLimits' value; a negative one is an error (there is no "unlimited":
// ask for math.MaxInt64 explicitly).
type Limits struct {
	// MaxTotalBytes bounds the sum of the sizes of all regular files in
	// the stream, skipped ones included (they are read too).
	MaxTotalBytes int64
	// MaxEntries bounds the number of entries (headers that name a file,
	// directory, link or global PAX record).
	MaxEntries int64
	// MaxFileSize bounds one regular file's size. Sparse entries, whose
	// logical size their bytes on the wire do not bound (2 GiB of holes
	// from 4 KiB), are refused whatever their size (ErrUnsupported), so a
	// file's size is the data that arrives for it.
	MaxFileSize int64
	// MaxPathLen bounds the length in bytes of an entry's name and of a
	// link's target.
	MaxPathLen int
	// MaxHeaderSize bounds the bytes of one entry's headers: its PAX and GNU
	// long-name extended headers together with its own 512-byte block. It
	// is enforced while the headers are read, so an endless chain of
	// extended headers stops there. archive/tar refuses any one extended
	// header over 1 MiB whatever this says. Values under 1024 count as 1024
	// (the end-of-archive marker is two blocks).
	MaxHeaderSize int
	// MaxLinkDepth bounds how many symlinks are followed when checking
	// where a symlink of the stream resolves; a longer chain is refused.
	MaxLinkDepth int
	// MaxCompressionRatio bounds decompressed bytes per compressed byte.
	// Extract reads plain tar and does not use it; the compressed modes
	// apply it to the bytes they decompress.
	MaxCompressionRatio int
}

// DefaultLimits are the safe defaults that zero fields of Limits take.
// MaxLinkDepth matches Linux's MAXSYMLINKS. It is a function, not a
// variable, so that no caller can loosen every other caller's limits.
func DefaultLimits() Limits {
	return Limits{
		MaxTotalBytes:       64 << 30,
		MaxEntries:          1 << 20,
		MaxFileSize:         16 << 30,
		MaxPathLen:          4096,
		MaxHeaderSize:       1 << 20,
		MaxLinkDepth:        40,
		MaxCompressionRatio: 1000,
	}
}

// WithDefaults fills zero fields from DefaultLimits and refuses negative
// ones.
func (l Limits) WithDefaults() (Limits, error) {
	d := DefaultLimits()
	for _, f := range []struct {
		name string
		v    *int64
		def  int64
	}{
		{"MaxTotalBytes", &l.MaxTotalBytes, d.MaxTotalBytes},
		{"MaxEntries", &l.MaxEntries, d.MaxEntries},
		{"MaxFileSize", &l.MaxFileSize, d.MaxFileSize},
	} {
		if *f.v < 0 {
			return l, fmt.Errorf("transfer: negative limit %s", f.name)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxPathLen", &l.MaxPathLen, d.MaxPathLen},
		{"MaxHeaderSize", &l.MaxHeaderSize, d.MaxHeaderSize},
		{"MaxLinkDepth", &l.MaxLinkDepth, d.MaxLinkDepth},
		{"MaxCompressionRatio", &l.MaxCompressionRatio, d.MaxCompressionRatio},
	} {
		if *f.v < 0 {
			return l, fmt.Errorf("transfer: negative limit %s", f.name)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	l.MaxHeaderSize = max(l.MaxHeaderSize, 2*blockSize)
	return l, nil
}
