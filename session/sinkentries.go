package session

import (
	"errors"
	"fmt"
	"io"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// The sink's entries: Add keeps them as records in a spill (memory up to
// spillBudget, a private temp file beyond), so that a save's memory does
// not grow with the tree; the manifest is checked by one pass over them in
// path order and written by a second one, straight into the backend's
// Put.

// addEntry records e, which Entry.validate accepts, once it is within
// the limits of a restore (see checkSaveLimits) and of the manifest
// reader, and a symlink's target passes archive.CheckLinkTarget: a save
// fails at the first entry that cannot be restored, before the chunks of
// the rest are sent. k.mu is held.
func (k *sink) addEntry(e *Entry) error {
	if err := checkSaveLimits(k.s.cfg.Limits, e, int64(k.entries.n), k.totals.Bytes); err != nil {
		return err
	}
	if e.Kind == KindSymlink {
		if err := archive.CheckLinkTarget(e.Path, e.Target); err != nil {
			return err
		}
	}
	if k.json += minEntryJSON(e); k.json > maxManifestDecoded || k.entries.size > maxManifestDecoded {
		return fmt.Errorf("%w: entry %q: entries over the %d bytes of JSON a manifest holds", ErrManifest, e.Path, maxManifestDecoded)
	}
	if err := k.entries.add(e); err != nil {
		return err
	}
	switch e.Kind {
	case KindDir:
		k.totals.Dirs++
	case KindFile:
		k.totals.Files++
		k.totals.Bytes += e.Size
	case KindSymlink:
		k.totals.Symlinks++
	}
	return nil
}

// checkEntries validates m with the sink's entries as a reader would (see
// entryChecker); a manifest it refuses is an error matching ErrManifest.
// It then resolves the symlinks through the tree as a restore's extractor
// does (archive.LinkTree): one that escapes it, or a chain too long, is
// an error matching archive.ErrLinkEscape or archive.ErrLimit, naming
// the symlink.
func (k *sink) checkEntries(m *Manifest) error {
	if err := m.validateHeader(); err != nil {
		return fmt.Errorf("%w: %v", ErrManifest, err)
	}
	var ck entryChecker
	// The checker holds the directories already.
	links := archive.LinkTree{IsDir: func(p string) bool { return ck.dirs[p] }}
	var bad error
	err := k.each(func(e *Entry) error {
		if bad = ck.check(e); bad != nil {
			return bad
		}
		if e.Kind == KindSymlink {
			return links.Symlink(e.Path, e.Target)
		}
		return nil
	})
	if bad == nil {
		bad = ck.totals(m)
	}
	if err != nil && err != bad {
		return err
	}
	if bad != nil {
		return fmt.Errorf("%w: %v", ErrManifest, bad)
	}
	return links.Check(k.s.cfg.Limits.MaxLinkDepth)
}

// each seals the sink's entries and calls fn with each of them, in path
// order. The Entry is fn's only during the call.
func (k *sink) each(fn func(*Entry) error) error {
	if err := k.entries.seal(); err != nil {
		return err
	}
	it := k.entries.iter()
	var e Entry
	for {
		rec, err := it.next()
		if err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		if err := decodeRecord(rec, &e); err != nil {
			return err
		}
		if err := fn(&e); err != nil {
			return err
		}
	}
}

// body streams the stored form of the manifest m (all but its entries)
// with the sink's entries, encoded as they are read: what Save's commit
// puts. An error encoding it (the limits of a manifest) fails the read,
// so that the Put stores nothing. Close ends the encoding and waits for
// it; it must be called, also after a failed Put.
func (k *sink) body(m *Manifest) io.ReadCloser {
	pr, pw := io.Pipe()
	b := &manifestBody{pr: pr, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		pw.CloseWithError(writeManifest(pw, m, k.each))
	}()
	return b
}

// close releases the sink's entries; body must be closed first.
func (k *sink) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sealed = true
	k.entries.close()
}

// manifestBody is the reader sink.body returns.
type manifestBody struct {
	pr   *io.PipeReader
	done chan struct{}
}

var errBodyClosed = errors.New("manifest body closed")

func (b *manifestBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b *manifestBody) Close() error {
	b.pr.CloseWithError(errBodyClosed)
	<-b.done
	return nil
}
