package treediff

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// Format is the version of the manifest and document JSON this package
// writes; readers refuse others.
const Format = 1

// Type is what an entry is.
type Type string

// The types an entry can be. Sockets, FIFOs and devices are not listed,
// as a session save skips them.
const (
	File    Type = "file"
	Dir     Type = "dir"
	Symlink Type = "symlink"
)

// Manifest lists one sandbox directory at one moment.
type Manifest struct {
	Format  int       `json:"format"`
	Sandbox string    `json:"sandbox,omitempty"`
	Dir     string    `json:"dir"`
	Time    time.Time `json:"time"`
	// Mode is how the manifest was taken: "agent" (next to the data) or
	// "posix" (from a downloaded copy, MovedContents set).
	Mode          string `json:"mode"`
	MovedContents bool   `json:"moved_contents"`
	// WireBytes is what crossed the channel to take it.
	WireBytes int64 `json:"wire_bytes"`
	// ContentCap is the size up to which a text file's content was
	// kept in Entry.Text (0: none was); ContentOmitted counts the text
	// files under it that were not, the total cap reached.
	ContentCap     int64   `json:"content_cap,omitempty"`
	ContentOmitted int64   `json:"content_omitted,omitempty"`
	Entries        []Entry `json:"entries"`
}

// Entry is one path of a manifest.
type Entry struct {
	// Path is slash-separated and relative to the manifest's Dir.
	Path string `json:"path"`
	Type Type   `json:"type"`
	Mode Perm   `json:"mode"`
	Size int64  `json:"size,omitempty"` // of a file
	// Digest is a file's content digest (see the package doc), hex.
	Digest string `json:"digest,omitempty"`
	Target string `json:"target,omitempty"` // of a symlink
	// MTime is Unix nanoseconds; the diff does not compare it, but a
	// file whose mtime moved and whose claimed digest did not is read
	// and checked (see ManifestOptions.Since).
	MTime int64 `json:"mtime"`
	// Text is a small text file's content, kept for --content's unified
	// diffs; nil when not kept.
	Text *string `json:"text,omitempty"`

	// chunks are the scan's, for the reads that check a digest or keep
	// the text; a manifest read from a file has none.
	chunks []session.ChunkRef
}

// Perm is an entry's permission bits, written as four octal digits
// ("0644") in JSON.
type Perm fs.FileMode

// MarshalJSON writes p as "0644".
func (p Perm) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`"%04o"`, uint32(p))), nil
}

// UnmarshalJSON reads "0644", refusing anything over 0777.
func (p *Perm) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || len(s) != 4 || v > 0o777 {
		return fmt.Errorf("mode %q: want four octal digits up to 0777", s)
	}
	*p = Perm(v)
	return nil
}

// ErrManifest matches a manifest that this package refuses: malformed
// JSON, another format, or an entry that breaks its rules (named in the
// error).
var ErrManifest = errors.New("treediff: invalid manifest")

// maxManifestBytes bounds the JSON ReadManifest reads: a million entries
// of a few hundred bytes, and the kept texts.
const maxManifestBytes = 1 << 30

// ReadManifest reads a manifest written by WriteJSON and checks it as a
// sandbox's answer is checked, under lim (zero fields: archive's
// defaults). An error matches ErrManifest, or archive.ErrLimit or
// archive.ErrLinkEscape, and names the entry at fault.
func ReadManifest(r io.Reader, lim archive.Limits) (*Manifest, error) {
	lim, err := lim.WithDefaults()
	if err != nil {
		return nil, err
	}
	lr := &io.LimitedReader{R: r, N: maxManifestBytes + 1}
	dec := json.NewDecoder(lr)
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		if lr.N <= 0 {
			return nil, fmt.Errorf("%w: over %d bytes", ErrManifest, maxManifestBytes)
		}
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the manifest", ErrManifest)
	}
	if m.Format != Format {
		return nil, fmt.Errorf("%w: format %d, want %d", ErrManifest, m.Format, Format)
	}
	if m.Dir == "" || strings.ContainsAny(m.Dir, "\x00\n") {
		return nil, fmt.Errorf("%w: bad dir %q", ErrManifest, m.Dir)
	}
	if m.Mode != "agent" && m.Mode != "posix" {
		return nil, fmt.Errorf("%w: mode %q", ErrManifest, m.Mode)
	}
	if m.ContentCap < 0 || m.ContentOmitted < 0 || m.WireBytes < 0 {
		return nil, fmt.Errorf("%w: negative count", ErrManifest)
	}
	ck := newChecker(lim)
	for i := range m.Entries {
		e := &m.Entries[i]
		if err := ck.add(e); err != nil {
			return nil, err
		}
		if err := checkText(e, m.ContentCap); err != nil {
			return nil, err
		}
	}
	if err := ck.finish(); err != nil {
		return nil, err
	}
	return &m, nil
}

// checkText refuses a kept text that is not the file's: another size or
// digest, not text, over the cap.
func checkText(e *Entry, cap int64) error {
	if e.Text == nil {
		return nil
	}
	t := []byte(*e.Text)
	switch {
	case e.Type != File:
		return entryErr(e.Path, "text of a %s", e.Type)
	case int64(len(t)) != e.Size || e.Size > cap:
		return entryErr(e.Path, "text of %d bytes for a file of %d, cap %d", len(t), e.Size, cap)
	case !isText(t):
		return entryErr(e.Path, "text that is not text")
	case DigestOf(t) != e.Digest:
		return entryErr(e.Path, "text whose digest is not the file's")
	}
	return nil
}

// isText reports whether b is what --content diffs: UTF-8 without NUL.
func isText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

// WriteJSON writes m as indented JSON.
func (m *Manifest) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(m)
}

// digestOfChunks is a file's content digest from its chunk list.
func digestOfChunks(chunks []session.ChunkRef) string {
	h := sha256.New()
	for _, c := range chunks {
		h.Write(c.ID[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func entryErr(p, format string, args ...any) error {
	return &archive.EntryError{Op: "manifest", Entry: p, Err: fmt.Errorf("%w: %s", ErrManifest, fmt.Sprintf(format, args...))}
}
