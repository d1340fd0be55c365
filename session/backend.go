package session

import (
	"context"
	"io"
	"time"
)

// Backend is the storage under a Store: a flat namespace of objects with
// slash-separated names ("chunks/3f/3f9a...", "snapshots/KEY/7"). It is the
// contract every backend (local files through afero, S3-compatible object
// storage) implements; the conformance suite in session/backendtest checks
// it. Implementations are safe for concurrent use by several goroutines,
// and a backend shared by several processes or nodes keeps the promises of
// Put across them.
type Backend interface {
	// Get opens the object name for reading; the caller closes it. A
	// missing object is an error matching fs.ErrNotExist.
	Get(ctx context.Context, name string) (io.ReadCloser, error)

	// Put stores the object name with the bytes of r up to EOF. It is
	// atomic: a reader sees the whole new object, or the old one, or none,
	// never a part. Without exclusive it replaces an existing object and
	// renews its ModTime. With exclusive it creates the object only if no
	// object of that name exists, else fails with an error matching
	// fs.ErrExist; of two concurrent exclusive Puts of one name, at most
	// one succeeds (on disk: link(2) or O_EXCL; on S3: If-None-Match: *).
	// An error from r aborts the Put and stores nothing.
	Put(ctx context.Context, name string, r io.Reader, exclusive bool) error

	// Stat describes the object name; a missing one is an error matching
	// fs.ErrNotExist.
	Stat(ctx context.Context, name string) (ObjectInfo, error)

	// List calls fn for every object whose name starts with prefix, in no
	// particular order, and stops at fn's first error, which it returns.
	// Objects created or deleted during the listing may or may not be seen.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error

	// Delete removes the object name. It is idempotent: deleting a missing
	// object is not an error.
	Delete(ctx context.Context, name string) error
}

// ObjectInfo describes one object of a Backend.
type ObjectInfo struct {
	Name    string
	Size    int64     // stored bytes
	ModTime time.Time // last Put
}

// RangeGetter is a Backend that can read part of an object; the Store
// uses it when a Backend has it, and reads past the start otherwise. It is
// optional, so that a Backend written before it keeps working.
type RangeGetter interface {
	// GetRange opens the length bytes of the object name that start at
	// byte off, for reading; the caller closes it. A range that runs past
	// the object's end stops there (the reader returns fewer bytes); off
	// at or past the end is an error or an empty read. A missing object
	// is an error matching fs.ErrNotExist. off and length are not negative.
	GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error)
}

// LocalRanger is a RangeGetter that can say which objects it reads
// locally (a cache that holds a pack on the node's disk). The Store fetches
// a pack whole once, which such a backend keeps, and then reads the chunks
// of it that its memory no longer holds with GetRange, rather than
// fetching the whole pack again or holding every pack in memory.
type LocalRanger interface {
	RangeGetter
	// Local reports whether GetRange of name is served locally now. It
	// may be wrong a moment later (an eviction); GetRange still works.
	Local(name string) bool
}

// TempCleaner is a Backend that keeps temporary objects of its own, such
// as the files a local Put writes before it renames them into place,
// which a writer killed mid-Put leaves behind. Prune and Verify have it
// remove those last written before a time (the grace period ago, and at
// least DefaultGrace: a short grace chosen for chunks must not take the
// file of a Put in flight) and report how many.
type TempCleaner interface {
	CleanTemp(ctx context.Context, before time.Time) (int, error)
}
