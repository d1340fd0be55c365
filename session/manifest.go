package session

import (
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"time"
)

// Kind is the type of a manifest entry.
type Kind string

const (
	KindDir     Kind = "dir"
	KindFile    Kind = "file"
	KindSymlink Kind = "symlink"
)

// manifestFormat is the version written in every manifest; readers refuse
// others.
const manifestFormat = 1

// Limits on a manifest read from the store, which is input like any other:
// a damaged or hostile object must not exhaust memory.
const (
	maxManifestStored  = 64 << 20  // compressed bytes
	maxManifestDecoded = 256 << 20 // JSON bytes
	maxEntries         = 1 << 20
	maxPathLen         = 4096
	maxTargetLen       = 4096
)

// Manifest is one committed snapshot of a key: the tree and its totals. It
// is immutable once committed.
type Manifest struct {
	Format    int       `json:"format"`
	Key       string    `json:"key"`
	Seq       int64     `json:"seq"`
	Parent    int64     `json:"parent,omitempty"` // the snapshot the save started from, 0 if none
	Time      time.Time `json:"time"`             // when the save committed, by the saver's clock
	Files     int64     `json:"files"`
	Dirs      int64     `json:"dirs"`
	Symlinks  int64     `json:"symlinks"`
	Bytes     int64     `json:"bytes"`     // of file contents
	NewBytes  int64     `json:"new_bytes"` // plaintext of the chunks this save stored
	NewChunks int64     `json:"new_chunks"`
	Entries   []Entry   `json:"entries"` // sorted by Path, parents before children
}

// Entry is one file, directory or symlink of a snapshot. The root of the
// saved tree has no entry.
type Entry struct {
	Path   string      `json:"path"` // slash-separated, relative, clean
	Kind   Kind        `json:"kind"`
	Mode   fs.FileMode `json:"mode"`  // permission bits only
	MTime  int64       `json:"mtime"` // Unix nanoseconds
	Size   int64       `json:"size,omitempty"`
	Target string      `json:"target,omitempty"` // of a symlink
	Chunks []ChunkRef  `json:"chunks,omitempty"` // of a file, in order
}

// ModTime returns e.MTime as a time.
func (e *Entry) ModTime() time.Time { return time.Unix(0, e.MTime) }

// ChunkRef is one chunk of a file.
type ChunkRef struct {
	ID   ID    `json:"id"`
	Size int64 `json:"size"`
}

// Info summarizes m for listings.
func (m *Manifest) Info() SnapshotInfo {
	return SnapshotInfo{Key: m.Key, Seq: m.Seq, Time: m.Time, Files: m.Files, Bytes: m.Bytes, NewBytes: m.NewBytes, NewChunks: m.NewChunks}
}

// SnapshotInfo is a line of List.
type SnapshotInfo struct {
	Key       string    `json:"key"`
	Seq       int64     `json:"seq"`
	Time      time.Time `json:"time"`
	Files     int64     `json:"files"`
	Bytes     int64     `json:"bytes"`
	NewBytes  int64     `json:"new_bytes"`
	NewChunks int64     `json:"new_chunks"`
	// Err is set, and the fields but Key and Seq are zero, for a snapshot
	// whose manifest cannot be read: List names it and goes on.
	Err string `json:"error,omitempty"`
}

const snapshotPrefix = "snapshots/"

func manifestName(key string, seq int64) string {
	return snapshotPrefix + key + "/" + strconv.FormatInt(seq, 10)
}

// decodeManifest reads a stored manifest whole and validates it as
// untrusted input: see entryChecker. Every error matches ErrManifest, but r's.
func decodeManifest(r io.Reader) (*Manifest, error) {
	var entries []Entry
	m, err := readManifest(r, func(e *Entry) error {
		entries = append(entries, *e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.Entries = entries
	return m, nil
}

// validateHeader is validate without the entries.
func (m *Manifest) validateHeader() error {
	if m.Format != manifestFormat {
		return fmt.Errorf("format %d, want %d", m.Format, manifestFormat)
	}
	if err := ValidKey(m.Key); err != nil {
		return err
	}
	if m.Seq < 1 || m.Parent < 0 || m.Parent >= m.Seq {
		return fmt.Errorf("sequence %d, parent %d", m.Seq, m.Parent)
	}
	if m.NewBytes < 0 || m.NewChunks < 0 {
		return fmt.Errorf("negative new bytes or chunks")
	}
	return nil
}

func (e *Entry) validate() error {
	if len(e.Path) > maxPathLen || !fs.ValidPath(e.Path) || e.Path == "." || strings.ContainsRune(e.Path, 0) {
		return fmt.Errorf("entry %q: unsafe path", e.Path)
	}
	if e.Mode&^fs.ModePerm != 0 {
		return fmt.Errorf("entry %q: mode %v: only permission bits are kept", e.Path, e.Mode)
	}
	switch e.Kind {
	case KindDir:
		if e.Size != 0 || e.Target != "" || len(e.Chunks) != 0 {
			return fmt.Errorf("entry %q: directory with size, target or chunks", e.Path)
		}
	case KindSymlink:
		if e.Size != 0 || len(e.Chunks) != 0 {
			return fmt.Errorf("entry %q: symlink with size or chunks", e.Path)
		}
		if e.Target == "" || len(e.Target) > maxTargetLen || strings.ContainsRune(e.Target, 0) {
			return fmt.Errorf("entry %q: bad symlink target", e.Path)
		}
	case KindFile:
		if e.Target != "" {
			return fmt.Errorf("entry %q: file with a target", e.Path)
		}
		var sum int64
		for _, c := range e.Chunks {
			if c.Size < 1 || c.Size > MaxChunkSize {
				return fmt.Errorf("entry %q: chunk %s of %d bytes", e.Path, c.ID, c.Size)
			}
			sum += c.Size
		}
		if sum != e.Size {
			return fmt.Errorf("entry %q: size %d, chunks add up to %d", e.Path, e.Size, sum)
		}
	default:
		return fmt.Errorf("entry %q: unknown kind %q", e.Path, e.Kind)
	}
	return nil
}
