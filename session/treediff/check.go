package treediff

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/cdc"
)

// checker holds what the rules of a manifest's entries need of the
// entries before: they come in strictly ascending walk order
// (archive.CompareWalk: so no name twice, and a directory before its
// contents), each inside a directory listed before it, within lim.
type checker struct {
	lim   archive.Limits
	last  string
	n     int64
	bytes int64
	dirs  map[string]bool
	links archive.LinkTree
}

func newChecker(lim archive.Limits) *checker {
	ck := &checker{lim: lim, dirs: map[string]bool{}}
	ck.links.IsDir = func(p string) bool { return ck.dirs[p] }
	return ck
}

// add checks e, the next entry.
func (ck *checker) add(e *Entry) error {
	p := e.Path
	if len(p) > ck.lim.MaxPathLen || !fs.ValidPath(p) || p == "." || strings.ContainsRune(p, 0) {
		return entryErr(p, "unsafe path")
	}
	if ck.n > 0 {
		switch archive.CompareWalk(ck.last, p) {
		case 0:
			return entryErr(p, "listed twice")
		case 1:
			return entryErr(p, "out of walk order, after %q", ck.last)
		}
	}
	if ck.n >= ck.lim.MaxEntries {
		return &archive.EntryError{Op: "manifest", Entry: p, Err: fmt.Errorf("%w: over %d entries", archive.ErrLimit, ck.lim.MaxEntries)}
	}
	ck.last = p
	ck.n++
	if d := path.Dir(p); d != "." && !ck.dirs[d] {
		return entryErr(p, "in %q, which is not a directory of the manifest", d)
	}
	if e.Mode > 0o777 {
		return entryErr(p, "mode %o", uint32(e.Mode))
	}
	if e.Type != File && (e.Size != 0 || e.Digest != "") {
		return entryErr(p, "%s with a size or digest", e.Type)
	}
	if e.Type != Symlink && e.Target != "" {
		return entryErr(p, "%s with a target", e.Type)
	}
	switch e.Type {
	case Dir:
		ck.dirs[p] = true
	case Symlink:
		// A download refuses a symlink that leaves the directory, so
		// agent mode refuses it too: both modes list the same trees.
		if err := ck.links.Symlink(p, e.Target); err != nil {
			return err
		}
	case File:
		if e.Size < 0 || e.Size > ck.lim.MaxFileSize {
			return &archive.EntryError{Op: "manifest", Entry: p, Err: fmt.Errorf("%w: file of %d bytes, at most %d", archive.ErrLimit, e.Size, ck.lim.MaxFileSize)}
		}
		if e.Size > ck.lim.MaxTotalBytes-ck.bytes {
			return &archive.EntryError{Op: "manifest", Entry: p, Err: fmt.Errorf("%w: files total over %d bytes", archive.ErrLimit, ck.lim.MaxTotalBytes)}
		}
		ck.bytes += e.Size
		if b, err := hex.DecodeString(e.Digest); err != nil || len(b) != sha256.Size || e.Digest != strings.ToLower(e.Digest) {
			return entryErr(p, "digest %q", e.Digest)
		}
	default:
		return entryErr(p, "type %q", e.Type)
	}
	return nil
}

// finish resolves the symlinks through the whole tree, as a download's
// extractor does once its stream has ended.
func (ck *checker) finish() error {
	return ck.links.Check(ck.lim.MaxLinkDepth)
}

// DigestOf is the content digest of a file holding data (see the package
// doc).
func DigestOf(data []byte) string {
	d, _ := digestReader(bytes.NewReader(data))
	return d
}

// digestReader is DigestOf of what r holds.
func digestReader(r io.Reader) (string, error) {
	ch := cdc.New(r, cdc.Default())
	h := sha256.New()
	for {
		c, err := ch.Next()
		if err == io.EOF {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", err
		}
		id := sha256.Sum256(c)
		h.Write(id[:])
	}
}
