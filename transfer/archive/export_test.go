package archive

import (
	"archive/tar"
	"io"
)

// EntryEncoder is what writes FormatEntries, for tests that write
// streams Writer would not: any name, any link target.
type EntryEncoder interface {
	WriteHeader(*tar.Header) error
	Write([]byte) (int, error)
	Close() error
}

// NewEntryEncoder returns the FormatEntries encoder writing to w.
func NewEntryEncoder(w io.Writer) EntryEncoder { return &entryWriter{w: w} }
