package session

import (
	"fmt"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/cdc"
)

// A save commits only what a restore of it accepts (DESIGN.md), so it
// applies the restore's limits before its commit: those of the extractor
// that builds the tree in the sandbox (Config.Limits: one file's
// size, the total, the entries, the symlinks' rules through
// archive.LinkTree) and those of the manifest reader (maxEntries,
// maxManifestDecoded). A save over one fails with an error naming the
// entry, matching archive.ErrLimit (or archive.ErrLinkEscape for a
// symlink), and commits nothing; the key's earlier snapshots stay as
// they were.

// maxSaveEntries bounds a snapshot's entries under lim: a restore into a
// new directory sends the root as one more entry, which the extractor
// counts.
func maxSaveEntries(lim archive.Limits) int64 { return min(maxEntries, lim.MaxEntries-1) }

// minChunkJSON is the fewest bytes one chunk reference takes in a
// manifest's JSON: {"id":"<64 hex digits>","size":N} and a comma.
const minChunkJSON = 83

// minEntryJSON bounds from below the JSON of e in a manifest, so that a
// save stops as soon as its entries cannot fit maxManifestDecoded, long
// before it writes the manifest (which the cap checks exactly).
func minEntryJSON(e *Entry) int64 {
	return int64(len(`{"path":"","kind":"dir","mode":0,"mtime":0},`)+len(e.Path)+len(e.Target)) + minChunkJSON*int64(len(e.Chunks))
}

// maxFileChunks is the most chunks cdc.Default() cuts a file of size bytes
// into: every chunk but the last is over cdc.Default().Min bytes. DirSource
// cuts with it, and asks ferry's agent to cut with it; chunk lists a save
// reuses from its parent were cut by one of them.
func maxFileChunks(size int64) int64 {
	if size <= 0 {
		return 0
	}
	return (size-1)/int64(cdc.Default().Min) + 1
}

// checkSaveLimits refuses e, the next entry of a save whose entries so far
// are n and total bytes total, if a restore under lim would refuse it.
func checkSaveLimits(lim archive.Limits, e *Entry, n, total int64) error {
	if n >= maxSaveEntries(lim) {
		return fmt.Errorf("%w: entry %q: over %d entries, which a restore takes at most", archive.ErrLimit, e.Path, maxSaveEntries(lim))
	}
	if e.Kind != KindFile {
		return nil
	}
	if e.Size > lim.MaxFileSize {
		return fmt.Errorf("%w: entry %q: file of %d bytes, a restore takes at most %d", archive.ErrLimit, e.Path, e.Size, lim.MaxFileSize)
	}
	if e.Size > lim.MaxTotalBytes-total {
		return fmt.Errorf("%w: entry %q: files total over %d bytes, which a restore takes at most", archive.ErrLimit, e.Path, lim.MaxTotalBytes)
	}
	return nil
}
